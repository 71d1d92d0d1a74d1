import Glibc

/// A system library opened when first needed (`dlopen`) instead of linked, for what only some
/// configurations use. Linked, libcurl and libpq made every process map them and the twenty-odd libraries
/// they pull in (Kerberos, LDAP, SSH, …) before `main`: about 1.8 MiB of an idle server's 23 MiB, for a
/// server that delivers to its Maildir and never calls either (see bench/README.md). A library in use is
/// never closed; one refused (a function missing, a failed start) is closed again.
enum SharedLibrary {
    /// A library that could not be opened, that lacks a function Jotter calls, or that failed to start.
    struct Missing: Error, CustomStringConvertible, Sendable, Equatable {
        /// The library's file name (`libcurl.so.4`).
        var soname: String
        /// The Debian package that installs it (`libcurl4`).
        var package: String
        /// The loader's reason (it names the file, never anything of a memo), the function it lacks, or
        /// its initialisation's failure.
        var reason: String

        var description: String {
            "\(soname) cannot be used (\(reason)); on Debian it comes with the \(package) package"
        }
    }

    /// Opens `soname`, resolving all its symbols now (for `Loaded` only: a library is used through its table).
    private static func open(_ soname: String, package: String) throws(Missing) -> UnsafeMutableRawPointer {
        guard let library = dlopen(soname, RTLD_NOW | RTLD_LOCAL) else {
            throw Missing(soname: soname, package: package, reason: dlerror().map { String(cString: $0) } ?? "unknown")
        }
        return library
    }

    /// An opened library with the table of the functions Jotter calls (`Functions`, a C struct of function
    /// pointers its shim fills by `dlsym`); every call goes through the shim's wrappers, given `functions`.
    ///
    /// `@unchecked Sendable`: the table is written once in `init`, before the instance is shared, and only
    /// read afterwards; the library stays open for the process.
    final class Loaded<Functions>: @unchecked Sendable {
        /// The table, for the shim's wrappers.
        let functions: UnsafePointer<Functions>

        /// Opens `soname`, fills the table with `resolve` (which returns the first function not found), and
        /// runs `start` on it (which returns why the library cannot be used, if it cannot).
        init(soname: String, package: String,
             resolve: (UnsafeMutableRawPointer?, UnsafeMutablePointer<Functions>?) -> UnsafePointer<CChar>?,
             start: (UnsafePointer<Functions>) -> String? = { _ in nil }) throws(Missing) {
            let library = try SharedLibrary.open(soname, package: package)
            let table = UnsafeMutablePointer<Functions>.allocate(capacity: 1)
            if let failure = resolve(library, table).map({ "it lacks \(String(cString: $0))" }) ?? start(table) {
                table.deallocate()
                dlclose(library)
                throw Missing(soname: soname, package: package, reason: failure)
            }
            functions = UnsafePointer(table)
        }

        deinit {
            UnsafeMutablePointer(mutating: functions).deallocate()
        }
    }
}
