import Dispatch
import Glibc
import Synchronization

/// `jotter relay` assembled: data directory, key, the relay's own sealed outbox and delivery worker,
/// its store, its API and the HTTP server. Built like `Application`: `init` wires the parts (opening
/// files, nothing more), `start` starts the worker and the server, `stop` stops them in reverse.
public final class RelayApplication: Sendable {
    /// The configuration it was started with.
    public let configuration: RelayConfiguration
    /// The relay's outbox: the node's own SQLite `Outbox`, or the `PostgresOutbox` all nodes share.
    public let outbox: any MessageOutbox
    /// The delivery worker.
    public let worker: DeliveryWorker
    /// The relay's rules (tests drive it directly too).
    public let service: RelayService
    /// The HTTP server.
    let server: HTTPServer
    private let handler: Application.Handler
    private let dataDirectory: DataDirectory
    private let scheduler: any Scheduler
    private let housekeeping = Mutex<(any SchedulerTimer)?>(nil)
    private let housekeepingQueue = DispatchQueue(label: "jotter.relay.housekeeping")
    private let logger: Logger
    private let mailFingerprint: [UInt8]
    private let store: any RelayStore

    /// How often expired keys, old counters and spent codes are forgotten.
    static let housekeepingMilliseconds: Int64 = 3_600_000

    /// Opens and wires everything; `start()` then serves. Throws (with a message fit for a person) if
    /// anything is wrong: an unreadable or insecure key, a locked data directory, a bad mail URL.
    public init(configuration: RelayConfiguration, transport: (any Transport)? = nil,
                clock: any WallClock = SystemClock(), scheduler: any Scheduler = DispatchScheduler(),
                logSink: LogSink = .standardError, credentialsDirectory: String? = nil) throws {
        let logger = Logger(label: "relay", level: configuration.logLevel, sink: logSink)
        self.configuration = configuration
        self.logger = logger
        self.scheduler = scheduler
        dataDirectory = try DataDirectory(path: configuration.dataDirectory)
        if access(dataDirectory.keyPath + ".new", F_OK) == 0 {
            throw Application.StartFailure.interruptedRekey(path: dataDirectory.keyPath + ".new")
        }
        if configuration.store == .sqlite { try dataDirectory.checkDatabase() }
        let key = try KeyStore.load(path: dataDirectory.keyPath,
                                    credentialPath: credentialsDirectory.map(KeyStore.credentialPath(in:)),
                                    protecting: dataDirectory.databasePath,
                                    replacingCutShort: configuration.store == .sqlite)
        let mail = configuration.mail ?? "maildir:" + dataDirectory.maildirPath
        mailFingerprint = Array(mail.utf8)
        let relay = try RelayURL(Self.withRecipientPlaceholder(mail), relayRecipients: true)
        if relay.transport is MarkdownTransport || relay.jotterRelay != nil {
            // A note is no one's inbox, and another Jotter relay sends a device only to the one address it
            // verified: neither can carry other people's mail.
            throw RelayURL.Failure.invalid("a relay mails other people's inboxes: its --mail is maildir:, smtp://, "
                + "smtps://, resend:// or sendmail:, not a markdown: note or another Jotter relay")
        }
        if relay.transport is SendmailTransport && relay.from == nil {
            // The local MTA would sign it as jotter@localhost: Gmail and the like refuse such a sender,
            // and no address could ever be verified.
            throw RelayURL.Failure.invalid("a relay mails other people's inboxes: give sendmail: a ?from= address "
                + "at a domain this machine's MTA sends for (sendmail:?from=relay@example.com)")
        }
        var delivery = configuration.delivery
        if let from = relay.from { delivery.from = from }
        delivery.onBehalfOfRecipient = true
        switch configuration.store {
        case .sqlite:
            // A message is kept only until it is delivered: no subject on its own for a history.
            let outbox = try Outbox(path: dataDirectory.databasePath, key: key, clock: clock,
                                    logger: logger.labelled("outbox"), recordsSubjects: false)
            dataDirectory.markDatabaseCreated()
            try DataDirectoryOwner.claim(.relay, path: dataDirectory.path, outbox: outbox)
            store = try SQLiteRelayStore(database: outbox.database)
            self.outbox = outbox
        case .postgres(let url):
            store = try PostgresRelayStore(url: url)  // first: it starts no thread, the outbox's listener does
            outbox = try PostgresOutbox(url: url, key: key, keyPath: dataDirectory.keyPath, clock: clock,
                                        logger: logger.labelled("outbox"), recordsSubjects: false)
        }
        worker = DeliveryWorker(outbox: outbox, transport: transport ?? relay.transport, configuration: delivery,
                                clock: clock, scheduler: scheduler, logger: logger.labelled("delivery"))
        service = try RelayService(store: store, outbox: outbox, configuration: configuration, clock: clock,
                                   logger: logger)
        let router = RelayRoutes(service: service, configuration: configuration).router()
        let trustedProxies = configuration.trustedProxies
        let handler: Application.Handler = { request, respond in
            // The one path normalisation, before the browser check and the router alike (as `Application`).
            guard let request = RequestPath.normalized(request, refuse: { respond(router.finish($0.response)) }) else {
                return
            }
            if let refusal = Self.refusal(for: request) {
                respond(router.finish(refusal))
                return
            }
            var forwarded = request
            forwarded.remoteAddress = ForwardedFor.client(request, trusted: trustedProxies)
            router.handle(forwarded, respond: respond)
        }
        self.handler = handler
        // Judged on a request's head, before its body is read (and memory set aside for it): see `bodyRefusal`.
        let admission: HTTPServer.Admission = { head in
            RequestPath.refusal(forHead: head) { Self.refusal(for: $0) ?? Self.bodyRefusal($0) }.map { router.finish($0) }
        }
        server = HTTPServer(configuration: configuration.http, logger: logger.labelled("http"), admission: admission,
                            handler: handler)
        let worker = worker
        outbox.setOnAccepted { worker.wake() }
        service.setOnRequeued { worker.wake() }
    }

    /// Answers `request` as the server would, without a socket (tests at the router).
    public func handle(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        handler(request, respond)
    }

    /// The port the server listens on.
    public var port: Int { server.port }

    /// Starts delivering and serving. Throws if the port is busy (or storage fails); everything opened
    /// is closed again then.
    public func start() throws {
        do {
            // What the relay's own refusal held goes again. A message the mail provider refused (`failed`)
            // is not re-queued: its composer was told so, and its Retry (`POST /v1/messages/{id}/retry`)
            // is what sends it again — re-sent here as well, it could go out twice, once from a relay
            // the composer has moved to.
            if try outbox.configurationChanged("relay", fingerprint: mailFingerprint) {
                let count = try outbox.releaseHeld(reasons: DeliveryFailure.relayRefusalKinds)
                logger.notice("mail configuration changed; held messages re-queued", metadata: ["count": "\(count)"])
            }
            // The data directory's lock proves no other process holds a key in flight.
            try service.recoverInterrupted()
            try worker.start()
            outbox.startIntegrityChecks()
            try server.start()
            // Device secrets, codes and memos in plain HTTP beyond this machine: fine behind a proxy that
            // ends TLS (it is then named with --trust-proxy), or on a private network on purpose — said
            // once, so it is never by accident.
            let host = configuration.http.host
            if Self.servesPlainHTTPBeyondThisMachine(configuration) {
                logger.warning("serving plain HTTP beyond this machine: device secrets, codes and messages cross "
                               + "the network unencrypted; give --tls-cert and --tls-key, or put a TLS proxy in front "
                               + "(and name it with --trust-proxy)", metadata: ["host": host])
            }
            let timer = scheduler.makeTimer(queue: housekeepingQueue) { [weak self] in self?.houseKeep() }
            housekeeping.withLock { $0 = timer }
            timer.arm(afterMilliseconds: 0)
        } catch {
            worker.stop()
            outbox.close()
            store.close()
            dataDirectory.unlock()
            throw error
        }
    }

    /// Plain HTTP on an address other machines reach, and no TLS proxy named in front of it.
    static func servesPlainHTTPBeyondThisMachine(_ configuration: RelayConfiguration) -> Bool {
        let host = configuration.http.host
        return configuration.http.tls == nil && !Loopback.contains(host: host) && configuration.trustedProxies.isEmpty
    }

    /// Stops in order: the server (draining requests in flight), housekeeping, the worker, the outbox
    /// and the store.
    public func stop() {
        server.stop()
        housekeeping.withLock { timer in
            timer?.cancel()
            timer = nil
        }
        housekeepingQueue.sync {}  // a purge under way finishes before the database closes
        worker.stop()
        outbox.close()
        store.close()
        dataDirectory.unlock()
    }

    private func houseKeep() {
        do {
            try service.purge()
        } catch {
            logger.warning("housekeeping failed", metadata: ["error.kind": DeliveryWorker.kind(of: error)])
        }
        housekeeping.withLock { $0 }?.arm(afterMilliseconds: Self.housekeepingMilliseconds)
    }

    /// The largest body of a request other than a message: a device's registration, an address, a code.
    static let smallBodyBytes = 16 * 1024

    /// Before a body is read: only a message (`POST /v1/messages`, with a device's credentials) may be
    /// large; any other body is a few fields of JSON, and one larger (or chunked) is `413` at once. A body
    /// of 2 MiB announced on `POST /v1/devices` by anyone held memory every message needs (16 of them held
    /// all of it). A message without credentials is `401` before its body, as after it.
    static func bodyRefusal(_ head: HTTPRequest) -> HTTPResponse? {
        if head.method == "POST" && head.path == "/v1/messages" {
            return RelayRoutes.bearerSecret(head) == nil ? RelayRoutes.missingCredentials : nil
        }
        let length = head.headers["Content-Length"].flatMap { Int($0) } ?? 0
        guard head.headers["Transfer-Encoding"] != nil || length > smallBodyBytes else { return nil }
        return .error(413, code: "too_large",
                      message: "Only a message may be large; this request's body may be at most \(smallBodyBytes) bytes.")
    }

    /// The relay's API is for programs (a composer, a script), never for a page in a browser: a request
    /// a browser made for a page (it carries `Origin`, or `Sec-Fetch-Site` other than `none`) is refused
    /// before routing, so no web page can register devices or spend a device's limits.
    static func refusal(for request: HTTPRequest) -> HTTPResponse? {
        let site = request.headers["Sec-Fetch-Site"]
        guard request.headers["Origin"] != nil || (site != nil && site != "none") else { return nil }
        return .error(403, code: "browser_request", message: "The relay's API does not answer web pages.")
    }

    /// The mail URL with a placeholder `to=` when a `resend://` URL has none: `RelayURL` wants a
    /// recipient for it, but each relay message carries its own. (SMTP URLs need none.) The rest of
    /// the URL stays as written; the item goes at the end of the query, before any `#fragment`.
    static func withRecipientPlaceholder(_ mail: String) -> String {
        let scheme = mail.prefix(while: { $0 != ":" }).lowercased()
        guard scheme == "resend", let url = URLParts(mail), !url.query.contains(where: { $0.name == "to" }) else {
            return mail
        }
        let fragment = mail.firstIndex(of: "#") ?? mail.endIndex
        let head = mail[..<fragment]
        let separator = !head.contains("?") ? "?" : head.hasSuffix("?") || head.hasSuffix("&") ? "" : "&"
        return head + separator + "to=recipient@relay.invalid" + mail[fragment...]
    }
}
