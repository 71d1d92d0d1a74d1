/// Everything `jotter serve` can be told, as plain values with defaults. Only `main` reads the
/// environment and the command line to fill it in.
public struct Configuration: Sendable {
    /// The data directory (database, key, default Maildir).
    public var dataDirectory: String
    /// Where memos go: `maildir:PATH` (default `maildir:<data-dir>/Maildir`).
    public var relay: String?
    /// The directory holding `index.html` and the page's other files.
    public var publicDirectory: String
    /// The HTTP server's addresses and limits.
    public var http = HTTPServer.Configuration()
    /// The delivery worker's settings.
    public var delivery = DeliveryWorker.Configuration()
    /// Host names the server answers to besides loopback (`--allowed-host`), e.g. a LAN name.
    public var allowedHosts: [String] = []
    /// Posting limit per client address; nil turns it off.
    public var rateLimit: RateLimiter.Limits? = RateLimiter.Limits(burst: 300, perSecond: 5)
    /// LAN mode: listen on every interface, serve HTTPS, require a paired device token off this machine.
    /// How long each memo may be taken back before delivery starts (0: off).
    public var undoMilliseconds: Int64 = 0
    public var lan = false
    /// In LAN mode, serve plain HTTP instead of HTTPS (not recommended: browsers then send no
    /// `Sec-Fetch-*` headers and the network can read memos).
    public var insecureHTTP = false
    /// In LAN mode, requests from this machine itself need no device token (scripts keep using curl).
    /// Tests turn this off to exercise the token checks over loopback.
    public var lanTrustsLoopback = true
    /// In LAN mode, the addresses pairing links name, instead of those found on the interfaces
    /// (`NetworkInterfaces.lanAddresses(host:)`). Tests, whose servers listen on loopback, set one.
    public var lanAddresses: [String]?
    /// In LAN mode, how long a pairing link works, in milliseconds (10 minutes; tests shorten it).
    public var pairingLinkMilliseconds: Int64 = DeviceRegistry.pairingLifetime
    /// Log level.
    public var logLevel: Logger.Level = .info

    /// A configuration with defaults for everything but the two paths.
    public init(dataDirectory: String, publicDirectory: String) {
        self.dataDirectory = dataDirectory
        self.publicDirectory = publicDirectory
    }

    /// `$XDG_DATA_HOME/jotter`, else `~/.local/share/jotter`.
    public static func defaultDataDirectory(environment: [String: String]) -> String {
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            return xdg + "/jotter"
        }
        return (ProcessEnvironment.home(environment: environment) ?? ".") + "/.local/share/jotter"
    }
}
