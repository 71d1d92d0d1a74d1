import CCurl
import Glibc

/// libcurl, opened at the first transfer (see `SharedLibrary`) and initialised once
/// (`curl_global_init`, before any handle). Every libcurl call goes through `functions`.
///
/// `@unchecked Sendable`: `functions` is written once in `init`, before the instance is shared, and only
/// read afterwards; the library stays open for the process.
final class CurlLibrary: @unchecked Sendable {
    /// The process's libcurl, or why there is none.
    static let shared: Result<CurlLibrary, SharedLibrary.Missing> = Result { () throws(SharedLibrary.Missing) in
        try CurlLibrary(soname: "libcurl.so.4", package: "libcurl4")
    }

    /// The functions, for the `jotter_curl_…` wrappers.
    let functions: jotter_curl

    /// Opens `soname` and initialises it.
    init(soname: String, package: String) throws(SharedLibrary.Missing) {
        let library = try SharedLibrary.open(soname, package: package)
        let table = UnsafeMutablePointer<jotter_curl_functions>.allocate(capacity: 1)
        if let missing = jotter_curl_resolve(library, table) {
            table.deallocate()
            dlclose(library)
            throw SharedLibrary.Missing(soname: soname, package: package, reason: "it lacks \(String(cString: missing))")
        }
        // Without it (out of memory, OpenSSL failing to start) no handle could be made: every delivery would
        // fail and be retried for ever. Refused here, it is reported at start like a missing library.
        let code = jotter_curl_global_init(table, Int(CURL_GLOBAL_DEFAULT))
        guard code == CURLE_OK else {
            table.deallocate()
            dlclose(library)
            throw SharedLibrary.Missing(soname: soname, package: package,
                                        reason: "curl_global_init failed with code \(code.rawValue)")
        }
        functions = UnsafePointer(table)
    }

    deinit {
        UnsafeMutablePointer(mutating: functions).deallocate()
    }
}
