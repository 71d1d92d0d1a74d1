import CLibPQ
import Glibc

/// libpq, opened at the first connection (see `SharedLibrary`). Every libpq call goes through `functions`.
///
/// `@unchecked Sendable`: `functions` is written once in `init`, before the instance is shared, and only
/// read afterwards; the library stays open for the process.
final class PostgresLibrary: @unchecked Sendable {
    /// The process's libpq, or why there is none.
    static let shared: Result<PostgresLibrary, SharedLibrary.Missing> = Result { () throws(SharedLibrary.Missing) in
        try PostgresLibrary(soname: "libpq.so.5", package: "libpq5")
    }

    /// The functions, for the `jotter_PQ…` wrappers.
    let functions: jotter_pq

    /// Opens `soname`.
    init(soname: String, package: String) throws(SharedLibrary.Missing) {
        let library = try SharedLibrary.open(soname, package: package)
        let table = UnsafeMutablePointer<jotter_pq_functions>.allocate(capacity: 1)
        if let missing = jotter_pq_resolve(library, table) {
            table.deallocate()
            dlclose(library)
            throw SharedLibrary.Missing(soname: soname, package: package, reason: "it lacks \(String(cString: missing))")
        }
        functions = UnsafePointer(table)
    }

    deinit {
        UnsafeMutablePointer(mutating: functions).deallocate()
    }
}
