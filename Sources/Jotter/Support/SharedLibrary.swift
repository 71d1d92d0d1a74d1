import Glibc

/// A system library opened when first needed (`dlopen`) instead of linked, for what only some
/// configurations use. Linked, libcurl and libpq made every process map them and the twenty-odd libraries
/// they pull in (Kerberos, LDAP, SSH, …) before `main`: about 2.4 MiB of an idle server's 23 MiB, for a
/// server that delivers to its Maildir and never calls either (see bench/README.md). Opened libraries are
/// never closed.
enum SharedLibrary {
    /// A library that could not be opened, or that lacks a function Jotter calls.
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

    /// Opens `soname`, resolving all its symbols now.
    static func open(_ soname: String, package: String) throws(Missing) -> UnsafeMutableRawPointer {
        guard let library = dlopen(soname, RTLD_NOW | RTLD_LOCAL) else {
            throw Missing(soname: soname, package: package, reason: dlerror().map { String(cString: $0) } ?? "unknown")
        }
        return library
    }
}
