import CCurl

/// Delivers over SMTP with libcurl: `smtp://` with STARTTLS required (`tls=none` only to loopback),
/// or `smtps://` with implicit TLS. Certificates are always verified.
public struct SMTPTransport: Transport {
    /// Where and how to connect.
    public struct Settings: Sendable {
        var host: String
        var port: Int
        var implicitTLS: Bool
        var requireTLS: Bool
        var username: String?
        var password: String?
        var caFile: String?
        var timeoutSeconds: Int
    }

    let settings: Settings
    private let handles = EasyHandlePool()
    private let ehloName = EHLOName.Cache()
    /// How long the reply to the end of DATA is waited for (RFC 5321 §4.5.3.2.6: 10 minutes).
    static let endOfDataReplyMilliseconds: Int64 = 600_000

    init(settings: Settings) {
        self.settings = settings
    }

    var url: String {
        let host = settings.host.contains(":") && !settings.host.hasPrefix("[") ? "[\(settings.host)]" : settings.host
        return "\(settings.implicitTLS ? "smtps" : "smtp")://\(host):\(settings.port)"
    }

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        try handles.withHandle { (handle: EasyHandle) throws(DeliveryFailure) -> DeliveryReceipt in
            do {
                // The URL's path is what libcurl says in EHLO.
                let ehlo = ehloName.name(to: settings.host, port: settings.port)
                try handle.set(CURLOPT_URL, url + "/" + Self.pathSegment(ehlo))
                try handle.set(CURLOPT_PROTOCOLS_STR, settings.implicitTLS ? "smtps" : "smtp")
                try handle.set(CURLOPT_NOSIGNAL, 1)
                // `timeout` bounds the session up to the end of DATA. The reply to that may take minutes
                // (a busy server's spam and virus checks); the message may be queued by then, and giving
                // up would send it again: wait for it as RFC 5321 §4.5.3.2.6 asks, 10 minutes.
                try handle.set(CURLOPT_CONNECTTIMEOUT, min(settings.timeoutSeconds, 15))
                handle.phaseLimits = (untilUploaded: Int64(settings.timeoutSeconds) * 1000,
                                      afterUpload: Self.endOfDataReplyMilliseconds)
                try handle.set(CURLOPT_TIMEOUT, settings.timeoutSeconds + Int(Self.endOfDataReplyMilliseconds / 1000) + 60)
                // libcurl's own wait for any one reply is 120 s: without this, the end of DATA's was too.
                try handle.set(CURLOPT_SERVER_RESPONSE_TIMEOUT, Int(Self.endOfDataReplyMilliseconds / 1000) + 30)
                if !settings.implicitTLS {
                    try handle.set(CURLOPT_USE_SSL, Int(settings.requireTLS ? CURLUSESSL_ALL.rawValue
                                                                             : CURLUSESSL_NONE.rawValue))
                }
                try handle.set(CURLOPT_SSL_VERIFYPEER, 1)
                try handle.set(CURLOPT_SSL_VERIFYHOST, 2)
                if let caFile = settings.caFile { try handle.set(CURLOPT_CAINFO, caFile) }
                if let username = settings.username { try handle.set(CURLOPT_USERNAME, username) }
                if let password = settings.password { try handle.set(CURLOPT_PASSWORD, password) }
                try handle.set(CURLOPT_MAIL_FROM, "<\(message.from.address)>")
                try handle.set(CURLOPT_MAIL_RCPT, list: ["<\(message.to.address)>"])
                try handle.set(CURLOPT_UPLOAD, 1)
                try handle.setUpload(message.rendered())  // libcurl dot-stuffs lines that start with "."
                handle.progress = message.progress
            } catch {
                throw DeliveryFailure(.configuration, permanent: true)
            }
            do throws(CurlError) {
                try handle.perform()
            } catch {
                if handle.exceededAdvertisedSize { throw DeliveryFailure(.tooLarge, permanent: true) }
                throw Self.failure(curl: error, reply: handle.responseCode, refused: handle.refusedSMTPCommand,
                                   enhanced: handle.enhancedStatus, uploaded: handle.uploaded,
                                   recipientIsFixed: !message.onBehalfOfRecipient).explainingCertificate(error, CertificateNames.Target(
                    url: url, protocols: settings.implicitTLS ? "smtps" : "smtp", startTLS: !settings.implicitTLS,
                    host: settings.host, caFile: settings.caFile, timeoutSeconds: settings.timeoutSeconds))
            }
            return DeliveryReceipt()
        }
    }

    /// `name` percent-encoded for a URL's path (libcurl decodes it again): `[` `]` `:` and anything
    /// beyond letters, digits, `-` and `.`.
    static func pathSegment(_ name: String) -> String {
        var encoded = ""
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                encoded += "%" + String(decoding: [hex[Int(byte >> 4)], hex[Int(byte & 15)]], as: UTF8.self)
            }
        }
        return encoded
    }

    /// An SMTP reply code, when there is one, decides: 4xx try again later, 5xx is a refusal, but for
    /// 552: a mailbox over its quota (RFC 5321 4.5.3.1.10: a 552 to RCPT is to be taken as temporary;
    /// at the end of DATA it says the message is too large for the room left, and a memo is small) is
    /// tried again until there is room.
    ///
    /// A permanent refusal of `MAIL FROM` refuses the sender, which every memo shares (an address this
    /// account may not send as): not this memo's failure but the configuration's, so the memos wait, held,
    /// until it changes or the server accepts again — not one failed memo after another. A refused message
    /// stays this memo's (its content may be what was refused), and so does a refused `RCPT` when each
    /// message has its own recipient (a relay's).
    ///
    /// A 5xx before the message went out and before any command of the message (`554` or `521` as the
    /// greeting, a refused EHLO or STARTTLS) refuses this client, not the memo: held as the configuration's
    /// too. So is a refused `RCPT` when every memo goes to the same configured recipient (a composer's;
    /// `recipientIsFixed`). An enhanced status code (RFC 3463) says what a `552` is: `5.3.4` and `5.2.3`, a
    /// message too large, fail at once; otherwise a full mailbox, tried again (a message larger than the
    /// `SIZE` the server's EHLO named is not sent at all, and fails `too_large` too). And a message taken whole
    /// (`uploaded`) with no reply to it is `noReply`: it may have arrived.
    static func failure(curl error: CurlError, reply: Int, refused command: String? = nil, enhanced: String? = nil,
                        uploaded: Bool = false, recipientIsFixed: Bool = false) -> DeliveryFailure {
        let tooLarge = enhanced == "5.3.4" || enhanced == "5.2.3"
        // The last reply is still DATA's `354` (or none): the end of the message was never answered.
        if uploaded && (reply == 354 || reply == 0) {
            let code = CURLcode(rawValue: UInt32(error.code))
            if [CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING, CURLE_OPERATION_TIMEDOUT].contains(code) {
                return DeliveryFailure(.noReply, permanent: false)
            }
        }
        switch reply {
        // First: a login that is missing or refused is answered at MAIL too (`530 5.7.57 Client not
        // authenticated`), and is the password's, not the sender's.
        case 530, 534, 535, 538: return DeliveryFailure(.auth, permanent: true)
        case 500..<600 where tooLarge: return DeliveryFailure(.tooLarge, permanent: true)
        case 500..<600 where command == "MAIL" && reply != 552:
            var failure = DeliveryFailure(.configuration, permanent: true)
            failure.hint = "the mail server refuses MAIL FROM (reply \(reply)): check from= and that this account may send from it"
            return failure
        case 500..<600 where command == "RCPT" && recipientIsFixed && reply != 552:
            var failure = DeliveryFailure(.configuration, permanent: true)
            failure.hint = "the mail server refuses the recipient (reply \(reply)): check to= and that this account may send there"
            return failure
        case 500..<600 where command == nil && !uploaded:
            var failure = DeliveryFailure(.configuration, permanent: true)
            failure.hint = "the mail server refuses this connection (reply \(reply)) before any memo: check the host, "
                + "and that this machine may send through it"
            return failure
        case 552: return DeliveryFailure(.mailboxFull, permanent: false)
        case 400..<500: return DeliveryFailure(.serverError, permanent: false)
        case 500..<600: return DeliveryFailure(.rejected, permanent: true)
        default:
            // A login refused with no 5xx reply: the server never offered a mechanism to log in with —
            // typically it offers AUTH only after STARTTLS, and ?tls=none skipped that. Not a wrong
            // password: the configuration needs changing.
            let code = CURLcode(rawValue: UInt32(error.code))
            if code == CURLE_LOGIN_DENIED || code == CURLE_AUTH_ERROR {
                return DeliveryFailure(.configuration, permanent: true)
            }
            return DeliveryFailure(curl: error)
        }
    }

    public func probe() -> Bool {
        TCPProbe.canConnect(host: settings.host, port: settings.port)
    }
}
