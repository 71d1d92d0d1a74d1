import CCurl

/// libcurl, opened at the first transfer (see `SharedLibrary`) and initialised once (`curl_global_init`,
/// before any handle). Every libcurl call goes through its `functions`.
enum CurlLibrary {
    typealias Loaded = SharedLibrary.Loaded<jotter_curl_functions>

    /// The process's libcurl, or why there is none.
    static let shared: Result<Loaded, SharedLibrary.Missing> = Result { () throws(SharedLibrary.Missing) in
        try load(soname: "libcurl.so.4", package: "libcurl4")
    }

    /// Opens `soname` and initialises it.
    static func load(soname: String, package: String) throws(SharedLibrary.Missing) -> Loaded {
        try Loaded(soname: soname, package: package, resolve: jotter_curl_resolve) { functions in
            // Without it (out of memory, OpenSSL failing to start) no handle could be made: every delivery
            // would fail and be retried for ever. Refused here, it is reported at start like a missing library.
            let code = jotter_curl_global_init(functions, Int(CURL_GLOBAL_DEFAULT))
            return code == CURLE_OK ? nil : "curl_global_init failed with code \(code.rawValue)"
        }
    }
}
