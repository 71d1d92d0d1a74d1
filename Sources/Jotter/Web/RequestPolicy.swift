import Synchronization

/// Who may talk to Jotter: the `Host` allowlist (defeats DNS rebinding) and the cross-origin checks
/// (defeat cross-site form posts, which need no CORS preflight). `curl`, which sends neither `Origin`
/// nor `Sec-Fetch-Site`, passes.
public final class RequestPolicy: Sendable {
    /// Extra host names the user allows (`--allowed-host`), lowercased.
    let configuredHosts: Set<String>
    /// Addresses of the interfaces the server listens on (LAN mode), lowercased; they follow the network.
    private let boundAddresses: Mutex<Set<String>>
    /// Every address of this machine's interfaces (Docker and VM bridges too), read again whenever the
    /// network changes: a peer with one of them is this machine.
    private let ownAddresses: Mutex<Set<String>>
    private let port = Atomic<Int>(0)
    /// `http` or `https`: part of our origin.
    let scheme: String
    /// LAN mode: devices must present a token (nil: loopback only, no tokens).
    let devices: DeviceRegistry?
    /// Failed token attempts per client: a few, then `429`.
    let failedAttempts: RateLimiter
    /// Whether loopback peers skip the token check in LAN mode.
    let trustsLoopback: Bool
    /// `Host` values already allowed, exactly as sent, for the port they were allowed on: every request
    /// of a client sends the same one, and this spares parsing it each time. Only allowed values get in,
    /// and there are few of those (our names and addresses, with and without the port).
    /// `generation` counts changes of the bound addresses: a value judged before one is not cached after it.
    private let allowedHosts = Mutex<(port: Int, generation: Int, values: Set<String>)>((0, 0, []))

    /// A policy allowing loopback names and literals, `boundAddresses` and `configuredHosts` on our port;
    /// with `devices`, every non-static request from off this machine needs a device token.
    public init(configuredHosts: [String] = [], boundAddresses: [String] = [], scheme: String = "http",
                devices: DeviceRegistry? = nil, trustsLoopback: Bool = true, clock: any WallClock = SystemClock()) {
        self.trustsLoopback = trustsLoopback
        self.configuredHosts = Set(configuredHosts.map { Self.normalized($0) })
        self.boundAddresses = Mutex(Set(boundAddresses.map { Self.normalized($0) }))
        ownAddresses = Mutex(devices == nil ? [] : Self.interfaceAddresses())
        self.scheme = scheme
        self.devices = devices
        failedAttempts = RateLimiter(limits: .init(burst: 10, perSecond: 10.0 / 600), clock: clock)
    }

    /// The port the server actually bound (known only after start).
    public func setPort(_ port: Int) {
        self.port.store(port, ordering: .releasing)
    }

    /// The machine's LAN addresses changed: `Host` may name the new ones, no longer the old.
    func setBoundAddresses(_ addresses: [String]) {
        let normalized = Set(addresses.map { Self.normalized($0) })
        boundAddresses.withLock { $0 = normalized }
        let own = Self.interfaceAddresses()
        ownAddresses.withLock { $0 = own }
        allowedHosts.withLock { cache in
            cache.generation += 1
            cache.values = []
        }
    }

    /// Reads this machine's interface addresses again: one it gave up (a cable unplugged, a VPN dropped)
    /// is no longer this machine's, whoever takes it next on the network. (Only `setBoundAddresses` did
    /// this, and the addresses served on do not change with `--host ADDRESS`: the set stayed as at start.)
    func refreshOwnAddresses() {
        guard devices != nil else { return }
        let own = Self.interfaceAddresses()
        ownAddresses.withLock { $0 = own }
    }

    /// The port the server bound (0 before start).
    var boundPort: Int { port.load(ordering: .acquiring) }

    private static func normalized(_ host: String) -> String {
        var host = host.lowercased()
        if host.hasSuffix(".") { host.removeLast() }
        return host
    }

    /// Nil when `request` may proceed, else the refusal.
    public func refusal(for request: HTTPRequest) -> HTTPResponse? {
        guard let host = request.headers["Host"], isAllowed(host: host) else {
            return .error(403, code: "forbidden_host",
                          message: "This server does not answer to that Host. Use the address it printed.")
        }
        if needsSameOrigin(request), let refusal = crossOriginRefusal(request, host: host) {
            return refusal
        }
        // Without LAN mode there are no device tokens, so only this machine may talk to us, whatever
        // interface `--host` listens on: a `Host: localhost` from another machine proves nothing.
        guard let devices else {
            return Loopback.contains(address: request.remoteAddress) ? nil : Self.localOnly
        }
        // In LAN mode the peer's address is parsed only when it matters: for a request that needs a token.
        if !Self.isPublic(request), !(trustsLoopback && isThisMachine(request.remoteAddress)) {
            return tokenRefusal(request, devices: devices)
        }
        return nil
    }

    private static let localOnly = HTTPResponse.error(
        403, code: "local_only",
        message: "This Jotter answers only the computer it runs on. Start it with --lan to send from other devices.")

    /// In LAN mode: a valid device token, or `401` saying why (not paired, revoked, not ours). Only a
    /// presented-but-wrong token is a guess and counts toward the lockout; a missing token is absence.
    private func tokenRefusal(_ request: HTTPRequest, devices: DeviceRegistry) -> HTTPResponse? {
        switch bearerCheck(request, devices: devices) {
        case .valid: return nil
        case .absent: return Self.unauthorized("not_paired", "This device is not paired yet: scan the code on "
                                                   + "the computer's Jotter page, or run 'jotter pair' there.")
        case .revoked: return Self.unauthorized("device_revoked", "This device was unpaired; pair it again.")
        case .unknown: return failedAttempt(client: request.remoteAddress)
        }
    }

    /// What a request's `Authorization` says about its device.
    enum Bearer: Equatable {
        case absent
        case valid(String)
        case revoked(String)
        case unknown
    }

    /// Reads `Authorization: Bearer TOKEN` (the scheme in any case, RFC 9110 §11.1).
    func bearerCheck(_ request: HTTPRequest, devices: DeviceRegistry) -> Bearer {
        let authorization = request.headers.values("Authorization")
        guard !authorization.isEmpty else { return .absent }
        guard authorization.count == 1, let value = authorization.first, value.utf8.count > 7,
              String(value.prefix(7)).caseInsensitiveEquals("Bearer ") else { return .unknown }
        switch devices.check(deviceToken: String(String(value.dropFirst(7)).trimmingASCIISpaces())) {
        case .valid(let id): return .valid(id)
        case .revoked(let id): return .revoked(id)
        case .unknown: return .unknown
        }
    }

    private static func unauthorized(_ code: String, _ message: String) -> HTTPResponse {
        var response = HTTPResponse.error(401, code: code, message: message)
        response.headers.add(name: "WWW-Authenticate", value: "Bearer")
        return response
    }

    /// `429` while `client` is locked out by its failed attempts, counting nothing; nil otherwise. Asked
    /// before a guess that is short enough to be worth making (a pairing code) is even looked at: an
    /// answer that told a right guess from a wrong one while locked out would let the guessing go on.
    func lockedOut(client: String) -> HTTPResponse? {
        failedAttempts.waiting(client: client).map(Self.tooManyAttempts)
    }

    private static func tooManyAttempts(_ seconds: Int) -> HTTPResponse {
        var response = HTTPResponse.error(429, code: "too_many_attempts",
                                          message: "Too many failed attempts; wait before trying again.")
        response.headers.add(name: "Retry-After", value: String(seconds))
        return response
    }

    /// Counts a failed token or pairing attempt: `401`, or `429` once the client has failed too often.
    func failedAttempt(client: String, code: String = "invalid_token",
                       message: String = "This device token is not valid here; pair this device again.") -> HTTPResponse {
        if let seconds = failedAttempts.retryAfter(client: client) { return Self.tooManyAttempts(seconds) }
        return Self.unauthorized(code, message)
    }

    /// What a device may fetch before pairing: the page and its files, and the pairing exchange.
    static func isPublic(_ request: HTTPRequest) -> Bool {
        if request.method == "POST" { return request.path == "/pair" || request.path == "/pair/link" }
        guard request.method == "GET" || request.method == "HEAD" else { return false }
        let path = request.path
        if path == "/" || path == "/about" || path == "/pairing" || path.hasPrefix("/i18n/") { return true }
        // Top-level files of Public/ (manifest, icons): a name with an extension, no further slash.
        let name = path.dropFirst()
        return path.hasPrefix("/") && !name.contains("/") && name.contains(".")
    }

    /// A peer that is this machine itself: loopback, or one of the LAN addresses it serves on (a browser
    /// here that opened the printed `https://192.168.1.20:…`; Linux drops a packet from outside that
    /// claims a local source address). One answer for the token check, `/pairing` and pairing: the page
    /// said "this computer needs no pairing" while every memo it sent was refused `not_paired`.
    func isThisMachine(_ peer: String) -> Bool {
        if Loopback.contains(address: peer) { return true }
        let address = Self.normalized(ForwardedFor.canonical(peer))
        return boundAddresses.withLock { $0.contains(address) } || ownAddresses.withLock { $0.contains(address) }
    }

    private static func interfaceAddresses() -> Set<String> {
        Set(NetworkInterfaces.entries().map { normalized($0.address) })
    }

    /// State-changing requests and everything that reveals memo metadata. `request.path` is already
    /// normalised (`RequestPath`), as it is for the router: `//history` reached here as `/history`.
    private func needsSameOrigin(_ request: HTTPRequest) -> Bool {
        if request.method != "GET" && request.method != "HEAD" { return true }
        return request.path == "/history" || request.path.hasPrefix("/history/") || request.path == "/rating"
            || request.path == "/destination"
    }

    private func crossOriginRefusal(_ request: HTTPRequest, host: String) -> HTTPResponse? {
        // Built only when refusing: it is a JSON body and headers, per request otherwise.
        var refused: HTTPResponse {
            HTTPResponse.error(403, code: "cross_origin", message: "Requests from other sites are refused.")
        }
        // Compared in ASCII: Unicode case folding has no place in protocol fields.
        if let site = request.headers["Sec-Fetch-Site"],
           site.caseInsensitiveEquals("cross-site") || site.caseInsensitiveEquals("same-site") {
            return refused
        }
        let origins = request.headers.values("Origin")
        guard origins.count <= 1 else { return refused }
        if let origin = origins.first {
            guard origin.caseInsensitiveEquals(scheme + "://" + host) else { return refused }
        }
        return nil
    }

    /// `name[:port]` where the port is ours (or absent when ours is the scheme's default) and the name
    /// is a loopback name or literal, a bound address, or a configured name.
    func isAllowed(host value: String) -> Bool {
        let ourPort = port.load(ordering: .acquiring)
        let (cached, generation) = allowedHosts.withLock { ($0.port == ourPort && $0.values.contains(value), $0.generation) }
        if cached { return true }
        guard parseAllowed(host: value, ourPort: ourPort) else { return false }
        allowedHosts.withLock { cache in
            guard cache.generation == generation else { return }
            if cache.port != ourPort || cache.values.count >= 64 { cache = (ourPort, generation, []) }
            cache.values.insert(value)
        }
        return true
    }

    private func parseAllowed(host value: String, ourPort: Int) -> Bool {
        var name: Substring
        var portText: Substring?
        if value.hasPrefix("[") {
            guard let close = value.firstIndex(of: "]") else { return false }
            name = value[...close]
            let rest = value[value.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { return false }
                portText = rest.dropFirst()
            }
        } else if let colon = value.firstIndex(of: ":") {
            name = value[..<colon]
            portText = value[value.index(after: colon)...]
        } else {
            name = value[...]
        }
        let defaultPort = scheme == "https" ? 443 : 80
        if let portText {
            // Digits only: Int() would also take "+7373".
            guard !portText.isEmpty, portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let port = Int(portText), port == ourPort else { return false }
        } else if ourPort != defaultPort {
            return false
        }
        let host = Self.normalized(String(name))
        guard !host.isEmpty else { return false }
        return Loopback.contains(host: host) || boundAddresses.withLock { $0.contains(host) } || configuredHosts.contains(host)
    }
}
