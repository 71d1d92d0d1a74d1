/// What a client submitted: the memo before it has an id.
public struct MemoDraft: Sendable, Equatable {
    /// The subject the client gave, or nil to derive one from the body.
    public var subject: String?
    /// The memo's text.
    public var body: String
    /// The client's `Idempotency-Key`, if it sent one.
    public var idempotencyKey: String?
    /// How long the memo may be taken back (`DELETE /history/{id}`) before delivery starts.
    public var undoMilliseconds: Int64
    /// Where this one memo goes, when not to the configured recipient (a relay's messages each have
    /// their own). Sealed with the subject and body, so it is erased with them after delivery.
    public var recipient: String?
    /// When the memo was written, epoch milliseconds, if before it was accepted here (a relay's message:
    /// its composer accepted it first). The mail's `Date` is the earlier of this and the accept.
    public var writtenAt: Int64?

    /// A draft with the given fields.
    public init(subject: String? = nil, body: String, idempotencyKey: String? = nil, undoMilliseconds: Int64 = 0,
                recipient: String? = nil, writtenAt: Int64? = nil) {
        self.subject = subject
        self.body = body
        self.idempotencyKey = idempotencyKey
        self.undoMilliseconds = undoMilliseconds
        self.recipient = recipient
        self.writtenAt = writtenAt
    }
}

/// A memo's contents once opened from the outbox, for delivery.
public struct MemoContent: Sendable, Equatable {
    /// The subject (given or derived).
    public var subject: String
    /// The body.
    public var body: String
    /// The memo's own recipient (a relay's message), or nil for the configured one.
    public var recipient: String?
    /// When it was written, if its writer said (a relay's message; see `MemoDraft.writtenAt`).
    public var writtenAt: Int64?

    /// The stored form: a version byte, the subject's length (4 bytes, big-endian), subject, body.
    /// Version 2 (only for a memo with its own recipient) puts the recipient's length and the
    /// recipient between subject and body; version 3 (only for a memo with a written time) puts the
    /// recipient's (empty for none) and then the written time (8 bytes, big-endian, two's complement).
    /// Every memo stored before reads as it did.
    func encoded() -> [UInt8] {
        let subjectBytes = Array(subject.utf8)
        let recipientBytes = recipient.map { Array($0.utf8) } ?? (writtenAt == nil ? nil : [])
        var bytes: [UInt8] = [writtenAt != nil ? 3 : recipientBytes == nil ? 1 : 2]
        bytes.reserveCapacity(17 + subjectBytes.count + (recipientBytes?.count ?? 0) + body.utf8.count)
        Self.appendLength(subjectBytes.count, to: &bytes)
        bytes += subjectBytes
        if let recipientBytes {
            Self.appendLength(recipientBytes.count, to: &bytes)
            bytes += recipientBytes
        }
        if let writtenAt {
            let bits = UInt64(bitPattern: writtenAt)
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        }
        bytes += body.utf8
        return bytes
    }

    /// Reads the stored form back; nil if it is not one.
    init?(encoded bytes: [UInt8]) {
        guard let version = bytes.first, (1...3).contains(version),
              let subjectEnd = Self.field(bytes, at: 1) else { return nil }
        self.subject = String(decoding: bytes[5..<subjectEnd], as: UTF8.self)
        var bodyStart = subjectEnd
        if version >= 2 {
            guard let recipientEnd = Self.field(bytes, at: subjectEnd) else { return nil }
            if version == 2 || recipientEnd > subjectEnd + 4 {
                self.recipient = String(decoding: bytes[(subjectEnd + 4)..<recipientEnd], as: UTF8.self)
            }
            bodyStart = recipientEnd
        }
        if version == 3 {
            guard bytes.count >= bodyStart + 8 else { return nil }
            var bits: UInt64 = 0
            for byte in bytes[bodyStart..<(bodyStart + 8)] { bits = bits << 8 | UInt64(byte) }
            self.writtenAt = Int64(bitPattern: bits)
            bodyStart += 8
        }
        self.body = String(decoding: bytes[bodyStart...], as: UTF8.self)
    }

    private static func appendLength(_ count: Int, to bytes: inout [UInt8]) {
        let count = UInt32(count)
        bytes += [UInt8(count >> 24), UInt8((count >> 16) & 0xFF), UInt8((count >> 8) & 0xFF), UInt8(count & 0xFF)]
    }

    /// The end of the length-prefixed field whose 4-byte length starts at `offset`, if it fits.
    private static func field(_ bytes: [UInt8], at offset: Int) -> Int? {
        guard bytes.count >= offset + 4 else { return nil }
        let count = Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8
            | Int(bytes[offset + 3])
        return offset + 4 + count <= bytes.count ? offset + 4 + count : nil
    }

    /// Creates content.
    public init(subject: String, body: String, recipient: String? = nil, writtenAt: Int64? = nil) {
        self.subject = subject
        self.body = body
        self.recipient = recipient
        self.writtenAt = writtenAt
    }
}

/// A memo's delivery record as `/history` shows it: metadata, and the subject while it is retained.
public struct MessageRecord: Sendable, Equatable {
    /// The message id (a lowercase UUID).
    public var id: String
    /// When it was accepted, epoch milliseconds.
    public var createdAt: Int64
    /// Where it is in its delivery lifecycle.
    public var status: DeliveryStatus
    /// How many delivery attempts have started.
    public var attempts: Int
    /// When the next attempt is due, if one is scheduled.
    public var nextAttemptAt: Int64?
    /// When it was delivered.
    public var deliveredAt: Int64?
    /// The kind of the last failure (`timeout`, `auth`, …), never server text.
    public var lastError: String?
    /// The subject, while retained.
    public var subject: String?
}

/// A memo claimed by the delivery worker: its id, contents and attempt number.
public struct ClaimedMessage: Sendable {
    /// The message id.
    public var id: String
    /// When it was accepted, epoch milliseconds (the `Date` header uses it, so retries render the same).
    public var createdAt: Int64
    /// Its place in the order of acceptance (the store's `seq`, which only grows): unlike `createdAt`, not
    /// moved by a wall clock set back, so it tells the memos accepted before a worker started from the rest.
    public var seq: Int64
    /// This attempt's number, from 1.
    public var attempt: Int
    /// Rungs already climbed on the backoff ladder (attempts that failed while the relay was offline
    /// do not count: the worker probed instead of backing off).
    public var backoffStep: Int = 0
    /// The opened contents, or nil if the row could not be opened (wrong key or tampered).
    public var content: MemoContent?
}

/// The subject Jotter gives a memo sent without one.
public enum SubjectLine {
    /// Subjects derived from the body stop at a word boundary near this many characters.
    public static let targetLength = 60

    /// The first line of `body` with something visible on it (`Unicode.Scalar.isInvisible`), cut at a
    /// word near 60 characters (with `…` when cut).
    public static func derived(from body: String) -> String {
        asciiDerived(from: body) ?? derivedByCharacters(from: body)
    }

    /// `subject` on one line: control characters (CR and LF included) become spaces, runs collapse, ends
    /// trim (of anything invisible: a no-break or ideographic space, a zero-width one).
    public static func sanitized(_ subject: String) -> String {
        var subject = subject
        let ascii = subject.withUTF8 { bytes in
            bytes.allSatisfy { $0 < 0x80 } ? String(decoding: sanitizedASCII(bytes[...]), as: UTF8.self) : nil
        }
        return ascii ?? sanitizedByScalars(subject)
    }

    /// `derived` by Unicode's rules: lines end at any newline character, the cut falls between characters.
    static func derivedByCharacters(from body: String) -> String {
        // Line by line up to the first one with text: a long memo's other lines are never split or copied.
        var rest = body[...]
        var line: Substring = ""
        while line.unicodeScalars.allSatisfy(\.isInvisible) && !rest.isEmpty {
            let end = rest.firstIndex(where: \.isNewline) ?? rest.endIndex
            line = rest[..<end]
            rest = end == rest.endIndex ? "" : rest[rest.index(after: end)...]
        }
        let cleaned = sanitizedByScalars(String(line))
        guard cleaned.count > targetLength else { return cleaned }
        let head = cleaned.prefix(targetLength)
        if let space = head.lastIndex(of: " "), head.distance(from: head.startIndex, to: space) >= targetLength / 2 {
            return String(head[..<space]) + "…"
        }
        return String(head) + "…"
    }

    /// `sanitized` scalar by scalar, for any text.
    static func sanitizedByScalars(_ subject: String) -> String {
        var result = ""
        var pendingSpace = false
        for scalar in subject.unicodeScalars {
            if scalar.properties.generalCategory == .control || scalar == " " || scalar == "\u{2028}"
                || scalar == "\u{2029}" {
                pendingSpace = !result.isEmpty
                continue
            }
            if pendingSpace {
                result.unicodeScalars.append(" ")
                pendingSpace = false
            }
            result.unicodeScalars.append(scalar)
        }
        // Other invisible ends (U+00A0, U+3000, U+200B): as rare as they are, so is this second pass.
        guard let first = result.unicodeScalars.first, let last = result.unicodeScalars.last,
              first.isInvisible || last.isInvisible else { return result }
        return result.trimmingScalars(where: \.isInvisible)
    }

    /// `derived` byte by byte when everything up to the end of the first non-blank line is ASCII (nil
    /// otherwise): the same answer without Unicode's tables, which were a few percent of one memo's
    /// accept. In ASCII every character is one byte, except CR LF (one character, but the line ends at
    /// the CR either way, and the LF then starts a blank line), and the newlines are LF, VT, FF and CR.
    static func asciiDerived(from body: String) -> String? {
        var body = body
        return body.withUTF8 { bytes -> String? in
            var index = 0
            while index < bytes.count {
                var start = index
                while index < bytes.count, !(0x0A...0x0D).contains(bytes[index]) {
                    guard bytes[index] < 0x80 else { return nil }
                    index += 1
                }
                var end = index
                index += 1
                while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
                while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
                guard start < end else { continue }
                let cleaned = sanitizedASCII(bytes[start..<end])
                guard !cleaned.isEmpty else { continue }  // only control characters: nothing to read
                guard cleaned.count > targetLength else { return String(decoding: cleaned, as: UTF8.self) }
                let head = cleaned[..<targetLength]
                if let space = head.lastIndex(of: 0x20), space >= targetLength / 2 {
                    return String(decoding: head[..<space], as: UTF8.self) + "…"
                }
                return String(decoding: head, as: UTF8.self) + "…"
            }
            return ""
        }
    }

    /// `sanitized` for ASCII bytes: controls (below 0x20, and DEL) and spaces collapse into one space.
    private static func sanitizedASCII(_ bytes: Slice<UnsafeBufferPointer<UInt8>>) -> [UInt8] {
        // Most lines need nothing done: no control character, no run of spaces, no space at either end.
        var previous: UInt8 = 0x20
        var clean = true
        for byte in bytes {
            if byte < 0x20 || byte == 0x7F || (byte == 0x20 && previous == 0x20) {
                clean = false
                break
            }
            previous = byte
        }
        if clean && previous != 0x20 { return Array(bytes) }

        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var pendingSpace = false
        for byte in bytes {
            if byte <= 0x20 || byte == 0x7F {
                pendingSpace = !result.isEmpty
                continue
            }
            if pendingSpace {
                result.append(0x20)
                pendingSpace = false
            }
            result.append(byte)
        }
        return result
    }
}

extension Substring {
    func trimmingCharacters(in set: String) -> Substring {
        var slice = self
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return slice
    }
}
