import Glibc
import Synchronization

/// Jotter assembled: data directory, key, outbox, delivery worker, routes and HTTP server.
///
/// `main` and the live tests both start Jotter through this type, so tests exercise exactly what
/// users run. `init` wires the parts (opening files, nothing more); `start` starts the worker and the
/// server; `stop` stops the server (drained), the worker, then storage.
public final class Application: Sendable {
    /// The configuration it was started with.
    public let configuration: Configuration
    /// The outbox (tests read it directly).
    public let outbox: Outbox
    /// The delivery worker.
    public let worker: DeliveryWorker
    let server: HTTPServer
    let rating: RatingStore
    let policy: RequestPolicy
    let devices: DeviceRegistry?
    /// What answers a request once the HTTP layer has read it: the request policy, then the router.
    public typealias Handler = @Sendable (HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) -> Void
    private let handler: Handler

    /// Answers `request` as the server would, without a socket (for tests at the router: `respond`
    /// gets exactly what the HTTP layer would send, before framing).
    public func handle(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        handler(request, respond)
    }

    /// In LAN mode: where phones reach this server, as it stands now (its port set at start).
    let lanState: LANState?
    /// In LAN mode: the machine's LAN addresses now, as `refreshLANAddresses` reads them; nil when they are
    /// fixed (`Configuration.lanAddresses`).
    private let addressSource: (@Sendable () -> [String])?
    /// Whether `start` watches the machine's interfaces (LAN mode, addresses neither fixed nor injected).
    private let watchesInterfaces: Bool
    /// Wakes `refreshLANAddresses` when the network changes, from `start` to `stop`.
    private let addressWatcher = Mutex<AddressWatcher?>(nil)
    /// How LAN mode's certificate is made (HTTPS only), for a new one when the addresses change.
    private let certificateRequest: CertificateRequest?
    /// Told of every change of LAN addresses (main prints where phones reach the server now).
    private let lanChanged = Mutex<(@Sendable (LANInfo) -> Void)?>(nil)
    /// What `refreshLANAddresses` knows between two calls; one refresh at a time holds it.
    private let lanRefresh = Mutex(LANRefresh())

    private struct LANRefresh: Sendable {
        /// The fingerprint of the certificate the server presents.
        var servedCertificate: String?
        /// A certificate for the addresses of now could not be made or served: try again at the next check.
        var certificatePending = false
        /// `stop` has begun: no refresh may rewrite `lan.json` after it.
        var stopped = false
    }
    private let clock: any WallClock
    private let dataDirectory: DataDirectory
    private let logger: Logger

    /// In LAN mode: where phones reach this server, and how to pair them.
    public var lanInfo: LANInfo? {
        lanState.map { state in
            var lan = state.current
            lan.port = server.port
            return lan
        }
    }

    /// Opens and wires everything; `start()` then serves. Throws (with a message fit for a person) if
    /// anything is wrong: an unreadable or insecure key, a locked data directory, a bad relay.
    ///
    /// In LAN mode the addresses phones reach it at are `Configuration.lanAddresses` when set, else read
    /// with `interfaces` (tests) or from the machine's interfaces, which are then watched while it runs.
    public init(configuration: Configuration, transport: (any Transport)? = nil,
                clock: any WallClock = SystemClock(), scheduler: any Scheduler = DispatchScheduler(),
                logSink: LogSink = .standardError, credentialsDirectory: String? = nil,
                interfaces: (@Sendable () -> [String])? = nil) throws {
        let logger = Logger(label: "jotter", level: configuration.logLevel, sink: logSink)
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        dataDirectory = try DataDirectory(path: configuration.dataDirectory)
        if access(dataDirectory.keyPath + ".new", F_OK) == 0 {
            throw StartFailure.interruptedRekey(path: dataDirectory.keyPath + ".new")
        }
        try dataDirectory.checkDatabase()
        let credentialKey = credentialsDirectory.map(KeyStore.credentialPath(in:))
        let key = try KeyStore.load(path: dataDirectory.keyPath, credentialPath: credentialKey,
                                    protecting: dataDirectory.databasePath, replacingCutShort: true)
        // Told to `jotter rekey`, which runs from a shell without CREDENTIALS_DIRECTORY: the key that
        // counts is the credential, and rotating the data directory's copy would lock the service out.
        Rekey.markCredentialKey(dataDirectory: dataDirectory.path,
                                credentialKey.map { access($0, F_OK) == 0 } ?? false)
        let relay = try RelayURL(configuration.relay ?? "maildir:" + dataDirectory.maildirPath)
        let transport = transport ?? relay.transport
        destination = relay.destination
        var delivery = configuration.delivery
        if let from = relay.from { delivery.from = from }
        if let to = relay.to { delivery.to = to }
        outbox = try Outbox(path: dataDirectory.databasePath, key: key, clock: clock,
                            logger: logger.labelled("outbox"))
        dataDirectory.markDatabaseCreated()
        try DataDirectoryOwner.claim(.composer, path: dataDirectory.path, outbox: outbox)
        relay.jotterRelay?.attach(outbox.settings)
        worker = DeliveryWorker(outbox: outbox, transport: transport, configuration: delivery,
                                clock: clock, scheduler: scheduler, logger: logger.labelled("delivery"))
        rating = try RatingStore(outbox: outbox, clock: clock)
        var http = configuration.http
        var lanInfo: LANInfo?
        var devices: DeviceRegistry?
        var addressSource: (@Sendable () -> [String])?
        var certificateRequest: CertificateRequest?
        let machineNames = configuration.lan ? NetworkInterfaces.hostNames() : []
        if configuration.lan {
            if configuration.lanAddresses == nil {
                let host = configuration.http.host
                addressSource = interfaces ?? { NetworkInterfaces.lanAddresses(host: host) }
            }
            let addresses = configuration.lanAddresses ?? addressSource?() ?? []
            var trustAnchor: TrustAnchor?
            var unnamed: [String] = []
            if !configuration.insecureHTTP {
                // The bare host name is not asked for: the CA may vouch only for localhost and .local names.
                // Names given with --allowed-host are asked for too (a phone opening https://mybox.local must
                // find that name in the certificate); those the CA may not vouch for are left out, with a warning.
                let allowedNames = configuration.allowedHosts.filter { !$0.contains(":") && !$0.allSatisfy { $0.isNumber || $0 == "." } }
                let request = CertificateRequest(directory: dataDirectory.path + "/tls", machineNames: machineNames,
                                                 names: ["localhost"] + machineNames.filter { $0.hasSuffix(".local") } + allowedNames)
                certificateRequest = request
                let tls = try Self.loadTLS(request, addresses: addresses, clock: clock, logger: logger)
                http.tls = (tls.certificate.privateKeyPEM, tls.chainPEM)
                trustAnchor = tls.trustAnchor
                unnamed = tls.certificate.omitted.filter(addresses.contains)
                lanRefresh.withLock { $0.servedCertificate = tls.certificate.fingerprint }
            }
            let registry = try DeviceRegistry(outbox: outbox, clock: clock, linkLifetime: configuration.pairingLinkMilliseconds,
                                              scheduler: scheduler)
            devices = registry
            let issued = try registry.issuePairingToken()
            lanInfo = LANInfo(addresses: addresses, scheme: configuration.insecureHTTP ? "http" : "https",
                              fingerprint: trustAnchor?.fingerprint, trustAnchor: trustAnchor,
                              pairingToken: issued.token, pairingCode: issued.code, unnamed: unnamed)
        }
        let policy = RequestPolicy(configuredHosts: configuration.allowedHosts + machineNames, boundAddresses: lanInfo?.addresses ?? [],
                                   scheme: http.tls == nil ? "http" : "https", devices: devices,
                                   trustsLoopback: configuration.lanTrustsLoopback, clock: clock)
        self.policy = policy
        self.devices = devices
        let lanState = lanInfo.map(LANState.init)
        self.lanState = lanState
        self.addressSource = addressSource
        self.certificateRequest = certificateRequest
        var pairRoute: PairRoute?
        if let devices, let lanState { pairRoute = PairRoute(devices: devices, policy: policy, lan: lanState) }
        let limiter = configuration.rateLimit.map { RateLimiter(limits: $0, clock: clock) }
        let router = try Self.routes(outbox: outbox, worker: worker, rating: rating, limiter: limiter,
                                     pair: pairRoute, publicDirectory: configuration.publicDirectory,
                                     lan: configuration.lan, destination: relay.destination, jotterRelay: relay.jotterRelay,
                                     warnAfterMilliseconds: delivery.warnAfterMilliseconds,
                                     undoMilliseconds: configuration.undoMilliseconds, clock: clock)
        let handler: Handler = { request, respond in
            // One path normalisation, before the policy and the router alike, so they judge the same path.
            guard let request = RequestPath.normalized(request, refuse: { respond(router.finish($0.response)) }) else {
                return
            }
            if let refusal = policy.refusal(for: request) {
                respond(router.finish(refusal))
                return
            }
            router.handle(request, respond: respond)
        }
        self.handler = handler
        // The same judgement on a request's head, before its body is read: in LAN mode a device that is not
        // paired is refused before it can hold any of the memory bodies share (`BodyBudget`).
        let lanMode = configuration.lan
        let admission: HTTPServer.Admission = { head in
            RequestPath.refusal(forHead: head) { head in
                policy.refusal(for: head) ?? (lanMode ? PairRoute.oversizedRefusal(head) : nil)
            }.map { router.finish($0) }
        }
        server = HTTPServer(configuration: http, logger: logger.labelled("http"), admission: admission,
                            handler: handler)
        let worker = worker
        outbox.setOnAccepted { worker.wake() }
        watchesInterfaces = configuration.lan && configuration.lanAddresses == nil && interfaces == nil
    }

    /// Starts delivering and serving. Throws if the port is busy (or storage fails); everything
    /// opened is closed again then.
    public func start() throws {
        do {
            let relay = Array((configuration.relay ?? "maildir:default").utf8)
            if try outbox.settings.changed("relay", fingerprint: relay) {
                if let count = try outbox.despiteDamage({
                    try $0.requeueFailed() + $0.releaseHeld(reasons: DeliveryFailure.relayRefusalKinds)
                }) {
                    logger.notice("relay configuration changed; failed memos re-queued", metadata: ["count": "\(count)"])
                } else {
                    logger.warning("relay configuration changed, but failed and held memos were not re-queued: the "
                                   + "outbox database is damaged (Retry in History re-queues each)")
                }
            }
            try worker.start()
            outbox.startIntegrityChecks()
            try server.start()
            policy.setPort(server.port)
            if let lanInfo {
                try? LANRuntimeFile.write(lanInfo, dataDirectory: dataDirectory.path)
            } else {
                // What a LAN server that crashed left: `jotter pair` must not print its dead link.
                LANRuntimeFile.remove(dataDirectory: dataDirectory.path)
            }
            if watchesInterfaces {
                let watcher = AddressWatcher { [weak self] in self?.refreshLANAddresses() }
                addressWatcher.withLock { $0 = watcher }
                watcher.start()
                refreshLANAddresses()  // a change between reading the addresses in init and watching
            }
        } catch {
            worker.stop()
            outbox.close()
            dataDirectory.unlock()
            if let failure = error as? DeliveryFailure {
                throw StartFailure.relayNotReady(kind: failure.kind.rawValue, hint: failure.hint)
            }
            throw error
        }
    }

    /// In LAN mode, reads the machine's addresses again and, if they changed, follows them without a
    /// restart: a certificate naming the new ones (under the same local CA, so a phone that trusts it
    /// notices nothing) for new connections, the `Host` check, pairing links and `lan.json`. True if they
    /// changed. The address watcher calls it; so can anyone (a test), from any thread.
    @discardableResult
    public func refreshLANAddresses() -> Bool {
        guard let lanState, let addressSource else { return false }
        return lanRefresh.withLock { refresh in
            guard !refresh.stopped else { return false }
            let addresses = addressSource()
            policy.refreshOwnAddresses()
            let changed = addresses != lanState.current.addresses
            guard changed || refresh.certificatePending else { return false }
            var trustAnchor = lanState.current.trustAnchor
            var unnamed = lanState.current.unnamed
            if let certificateRequest {
                do {
                    let tls = try Self.loadTLS(certificateRequest, addresses: addresses, clock: clock, logger: logger,
                                               atStart: false)
                    trustAnchor = tls.trustAnchor
                    unnamed = tls.certificate.omitted.filter(addresses.contains)
                    // Whatever is on disk now, if it is not what is served (a swap that failed last time, too).
                    if tls.certificate.fingerprint == refresh.servedCertificate {
                        refresh.certificatePending = false
                    } else if server.replaceCertificate(keyPEM: tls.certificate.privateKeyPEM, certificatePEM: tls.chainPEM) {
                        refresh.servedCertificate = tls.certificate.fingerprint
                        refresh.certificatePending = false
                    } else {
                        refresh.certificatePending = true
                        logger.warning("could not serve the new HTTPS certificate; trying again at the next check")
                    }
                } catch {
                    refresh.certificatePending = true
                    logger.warning("could not make an HTTPS certificate for the new addresses; trying again at the next check",
                                   metadata: ["error": "\(type(of: error))"])
                }
            }
            guard changed else { return false }
            policy.setBoundAddresses(addresses)
            lanState.update {
                $0.addresses = addresses
                $0.unnamed = unnamed
                $0.trustAnchor = trustAnchor
                $0.fingerprint = trustAnchor?.fingerprint ?? $0.fingerprint
            }
            logger.notice("the LAN addresses changed; pairing links and the certificate follow",
                          metadata: ["addresses": String(addresses.count)])
            if let lanInfo {
                try? LANRuntimeFile.write(lanInfo, dataDirectory: dataDirectory.path)
                lanChanged.withLock { $0 }?(lanInfo)
            }
            return true
        }
    }

    /// Calls `body` after each change of LAN addresses, with where phones reach the server now.
    public func setOnLANChange(_ body: @escaping @Sendable (LANInfo) -> Void) {
        lanChanged.withLock { $0 = body }
    }

    /// Why Jotter refused to start (beyond the errors of its parts).
    public enum StartFailure: Error, CustomStringConvertible {
        case interruptedRekey(path: String)
        /// The relay's destination cannot be used (a Maildir folder that cannot be created, say).
        case relayNotReady(kind: String, hint: String?)

        public var description: String {
            switch self {
            case .interruptedRekey(let path):
                return "\(path) exists: a 'jotter rekey' was interrupted; run 'jotter rekey' again to finish it"
            case .relayNotReady(let kind, let hint?):
                return "the relay's destination cannot be used (\(kind)): \(hint)"
            case .relayNotReady(let kind, nil):
                return "the relay's destination cannot be used (\(kind)): check the path or URL given with --relay"
            }
        }
    }

    /// Where memos go, for a person (no secrets): printed after the `Listening on` line.
    public let destination: String

    /// The port the server listens on.
    public var port: Int { server.port }

    /// Stops in order: the server (draining requests in flight), the worker, then the outbox.
    public func stop() {
        addressWatcher.withLock { watcher in
            defer { watcher = nil }
            return watcher
        }?.stop()
        lanRefresh.withLock { $0.stopped = true }
        if lanState != nil { LANRuntimeFile.remove(dataDirectory: dataDirectory.path) }
        server.stop()
        worker.stop()
        rating.flush()
        devices?.flushSightings()
        outbox.close()
        dataDirectory.unlock()
    }

    static func routes(outbox: Outbox, worker: DeliveryWorker, rating: RatingStore, limiter: RateLimiter?,
                       pair: PairRoute?, publicDirectory: String, lan: Bool = false,
                       destination: String = "", jotterRelay: JotterRelayAccount? = nil, warnAfterMilliseconds: Int64 = 3_600_000, undoMilliseconds: Int64 = 0,
                       clock: any WallClock = SystemClock()) throws -> Router {
        let page = try PageRoute(publicDirectory: publicDirectory, lan: lan)
        let files = StaticFiles(publicDirectory: publicDirectory)
        let send = SendRoute(outbox: outbox, rating: rating, limiter: limiter, undoMilliseconds: undoMilliseconds, clock: clock,
                             relayBodyLimit: jotterRelay != nil ? RelayConfiguration.maxMessageBodyBytes : nil,
                             recentForms: RecentFormPosts(clock: clock))
        let ratingRoute = RatingRoute(store: rating)
        let history = HistoryRoute(outbox: outbox, relayState: { worker.relayState },
                                   warnAfterMilliseconds: warnAfterMilliseconds, undoMilliseconds: undoMilliseconds,
                                   asksForAddress: jotterRelay != nil, clock: clock)
        let destinationRoute = DestinationRoute(account: jotterRelay, verified: { worker.retestRelay() },
                                                localization: page.localization)
        var router = Router()
        router.add("GET", "/") { request, _, respond in respond(page.handle(request)) }
        router.add("GET", "/destination") { _, _, respond in respond(destinationRoute.state()) }
        router.add("POST", "/destination") { request, _, respond in destinationRoute.request(request, respond: respond) }
        router.add("POST", "/destination/confirm") { request, _, respond in
            destinationRoute.confirm(request, respond: respond)
        }
        router.add("POST", "/") { request, _, respond in send.handle(request, respond: respond) }
        router.add("POST", "/send") { request, _, respond in send.handle(request, respond: respond) }
        router.add("GET", "/history") { request, _, respond in respond(history.list(request)) }
        router.add("GET", "/history/{id}") { _, parameters, respond in
            respond(history.one(id: parameters["id"] ?? ""))
        }
        router.add("DELETE", "/history/{id}") { _, parameters, respond in
            history.cancel(id: parameters["id"] ?? "", respond: respond)
        }
        router.add("POST", "/history/{id}/retry") { _, parameters, respond in
            history.retry(id: parameters["id"] ?? "", wake: { worker.retestRelay() }, respond: respond)
        }
        router.add("GET", "/i18n/{file}") { _, parameters, respond in
            respond(page.translations(file: parameters["file"] ?? ""))
        }
        router.add("GET", "/rating") { _, _, respond in respond(ratingRoute.state()) }
        router.add("POST", "/rating") { request, _, respond in respond(ratingRoute.record(request)) }
        router.add("GET", "/about") { _, _, respond in respond(AboutPage.response) }
        router.add("GET", "/healthz") { request, _, respond in
            respond(history.health(destination: Loopback.contains(address: request.remoteAddress) ? destination : nil))
        }
        let notLAN = HTTPResponse.error(404, code: "not_lan_mode",
                                        message: "Pairing exists only in LAN mode (jotter serve --lan).")
        router.add("POST", "/pair") { request, _, respond in respond(pair?.handle(request) ?? notLAN) }
        router.add("POST", "/pair/link") { request, _, respond in respond(pair?.link(request) ?? notLAN) }
        router.add("GET", "/pairing") { request, _, respond in respond(pair?.state(request) ?? notLAN) }
        router.add("GET", TrustAnchor.certificatePath) { _, _, respond in respond(pair?.certificate() ?? notLAN) }
        router.add("GET", TrustAnchor.mobileConfigPath) { _, _, respond in
            respond(pair?.mobileConfig() ?? notLAN)
        }
        router.add("GET", "/favicon.ico") { _, _, respond in
            respond(files.files["favicon.ico"] == nil ? HTTPResponse(status: 204) : files.handle(name: "favicon.ico"))
        }
        for name in files.files.keys where name != "favicon.ico" {
            router.add("GET", "/" + name) { _, _, respond in respond(files.handle(name: name)) }
        }
        return router
    }
}
