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
    /// This delivery attempt's number, from 1.
    public var attempt: Int
    /// An earlier attempt may have delivered it: a retry, or a memo an earlier process accepted (a power
    /// loss can undo the unsynced record of its delivery, attempt number and all). A transport that can
    /// look for an earlier copy does so only then.
    public var mayHaveBeenDelivered: Bool
    /// Sent by a service to a user's own inbox (the Jotter relay's codes and memos): marked
    /// `Auto-Submitted: auto-generated` (RFC 3834), so vacation replies and ticket systems do not answer
    /// it, and `Reply-To` the recipient, so a reply quoting a memo reaches its owner, not the relay.
    public var onBehalfOfRecipient = false
    /// Shared with the delivery worker while it sends (SMTP): stops the transfer before the message is
    /// handed over when the worker asks, and tells it once the message has been.
    public var progress: SendProgress?

    /// Creates a message.
    public init(id: String, date: Int64, from: MailAddress, to: MailAddress, subject: String, body: String,
                attempt: Int = 1, mayHaveBeenDelivered: Bool? = nil) {
        self.id = id
        self.date = date
        self.from = from
        self.to = to
        self.subject = subject
        self.body = body
        self.attempt = attempt
        self.mayHaveBeenDelivered = mayHaveBeenDelivered ?? (attempt > 1)
    }

    /// `<id@domain-of-From>`.
    public var messageID: String {
        "<\(id)@\(from.domain)>"
    }

    /// The full message with this system's line endings (LF), as a local program reads it: a Maildir
    /// file (mail readers and Python's `mailbox` read CRLF as a CR left in every line) and sendmail's input.
    public func renderedLocally() -> [UInt8] {
        let bytes = rendered()
        var local: [UInt8] = []
        local.reserveCapacity(bytes.count)
        for (index, byte) in bytes.enumerated()
        where !(byte == 13 && index + 1 < bytes.count && bytes[index + 1] == 10) {
            local.append(byte)
        }
        return local
    }

    /// The full message, CRLF line endings, ready for SMTP. Built as bytes into one buffer: a Maildir batch
    /// renders every memo it delivers.
    public func rendered() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(420 + from.name.utf8.count * 3 + subject.utf8.count * 3 + body.utf8.count * 14 / 10)
        out.append("Date: ")
        Timestamp.appendRFC5322(milliseconds: date, to: &out)
        out.append("\r\nFrom: ")
        from.appendHeaderValue(to: &out, headerNameLength: 6)
        out.append("\r\nTo: ")
        to.appendHeaderValue(to: &out, headerNameLength: 4)
        out.append("\r\n")
        MIME.appendSubjectHeader(subject, to: &out)
        out.append("\r\nMessage-ID: ")
        out.append(utf8: messageID)
        if onBehalfOfRecipient {
            out.append("\r\nAuto-Submitted: auto-generated\r\nReply-To: ")
            to.appendHeaderValue(to: &out, headerNameLength: 10)
        }
        out.append("\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n")
        // The encoding is known once the body is encoded, so the body goes after the headers' end and
        // its header is put in front of it.
        var body: [UInt8] = []
        body.reserveCapacity(self.body.utf8.count * 14 / 10 + 4)
        let encoding = MIME.appendBody(self.body, to: &body)
        out.append("Content-Transfer-Encoding: ")
        out.append(encoding)
        out.append("\r\nX-Mailer: Jotter\r\n\r\n")
        out.append(contentsOf: body)
        return out
    }
}
