import CSystem
import Glibc

/// Runs one piece of blocking work (a send that waits on the network) on a thread of its own.
///
/// libdispatch on Linux runs about as many work items at once as there are CPUs, and adds a thread
/// only now and then when they block: a concurrent queue of sends that wait on a slow relay ran 2-3 at
/// a time on a 2-CPU machine, whatever `--slots` said. So each delivery slot sends on a thread that
/// lives as long as its send; the worker's own count of slots in flight bounds how many there are.
enum SlotThread {
    private final class Work {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    /// Starts `body` on a new detached thread called `name` (15 bytes at most are kept), `niceness` below
    /// the thread that starts it (nice values add, up to 19; Linux keeps one per thread, so only this
    /// thread yields); false if the system would not start one (the caller then runs it elsewhere).
    static func start(name: String, niceness: Int32 = 0, _ body: @escaping @Sendable () -> Void) -> Bool {
        var attributes = pthread_attr_t()
        guard pthread_attr_init(&attributes) == 0 else { return false }
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let work = Unmanaged.passRetained(Work {
            jotter_name_thread(name)
            // PRIO_PROCESS with `who` 0 is the calling thread on Linux, which started with its creator's
            // value. Raising one's own nice value needs no privilege; should it fail all the same, the work
            // runs at the creator's priority.
            if niceness > 0 {
                let which = __priority_which_t(PRIO_PROCESS.rawValue)
                _ = setpriority(which, 0, min(getpriority(which, 0) + niceness, 19))
            }
            body()
        })
        var thread = pthread_t()
        let started = pthread_create(&thread, &attributes, { argument in
            guard let argument else { return nil }
            Unmanaged<Work>.fromOpaque(argument).takeRetainedValue().body()
            return nil
        }, work.toOpaque())
        if started != 0 { work.release() }
        return started == 0
    }
}
