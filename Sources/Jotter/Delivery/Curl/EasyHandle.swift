import CCurl
import Glibc

/// One libcurl easy handle, reused across transfers so its connection is reused.
///
/// Owns the handle and the `curl_slist`s set on it (they must outlive every transfer that uses them).
/// Not thread-safe: a handle is used by one delivery slot at a time (see `EasyHandlePool`).
public final class EasyHandle {
    private let library: CurlLibrary.Loaded
    private let handle: UnsafeMutableRawPointer
    /// libcurl's functions.
    private var curl: jotter_curl { library.functions }
    private var lists: [UnsafeMutablePointer<curl_slist>] = []
    private var upload: [UInt8] = []
    private var uploadOffset = 0
    /// The response body of the last transfer.
    public private(set) var responseBody: [UInt8] = []
    /// The response headers of the last transfer (names lowercased).
    public private(set) var responseHeaders: [(name: String, value: String)] = []
    /// The most bytes of response body kept (a relay's answer is small; anything more is dropped).
    public var responseLimit = 64 * 1024
    /// Time limits in two phases, in milliseconds: from the start until the whole upload was handed to
    /// libcurl, and from then until the answer. Nil: only what `CURLOPT_TIMEOUT` says. (SMTP waits far
    /// longer for the reply to the end of DATA than for anything before it: giving up there, when the
    /// server may well have queued the message, would send it twice.)
    public var phaseLimits: (untilUploaded: Int64, afterUpload: Int64)?
    /// The send this transfer is (see `SendProgress`): stopped before its upload is whole when asked, and
    /// told when it is. Nil: no one asks.
    public var progress: SendProgress?
    /// libcurl's description of the last failure (`CURLOPT_ERRORBUFFER`): for classifying it only (it can
    /// name hosts and reply codes; never logged).
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    private var startedAt: UInt64 = 0
    private var uploadedAt: UInt64?
    private var exceededPhaseLimit = false
    /// The largest message the SMTP server says it takes (`SIZE` in its EHLO reply, RFC 1870), as said on
    /// this handle's connection (kept for a reused connection, which is not greeted again; cleared by a new
    /// greeting); nil: none said.
    public private(set) var advertisedMessageSizeLimit: Int?
    /// Whether the last transfer was stopped before its upload because the message is larger than
    /// `advertisedMessageSizeLimit`: nothing of it was sent.
    public private(set) var exceededAdvertisedSize = false

    /// A new handle; throws `SharedLibrary.Missing` without libcurl, `CurlError` if it cannot allocate one.
    public init() throws {
        let library: CurlLibrary.Loaded
        do {
            library = try CurlLibrary.shared.get()
        } catch {
            errorBuffer.deallocate()
            throw error
        }
        guard let handle = jotter_curl_easy_init(library.functions) else {
            errorBuffer.deallocate()
            throw CurlError(code: Int32(CURLE_FAILED_INIT.rawValue))
        }
        self.library = library
        self.handle = handle
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        jotter_curl_easy_cleanup(curl, handle)
        for list in lists { jotter_curl_slist_free_all(curl, list) }
        errorBuffer.deallocate()
    }

    /// Clears options and lists set for the previous transfer, keeping the connection cache.
    public func reset() {
        jotter_curl_easy_reset(curl, handle)
        for list in lists { jotter_curl_slist_free_all(curl, list) }
        lists.removeAll()
        upload = []
        uploadOffset = 0
        responseBody = []
        responseHeaders = []
        phaseLimits = nil
        progress = nil
    }

    /// Sets an integer option.
    public func set(_ option: CURLoption, _ value: Int) throws {
        try check(jotter_curl_setopt_long(curl, handle, option, value))
    }

    /// Sets a string option (libcurl copies it).
    public func set(_ option: CURLoption, _ value: String) throws {
        try check(jotter_curl_setopt_string(curl, handle, option, value))
    }

    /// Sets a list option; the list lives until the next `reset`.
    public func set(_ option: CURLoption, list values: [String]) throws {
        var list: UnsafeMutablePointer<curl_slist>?
        for value in values {
            guard let appended = jotter_curl_slist_append(curl, list, value) else {
                if let list { jotter_curl_slist_free_all(curl, list) }
                throw CurlError(code: Int32(CURLE_OUT_OF_MEMORY.rawValue))
            }
            list = appended
        }
        guard let list else { return }
        lists.append(list)
        try check(jotter_curl_setopt_slist(curl, handle, option, list))
    }

    /// Bytes sent as the request body (HTTP POST via READFUNCTION, or SMTP's DATA), rewindable: libcurl sends
    /// a request again by itself on a fresh connection when a reused one turns out to have been closed by the
    /// server (no reply at all), and for that it must rewind the body — without `CURLOPT_SEEKFUNCTION` it
    /// fails the transfer with `CURLE_SEND_FAIL_REWIND` instead (libcurl `CURLOPT_SEEKFUNCTION(3)`).
    public func setUpload(_ bytes: [UInt8]) throws {
        upload = bytes
        uploadOffset = 0
        let me = Unmanaged.passUnretained(self).toOpaque()
        try check(jotter_curl_setopt_read_function(curl, handle, jotterCurlRead))
        try check(jotter_curl_setopt_pointer(curl, handle, CURLOPT_READDATA, me))
        try check(jotter_curl_setopt_seek_function(curl, handle, jotterCurlSeek))
        try check(jotter_curl_setopt_pointer(curl, handle, CURLOPT_SEEKDATA, me))
    }

    /// Runs the transfer, collecting the response body and headers.
    public func perform() throws(CurlError) {
        responseBody = []
        responseHeaders = []
        uploadOffset = 0
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = jotter_curl_setopt_write_function(curl, handle, jotterCurlWrite)
        _ = jotter_curl_setopt_pointer(curl, handle, CURLOPT_WRITEDATA, me)
        _ = jotter_curl_setopt_header_function(curl, handle, jotterCurlHeader)
        _ = jotter_curl_setopt_pointer(curl, handle, CURLOPT_HEADERDATA, me)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        _ = jotter_curl_setopt_pointer(curl, handle, CURLOPT_ERRORBUFFER, UnsafeMutableRawPointer(errorBuffer))
        if phaseLimits != nil || progress != nil {
            _ = jotter_curl_setopt_xferinfo_function(curl, handle, jotterCurlProgress)
            _ = jotter_curl_setopt_pointer(curl, handle, CURLOPT_XFERINFODATA, me)
            _ = jotter_curl_setopt_long(curl, handle, CURLOPT_NOPROGRESS, 0)
        }
        startedAt = monotonicNanoseconds()
        uploadedAt = nil
        enhancedStatus = nil
        exceededPhaseLimit = false
        exceededAdvertisedSize = false
        var code = jotter_curl_easy_perform(curl, handle)
        if code != CURLE_OK && isStaleConnectionFailure(code) {
            // The server closed an idle pooled connection (common with TLS servers whose idle timeout
            // is shorter than libcurl's reuse limit). Nothing reached it: try once on a fresh connection.
            code = performOnAFreshConnection()
        }
        if code == CURLE_SSL_CONNECT_ERROR && !uploaded {
            // The TLS handshake broke off (a reset, a close: a flaky network, a server restarting; a refused
            // certificate is CURLE_PEER_FAILED_VERIFICATION, not this). Taken at its word, it held every memo
            // for the slow retest as a TLS refusal. Nothing was sent: try once more on a fresh connection,
            // shortly. A second failure is the server's answer (a TLS version or cipher it will not speak).
            usleep(500_000)
            code = performOnAFreshConnection()
        }
        if code == CURLE_ABORTED_BY_CALLBACK && exceededPhaseLimit { code = CURLE_OPERATION_TIMEDOUT }
        guard code == CURLE_OK else { throw CurlError(code: Int32(code.rawValue)) }
    }

    /// A send/receive failure on a reused connection before any reply arrived — or with SMTP's `421`, which
    /// a server that closed an idle connection said on its way out (Postfix: `421 4.4.2 … timeout exceeded`)
    /// and which libcurl reads as the answer to the next command.
    private func isStaleConnectionFailure(_ code: CURLcode) -> Bool {
        guard [CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING].contains(code), !uploaded else { return false }
        var connects = 0
        _ = jotter_curl_getinfo_long(curl, handle, CURLINFO_NUM_CONNECTS, &connects)
        return connects == 0 && (responseCode == 0 || responseCode == 421)
    }

    /// The transfer again from the start, on a new connection (nothing of the last one was sent).
    private func performOnAFreshConnection() -> CURLcode {
        _ = jotter_curl_setopt_long(curl, handle, CURLOPT_FRESH_CONNECT, 1)
        defer { _ = jotter_curl_setopt_long(curl, handle, CURLOPT_FRESH_CONNECT, 0) }
        responseBody = []
        responseHeaders = []
        uploadOffset = 0
        uploadedAt = nil
        enhancedStatus = nil
        return jotter_curl_easy_perform(curl, handle)
    }

    /// The SMTP command the server refused in the last transfer (`MAIL`, `RCPT`, `DATA`), from libcurl's
    /// description of the failure ("MAIL failed: 553"); nil if it was not such a refusal.
    public var refusedSMTPCommand: String? {
        let words = String(cString: errorBuffer).split(separator: " ", maxSplits: 2)
        guard words.count == 3, words[1] == "failed:", ["MAIL", "RCPT", "DATA"].contains(words[0]) else { return nil }
        return String(words[0])
    }

    /// Whether the last transfer got as far as sending its request (a connection made, TLS done): if not,
    /// nothing of it left this machine.
    public var sentRequest: Bool {
        var microseconds: curl_off_t = 0
        _ = jotter_curl_getinfo_off_t(curl, handle, CURLINFO_PRETRANSFER_TIME_T, &microseconds)
        return microseconds > 0
    }

    /// The last response's status (HTTP) or reply code (SMTP); 0 if none was received.
    public var responseCode: Int {
        var code = 0
        _ = jotter_curl_getinfo_long(curl, handle, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    /// The last transfer's certificate chain as libcurl describes it (`CURLOPT_CERTINFO`): for each
    /// certificate, leaf first, its `Name:value` entries (`Subject`, `X509v3 Subject Alternative Name`, …).
    public var certificateInfo: [[String]] {
        var info: UnsafeMutablePointer<curl_certinfo>?
        guard jotter_curl_getinfo_certinfo(curl, handle, &info) == CURLE_OK, let info, let chain = info.pointee.certinfo
        else { return [] }
        return (0..<Int(max(0, info.pointee.num_of_certs))).map { index in
            var entries: [String] = []
            var node = chain[index]
            while let current = node {
                if let data = current.pointee.data { entries.append(String(cString: data)) }
                node = current.pointee.next
            }
            return entries
        }
    }

    /// The first value of a response header.
    public func responseHeader(_ name: String) -> String? {
        let lowered = name.lowercased()
        return responseHeaders.first(where: { $0.name == lowered })?.value
    }

    private func check(_ code: CURLcode) throws {
        guard code == CURLE_OK else { throw CurlError(code: Int32(code.rawValue)) }
    }

    fileprivate func read(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> Int {
        // A server that said how large a message it takes would refuse this one after the whole upload
        // (a bare `552`, read as a full mailbox and uploaded again on every retry): stop before the first byte.
        if uploadOffset == 0, let limit = advertisedMessageSizeLimit, upload.count > limit {
            exceededAdvertisedSize = true
            return Int(CURL_READFUNC_ABORT)
        }
        let count = min(capacity, upload.count - uploadOffset)
        guard count > 0 else {
            if uploadedAt == nil {
                uploadedAt = monotonicNanoseconds()
                progress?.markHandedOver()
            }
            return 0
        }
        upload.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return }
            UnsafeMutableRawPointer(buffer).copyMemory(from: base + uploadOffset, byteCount: count)
        }
        uploadOffset += count
        return count
    }

    /// libcurl's seek callback: the body is read again from `offset` (`SEEK_SET`; the start, when libcurl sends
    /// a POST again). The offset is into `upload` as given, before the dot-stuffing libcurl does for SMTP.
    /// What was read before went out on a connection libcurl has given up, so the body is not `uploaded` until
    /// it has all been read again. (`progress` stays handed over if it was: that copy may have arrived, and
    /// stopping now would not take it back.)
    fileprivate func seek(to offset: curl_off_t, origin: Int32) -> Int32 {
        guard origin == SEEK_SET, offset >= 0, offset <= upload.count else { return CURL_SEEKFUNC_CANTSEEK }
        uploadOffset = Int(offset)
        uploadedAt = nil
        return CURL_SEEKFUNC_OK
    }

    /// libcurl's progress callback (at least once a second): false stops the transfer, a phase's limit
    /// having passed.
    fileprivate func withinPhaseLimits() -> Bool {
        if uploadedAt == nil, let progress, progress.shouldStop { return false }
        guard let limits = phaseLimits else { return true }
        let now = monotonicNanoseconds()
        let (since, limit) = uploadedAt.map { ($0, limits.afterUpload) } ?? (startedAt, limits.untilUploaded)
        guard now >= since, Int64((now - since) / 1_000_000) > limit else { return true }
        exceededPhaseLimit = true
        return false
    }

    fileprivate func write(_ bytes: UnsafeRawBufferPointer) {
        let room = max(0, responseLimit - responseBody.count)
        responseBody.append(contentsOf: bytes.prefix(room))
    }

    /// The enhanced status code (RFC 3463, `5.3.4`) of the last SMTP reply line that had one; nil if none.
    /// Only the code is kept, never the server's text.
    public private(set) var enhancedStatus: String?

    /// Whether the whole request body went out in the last transfer (for SMTP: the message, up to its
    /// final `.`), whatever came back.
    public var uploaded: Bool { uploadedAt != nil }

    fileprivate func header(_ bytes: UnsafeRawBufferPointer) {
        if let status = Self.enhancedStatus(inReply: bytes) { enhancedStatus = status }
        if let limit = Self.sizeLimit(inEHLOLine: bytes) {
            advertisedMessageSizeLimit = limit > 0 ? limit : nil
        } else if bytes.starts(with: "220".utf8) {
            // A new connection's greeting, or STARTTLS's go-ahead: the EHLO that follows says the limit anew
            // (or says none), and a stale one must not fail a memo this server would take.
            advertisedMessageSizeLimit = nil
        }
        let line = String(decoding: bytes, as: UTF8.self)
        if line.hasPrefix("HTTP/") {
            responseHeaders = []  // a new response (after 100 Continue or a redirect)
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingCharacters(in: " \t\r\n")
        responseHeaders.append((name: name, value: String(value)))
    }
}

extension EasyHandle {
    /// The number from an EHLO reply line `250-SIZE 10240000` or `250 SIZE 10240000` (RFC 1870; `0`, or no
    /// number, is no limit: 0); nil for any other line.
    static func sizeLimit(inEHLOLine line: UnsafeRawBufferPointer) -> Int? {
        let bytes = Array(line.prefix(40))
        guard bytes.count >= 8, bytes[0] == UInt8(ascii: "2"), bytes[1] == UInt8(ascii: "5"), bytes[2] == UInt8(ascii: "0"),
              bytes[3] == 0x20 || bytes[3] == 0x2D,
              String(decoding: bytes[4..<8], as: UTF8.self).uppercased() == "SIZE" else { return nil }
        var rest = bytes[8...]
        while let last = rest.last, last == 0x0D || last == 0x0A || last == 0x20 { rest = rest.dropLast() }
        guard !rest.isEmpty else { return 0 }
        guard rest.first == 0x20 else { return nil }  // "SIZEX": another keyword
        let digits = rest.drop { $0 == 0x20 }
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(String(decoding: digits, as: UTF8.self))
    }

    /// `5.3.4` from an SMTP reply line `552 5.3.4 Message too big` or `552-5.3.4 …` (the class digit
    /// matching the reply's); nil for any other line.
    static func enhancedStatus(inReply line: UnsafeRawBufferPointer) -> String? {
        let bytes = Array(line.prefix(20))
        func digit(_ index: Int) -> Bool { index < bytes.count && (0x30...0x39).contains(bytes[index]) }
        guard bytes.count >= 9, digit(0), digit(1), digit(2), bytes[3] == 0x20 || bytes[3] == 0x2D,
              bytes[4] == bytes[0], bytes[5] == UInt8(ascii: ".") else { return nil }
        var end = 6
        var dots = 1
        while end < bytes.count, digit(end) || (bytes[end] == UInt8(ascii: ".") && dots < 2) {
            if bytes[end] == UInt8(ascii: ".") { dots += 1 }
            end += 1
        }
        guard dots == 2, digit(end - 1), end == bytes.count || bytes[end] == 0x20 || bytes[end] == 0x0D
                || bytes[end] == 0x0A else { return nil }
        return String(decoding: bytes[4..<end], as: UTF8.self)
    }
}

@available(*, unavailable)
extension EasyHandle: Sendable {}

private func jotterCurlRead(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                            _ context: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let context else { return 0 }
    return Unmanaged<EasyHandle>.fromOpaque(context).takeUnretainedValue().read(into: buffer, capacity: size * count)
}

private func jotterCurlSeek(_ context: UnsafeMutableRawPointer?, _ offset: curl_off_t, _ origin: Int32) -> Int32 {
    guard let context else { return CURL_SEEKFUNC_CANTSEEK }
    return Unmanaged<EasyHandle>.fromOpaque(context).takeUnretainedValue().seek(to: offset, origin: origin)
}

private func jotterCurlProgress(_ context: UnsafeMutableRawPointer?, _ downloadTotal: curl_off_t, _ downloaded: curl_off_t,
                                _ uploadTotal: curl_off_t, _ uploaded: curl_off_t) -> Int32 {
    guard let context else { return 0 }
    return Unmanaged<EasyHandle>.fromOpaque(context).takeUnretainedValue().withinPhaseLimits() ? 0 : 1
}

private func jotterCurlWrite(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                             _ context: UnsafeMutableRawPointer?) -> Int {
    guard let data, let context else { return 0 }
    Unmanaged<EasyHandle>.fromOpaque(context).takeUnretainedValue()
        .write(UnsafeRawBufferPointer(start: data, count: size * count))
    return size * count
}

private func jotterCurlHeader(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                              _ context: UnsafeMutableRawPointer?) -> Int {
    guard let data, let context else { return 0 }
    Unmanaged<EasyHandle>.fromOpaque(context).takeUnretainedValue()
        .header(UnsafeRawBufferPointer(start: data, count: size * count))
    return size * count
}
