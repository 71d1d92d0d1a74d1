import Glibc

/// A program run with `posix_spawn` (what Foundation's `Process` did for `sendmail` and `systemctl`,
/// without Foundation): its standard input a pipe or Jotter's own, its standard output and error
/// discarded or gathered in one pipe.
///
/// Like `Process`, the child gets its own process group (a Ctrl-C at Jotter's terminal is Jotter's
/// to handle) and no file descriptor of Jotter's but 0, 1 and 2. Unlike it, every signal starts at
/// its default and none is blocked: Jotter ignores SIGPIPE, SIGXFSZ, SIGINT and SIGTERM (it handles
/// the last two through Dispatch), and an ignored signal would otherwise stay ignored across `exec`.
struct ChildProcess {
    /// Where the child's standard input comes from.
    enum Input {
        /// Jotter's own standard input.
        case inherit
        /// A pipe; `spawn` returns its writing end.
        case pipe
    }

    /// Where the child's standard output and standard error go.
    enum Output {
        /// `/dev/null`.
        case discard
        /// Both into one pipe; `spawn` returns its reading end.
        case pipe
    }

    /// How a child ended.
    enum Termination: Equatable {
        /// It exited with this status.
        case exited(Int32)
        /// This signal ended it.
        case signalled(Int32)
    }

    /// The child's process id.
    let pid: pid_t

    /// Starts `path` with `arguments` (without `argv[0]`, which is `path`) and Jotter's environment.
    /// Returns the writing end of its input pipe and the reading end of its output pipe, when asked
    /// for (both close-on-exec; the caller closes them). Throws what `posix_spawn` or `pipe2` failed with.
    static func spawn(_ path: String, arguments: [String], input: Input, output: Output)
        throws(SystemError) -> (process: ChildProcess, input: Int32?, output: Int32?) {
        // [reading end, writing end], close-on-exec: only the child's dup2 copies survive exec.
        var inputPipe: [Int32] = [-1, -1]
        var outputPipe: [Int32] = [-1, -1]
        defer {
            // The child's ends, in the parent (and every end, after a failure).
            for fd in [inputPipe[0], outputPipe[1]] where fd >= 0 { close(fd) }
        }
        if input == .pipe { try openPipe(&inputPipe) }
        if output == .pipe {
            do {
                try openPipe(&outputPipe)
            } catch {
                close(inputPipe[1])
                inputPipe[1] = -1
                throw error
            }
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if input == .pipe { posix_spawn_file_actions_adddup2(&actions, inputPipe[0], 0) }
        switch output {
        case .discard:
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        case .pipe:
            posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 1)
            posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 2)
        }
        closeInheritedDescriptors(&actions)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let environment: [UnsafeMutablePointer<CChar>?] = Self.environment().map { strdup($0) } + [nil]
        defer { environment.forEach { free($0) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, path, &actions, &attributes, argv, environment)
        guard status == 0 else {
            for fd in [inputPipe[1], outputPipe[0]] where fd >= 0 { close(fd) }
            throw SystemError(code: status)
        }
        return (ChildProcess(pid: pid), input == .pipe ? inputPipe[1] : nil, output == .pipe ? outputPipe[0] : nil)
    }

    /// This process's environment for a child (sendmail, systemctl), less what may hold Jotter's secrets:
    /// `JOTTER_*` (a relay URL with its password, a store URL), libpq's `PG*` (`PGPASSWORD`), systemd's
    /// `CREDENTIALS_DIRECTORY` (where the key is). A child was given all of it.
    static func environment(_ variables: [String: String] = ProcessEnvironment.current) -> [String] {
        variables.filter { name, _ in
            !name.hasPrefix("JOTTER_") && !name.hasPrefix("PG") && name != "CREDENTIALS_DIRECTORY"
        }.map { $0.key + "=" + $0.value }.sorted()
    }

    /// `pipe` with both ends close-on-exec (`pipe2` is not in Swift's Glibc module; a child spawned by
    /// another thread in between inherits nothing anyway: `spawn` closes all but 0, 1 and 2).
    private static func openPipe(_ fds: inout [Int32]) throws(SystemError) {
        guard pipe(&fds) == 0 else { throw .current }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    }

    /// Waits at most until `deadline` (`monotonicNanoseconds`) for the child to end; past it, kills
    /// the child's process group and returns nil once it is gone.
    func wait(until deadline: UInt64) throws(SystemError) -> Termination? {
        var pause: UInt32 = 1_000
        while true {
            var status: Int32 = 0
            let ended = waitpid(pid, &status, WNOHANG)
            if ended == pid { return Self.termination(status) }
            if ended < 0 {
                if errno == EINTR { continue }
                throw .current
            }
            if monotonicNanoseconds() >= deadline {
                kill(-pid, SIGKILL)   // its own process group: whatever it started goes too
                kill(pid, SIGKILL)
                _ = try wait()
                return nil
            }
            usleep(pause)
            pause = min(pause * 2, 50_000)
        }
    }

    /// Waits for the child to end (retrying interruptions). Throws when it cannot be waited for
    /// (someone else reaped it).
    func wait() throws(SystemError) -> Termination {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno == EINTR { continue }
            throw .current
        }
        return Self.termination(status)
    }

    /// WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import (they are macros).
    private static func termination(_ status: Int32) -> Termination {
        let signal = status & 0x7F
        return signal == 0 ? .exited((status >> 8) & 0xFF) : .signalled(signal)
    }

    /// Adds "close every descriptor from 3 on" to `actions`: glibc 2.34's
    /// `posix_spawn_file_actions_addclosefrom_np` (looked up at run time: Swift's Glibc module does not
    /// declare it), else a close for each descriptor open now.
    private static func closeInheritedDescriptors(_ actions: inout posix_spawn_file_actions_t) {
        if let addCloseFrom = Self.addCloseFrom, addCloseFrom(&actions, 3) == 0 { return }
        guard let directory = opendir("/proc/self/fd") else { return }
        defer { closedir(directory) }
        let own = dirfd(directory)
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            guard let fd = Int32(name), fd > 2, fd != own else { continue }
            // A descriptor closed meanwhile is no error: glibc ignores EBADF for a close action.
            posix_spawn_file_actions_addclose(&actions, fd)
        }
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32

    private static let addCloseFrom: AddCloseFrom? = {
        dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: AddCloseFrom.self) }
    }()
}
