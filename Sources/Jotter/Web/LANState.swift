import Synchronization

/// LAN mode's `LANInfo` as it stands now: its addresses (and the certificate behind them) follow the
/// machine's network while the server runs (`Application.refreshLANAddresses`), so a link issued after
/// Wi-Fi connects names the address a phone can reach.
final class LANState: Sendable {
    private let info: Mutex<LANInfo>

    init(_ info: LANInfo) {
        self.info = Mutex(info)
    }

    /// A copy of what holds now.
    var current: LANInfo { info.withLock { $0 } }

    /// Changes it in place.
    func update(_ change: (inout LANInfo) -> Void) {
        info.withLock { change(&$0) }
    }
}
