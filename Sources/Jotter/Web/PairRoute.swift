/// The certificate authority a phone trusts once (LAN mode over HTTPS): what the pairing screen offers.
public struct TrustAnchor: Sendable {
    /// SHA-256 of the CA certificate, `AB:CD:…`, to compare with what the phone shows.
    public var fingerprint: String
    /// The CA certificate, DER (`/jotter-ca.crt`, for Android).
    public var certificate: [UInt8]
    /// An iOS configuration profile holding the CA (`/jotter-ca.mobileconfig`).
    public var mobileConfig: [UInt8]

    /// Where the page downloads it.
    static let certificatePath = "/jotter-ca.crt", mobileConfigPath = "/jotter-ca.mobileconfig"
}

/// What main prints in LAN mode, and what pairing links are made of.
public struct LANInfo: Sendable {
    /// The machine's LAN addresses.
    public var addresses: [String]
    /// `https` (or `http` with `--insecure-http`).
    public var scheme: String
    /// The fingerprint to compare: the local CA's (what the phone installs), else the certificate's.
    public var fingerprint: String?
    /// The local CA, when serving HTTPS.
    public var trustAnchor: TrustAnchor?
    /// The pairing token printed at start (10 minutes, one use); more come from `jotter pair` or the page.
    public var pairingToken: String
    /// The same link as a code to type on the phone (`K7Q2-M9XD`), when there is one.
    public var pairingCode: String?
    /// The bound port.
    public var port = 0
    /// Addresses the HTTPS certificate does not name, because the local CA may not vouch for them (a
    /// public address, a VPN's 100.64/10): a phone opening one would be refused by its browser, so no
    /// link names them. They still pass the `Host` check.
    public var unnamed: [String] = []

    /// The addresses a phone can open: every LAN address the certificate names (all of them over HTTP).
    public var reachable: [String] { addresses.filter { !unnamed.contains($0) } }

    /// `https://ADDRESS:PORT/#pair=TOKEN` for each address: the fragment never reaches a server log.
    public var pairingURLs: [String] { links(token: pairingToken) }

    /// The pairing links for `token`, one per address a phone can open.
    public func links(token: String) -> [String] {
        reachable.map { "\(scheme)://\(Self.hostPart($0)):\(port)/#pair=\(token)" }
    }

    /// `[v6]` in brackets, anything else as it is.
    static func hostPart(_ address: String) -> String {
        address.contains(":") ? "[\(address)]" : address
    }
}

/// The pairing routes (LAN mode):
/// - `GET /pairing` — where this device stands (paired, not paired, revoked), for the page;
/// - `POST /pair` `{"pairing_token": "…"}` (a link's token, or its code as typed) → `201 {"device_token",
///   "device_id", "name"}`;
/// - `POST /pair/link` — a fresh one-time link and its QR code, for the computer's own page only;
/// - `GET /jotter-ca.crt`, `GET /jotter-ca.mobileconfig` — the CA for the phone to trust.
struct PairRoute: Sendable {
    let devices: DeviceRegistry
    let policy: RequestPolicy
    let lan: LANState

    /// The largest body a pairing request may have: a token and a device name fit many times over.
    static let maxBodyBytes = 4096

    /// `413` for a pairing request (what a device that is not paired yet may send with a body) that is
    /// larger than `maxBodyBytes`, or chunked, judged on its head: strangers cannot hold the memory bodies
    /// share with a pairing request that never ends.
    static func oversizedRefusal(_ head: HTTPRequest) -> HTTPResponse? {
        guard head.method == "POST", head.path == "/pair" || head.path == "/pair/link" else { return nil }
        if let length = head.headers["Content-Length"].flatMap({ Int($0) }), length <= maxBodyBytes,
           head.headers["Transfer-Encoding"] == nil {
            return nil
        }
        return tooLarge
    }

    private static var tooLarge: HTTPResponse {
        .error(413, code: "too_large", message: "A pairing request is a token and a name: at most \(maxBodyBytes) bytes.")
    }

    /// `POST /pair`.
    func handle(_ request: HTTPRequest) -> HTTPResponse {
        guard request.body.count <= Self.maxBodyBytes else { return Self.tooLarge }
        guard let body = try? JSONValue.parse(request.body), let pairingToken = body["pairing_token"]?.string else {
            return .error(400, code: "invalid_pairing", message: "Send {\"pairing_token\": \"…\"}.")
        }
        // A request id makes a retry safe (the answer to the first was lost): one it cannot use is refused,
        // not ignored, or that retry would find the link spent.
        let requestID = body["request_id"].flatMap { $0 == .null ? nil : $0 }
        if let requestID, !(requestID.string.map { (16...128).contains($0.utf8.count) } ?? false) {
            return .error(400, code: "invalid_request_id", message: "request_id must be a string of 16-128 characters.")
        }
        // The link opened on the computer itself (the one printed at start, clicked in the terminal):
        // this computer needs no pairing, and spending the link would leave the phone with a used one.
        if policy.trustsLoopback && policy.isThisMachine(request.remoteAddress) {
            return .error(409, code: "this_machine",
                          message: "This computer needs no pairing: open the link on your phone, or scan its QR code.")
        }
        // A phone that is paired already (the same code scanned twice, a link opened again) stays the
        // device it is: the link is left for the phone it was made for.
        if case .valid(let id) = policy.bearerCheck(request, devices: devices),
           let device = try? devices.device(id: id) {
            var json = JSONWriter()
            json.object {
                $0.field("device_id", device.id)
                $0.field("name", device.name)
                $0.field("already_paired", true)
            }
            return .json(200, json.bytes)
        }
        // A code is short enough to guess at: once locked out, no code is even looked at.
        if PairingCode.normalized(pairingToken) != nil, let refusal = policy.lockedOut(client: request.remoteAddress) {
            return refusal
        }
        let given = body["name"]?.string.map { SubjectLine.sanitized($0) } ?? ""
        let name = given.isEmpty ? DeviceName.from(request.headers, touch: body["touch"] == .bool(true)) : given
        do {
            switch try devices.pair(pairingToken: pairingToken, deviceName: name, request: requestID?.string) {
            case .paired(let device, let token):
                var json = JSONWriter()
                json.object {
                    $0.field("device_token", token)
                    $0.field("device_id", device.id)
                    $0.field("name", device.name)
                }
                return .json(201, json.bytes)
            case .used:
                return .error(410, code: "pairing_link_used",
                              message: "This pairing link was already used. Get a new one on the computer.")
            case .expired:
                return .error(410, code: "pairing_link_expired",
                              message: "This pairing link has expired (links work for 10 minutes). "
                                + "Get a new one on the computer.")
            case .unknown:
                // A typed code is told as one: "link" misleads whoever typed eight characters.
                return policy.failedAttempt(client: request.remoteAddress, code: "pairing_link_invalid",
                                            message: PairingCode.normalized(pairingToken) != nil
                                                ? "This pairing code is not valid here: check it, or get a new one on the computer."
                                                : "This pairing link is not valid here.")
            }
        } catch {
            return .error(503, code: "storage_unavailable", message: "The device could not be stored.")
        }
    }

    /// `GET /pairing`: the page asks where it stands, and whether it may offer "Pair a phone".
    func state(_ request: HTTPRequest) -> HTTPResponse {
        let loopback = policy.isThisMachine(request.remoteAddress)
        var device: DeviceRegistry.Device?
        let state: String
        switch policy.bearerCheck(request, devices: devices) {
        case .valid(let id):
            device = try? devices.device(id: id)
            state = "paired"
        case .revoked:
            state = "revoked"
        case .unknown:
            let refusal = policy.failedAttempt(client: request.remoteAddress)
            if refusal.status == 429 { return refusal }
            state = "invalid"
        case .absent:
            state = loopback && policy.trustsLoopback ? "this_machine" : "not_paired"
        }
        var json = JSONWriter()
        json.object { object in
            object.field("state", state)
            object.key("device")
            if let device {
                object.object {
                    $0.field("id", device.id)
                    $0.field("name", device.name)
                }
            } else {
                object.null()
            }
            object.field("can_pair_others", loopback)
            writeTrustAnchor(&object)
        }
        return .json(200, json.bytes)
    }

    /// `POST /pair/link`: a fresh link (any number may be live), for a page on this machine only.
    func link(_ request: HTTPRequest) -> HTTPResponse {
        guard policy.isThisMachine(request.remoteAddress) else {
            return .error(403, code: "not_this_machine",
                          message: "Pairing links are issued only to the Jotter page on the computer itself.")
        }
        let issued: DeviceRegistry.PairingToken
        do {
            issued = try devices.issuePairingToken()
        } catch {
            return .error(503, code: "storage_unavailable", message: "The pairing link could not be stored.")
        }
        var lan = self.lan.current
        lan.port = policy.boundPort
        let urls = lan.links(token: issued.token)
        var json = JSONWriter()
        json.object { object in
            object.field("url", urls.first)
            object.key("urls")
            object.array { array in urls.forEach { array.value($0) } }
            object.field("token", issued.token)
            object.field("code", issued.code)
            object.field("expires_at", Timestamp.iso8601(milliseconds: issued.expiresAt))
            object.field("qr_svg", urls.first.flatMap(QRCode.svg))
            writeTrustAnchor(&object)
        }
        return .json(201, json.bytes)
    }

    private func writeTrustAnchor(_ object: inout JSONWriter) {
        object.key("ca")
        guard let anchor = lan.current.trustAnchor else {
            object.null()
            return
        }
        object.object {
            $0.field("fingerprint", anchor.fingerprint)
            $0.field("crt", TrustAnchor.certificatePath)
            $0.field("mobileconfig", TrustAnchor.mobileConfigPath)
        }
    }

    /// `GET /jotter-ca.crt` (DER: what Android's "Install a certificate" takes).
    func certificate() -> HTTPResponse {
        guard let anchor = lan.current.trustAnchor else { return Self.noAnchor }
        return HTTPResponse(status: 200, headers: [
            "Content-Type": "application/x-x509-ca-cert",
            "Content-Disposition": "attachment; filename=\"jotter-ca.crt\"",
        ], body: anchor.certificate)
    }

    /// `GET /jotter-ca.mobileconfig` (iOS installs it from Settings → Profile Downloaded).
    func mobileConfig() -> HTTPResponse {
        guard let anchor = lan.current.trustAnchor else { return Self.noAnchor }
        return HTTPResponse(status: 200, headers: [
            "Content-Type": "application/x-apple-aspen-config",
            "Content-Disposition": "attachment; filename=\"jotter-ca.mobileconfig\"",
        ], body: anchor.mobileConfig)
    }

    private static let noAnchor = HTTPResponse.error(
        404, code: "no_certificate_authority", message: "This server does not serve HTTPS with a local CA.")
}
