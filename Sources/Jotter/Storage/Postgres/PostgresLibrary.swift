import CLibPQ

/// libpq, opened at the first connection (see `SharedLibrary`). Every libpq call goes through its
/// `functions`.
enum PostgresLibrary {
    typealias Loaded = SharedLibrary.Loaded<jotter_pq_functions>

    /// The process's libpq, or why there is none.
    static let shared: Result<Loaded, SharedLibrary.Missing> = Result { () throws(SharedLibrary.Missing) in
        try load(soname: "libpq.so.5", package: "libpq5")
    }

    /// Opens `soname`.
    static func load(soname: String, package: String) throws(SharedLibrary.Missing) -> Loaded {
        try Loaded(soname: soname, package: package, resolve: jotter_pq_resolve)
    }
}
