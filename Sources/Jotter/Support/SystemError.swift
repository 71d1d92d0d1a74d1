import Glibc

/// A failed system call, by `errno` (the text comes from `strerror` when a person must read it).
struct SystemError: Error, Equatable {
    let code: Int32

    /// The current `errno`.
    static var current: SystemError { SystemError(code: errno) }
}
