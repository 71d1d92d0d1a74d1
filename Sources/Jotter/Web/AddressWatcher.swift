import CSystem
import Dispatch
import Glibc
import Synchronization

/// Tells LAN mode when this machine's network addresses may have changed: Wi-Fi that connects after
/// login (a service starts before it), a new DHCP lease, a cable plugged in, a laptop carried to another
/// network. The kernel's rtnetlink notices wake it at once; a burst of them (an interface coming up sends
/// several) is answered once, after `settle`. A check every `recheck` as well, in case a notice was lost,
/// and every 10 s when netlink is refused (a sandbox without `AF_NETLINK`). `changed` reads the addresses
/// afresh and does nothing when they are the same, so a spurious call costs one `getifaddrs`.
final class AddressWatcher: Sendable {
    private let queue = DispatchQueue(label: "jotter.lan.addresses")
    private let settle: DispatchTimeInterval
    private let recheck: DispatchTimeInterval
    private let changed: @Sendable () -> Void
    private let state = Mutex(State())

    private struct State {
        var notices: (any DispatchSourceRead)?
        var timer: (any DispatchSourceTimer)?
        var settling = false
    }

    init(settle: DispatchTimeInterval = .milliseconds(500), recheck: DispatchTimeInterval = .seconds(60),
         changed: @escaping @Sendable () -> Void) {
        self.settle = settle
        self.recheck = recheck
        self.changed = changed
    }

    deinit {
        state.withLock { state in
            state.notices?.cancel()
            state.timer?.cancel()
        }
    }

    /// Starts watching (again a no-op while it watches).
    func start() {
        state.withLock { state in
            guard state.timer == nil else { return }
            let descriptor = jotter_address_watch_open()
            if descriptor >= 0 {
                let notices = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
                notices.setEventHandler { [weak self] in
                    if jotter_address_watch_drain(descriptor) > 0 { self?.noticed() }
                }
                notices.setCancelHandler { close(descriptor) }
                notices.resume()
                state.notices = notices
            }
            let interval = descriptor >= 0 ? recheck : .seconds(10)
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .seconds(1))
            timer.setEventHandler { [changed] in changed() }
            timer.resume()
            state.timer = timer
        }
    }

    /// Stops watching; a check already running finishes first. Not from `changed` itself (it waits for it).
    func stop() {
        dispatchPrecondition(condition: .notOnQueue(queue))
        let sources = state.withLock { state in
            defer { state = State() }
            return (state.notices, state.timer)
        }
        sources.0?.cancel()
        sources.1?.cancel()
        queue.sync {}
    }

    /// A notice came: check once the burst it belongs to has settled.
    private func noticed() {
        let first = state.withLock { state in
            defer { state.settling = true }
            return !state.settling && state.timer != nil
        }
        guard first else { return }
        queue.asyncAfter(deadline: .now() + settle) { [weak self] in
            guard let self else { return }
            let watching = self.state.withLock { state in
                state.settling = false
                return state.timer != nil
            }
            if watching { self.changed() }
        }
    }
}
