import CSystem

/// What `serve` and `relay` do to themselves before they hold a memo.
public enum ProcessHardening {
    /// No core file of this process, whatever `ulimit -c` said (a crash dumped memos in the clear with it;
    /// systemd-coredump honours the limit too). False if the kernel refused (the process goes on: a core
    /// dump is a risk, not a failure).
    @discardableResult
    public static func forbidCoreDumps() -> Bool {
        jotter_forbid_core_dumps() == 0
    }
}
