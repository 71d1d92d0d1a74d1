/// One memo as an email: renders a correct RFC 5322 / MIME message.
public struct MailMessage: Sendable, Equatable {
    /// The memo's id; the `Message-ID` derives from it, so every retry carries the same one.
    public var id: String
    /// When the memo was accepted (the `Date` header), epoch milliseconds.
    public var date: Int64
    /// `From:` and the envelope sender.
    public var from: MailAddress
    /// `To:` and the envelope recipient.
    public var to: MailAddress
    /// The subject (may be any Unicode).
    public var subject: String
    /// The body (any Unicode; line breaks may be LF or CRLF).
    public var body: String
    /// This delivery attempt's number, from 1 (transports use it to check for an earlier, interrupted attempt).
    public var attempt: Int

    /// Creates a message.
    public init(id: String, date: Int64, from: MailAddress, to: MailAddress, subject: String, body: String,
                attempt: Int = 1) {
        self.id = id
        self.date = date
        self.from = from
        self.to = to
        self.subject = subject
        self.body = body
        self.attempt = attempt
    }

    /// `<id@domain-of-From>`.
    public var messageID: String {
        "<\(id)@\(from.domain)>"
    }

    /// The full message, CRLF line endings, ready for SMTP or a Maildir file.
    public func rendered() -> [UInt8] {
        var headers: [String] = []
        headers.append("Date: \(Timestamp.rfc5322(milliseconds: date))")
        headers.append("From: \(from.headerValue)")
        headers.append("To: \(to.headerValue)")
        headers.append(MIME.subjectHeader(subject))
        headers.append("Message-ID: \(messageID)")
        headers.append("MIME-Version: 1.0")
        let (encoding, encodedBody) = MIME.encodeBody(body)
        headers.append("Content-Type: text/plain; charset=utf-8")
        headers.append("Content-Transfer-Encoding: \(encoding)")
        headers.append("X-Mailer: Jotter")
        var bytes = Array((headers.joined(separator: "\r\n") + "\r\n\r\n").utf8)
        bytes += encodedBody
        return bytes
    }
}
