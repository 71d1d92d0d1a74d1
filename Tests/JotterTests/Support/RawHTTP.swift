import Foundation

/// A deliberately plain HTTP/1.1 client over a blocking socket to 127.0.0.1, so tests control every
/// byte (duplicate headers, bad framing) and see every byte of the answer.
enum RawHTTP {
    struct Response {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: [UInt8]

        func header(_ name: String) -> String? {
            headers.first(where: { $0.name.lowercased() == name.lowercased() })?.value
        }

        func headers(_ name: String) -> [String] {
            headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
        }

        var text: String { String(decoding: body, as: UTF8.self) }

        /// The body as JSON.
        var json: Any? { try? JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed]) }

        /// `error.code` of a JSON error body.
        var errorCode: String? {
            ((json as? [String: Any])?["error"] as? [String: Any])?["code"] as? String
        }

        /// `error.message` of a JSON error body.
        var errorMessage: String? {
            ((json as? [String: Any])?["error"] as? [String: Any])?["message"] as? String
        }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func request(port: Int, method: String, path: String, headers: [(String, String)] = [],
                        body: [UInt8] = []) throws -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\n"
        let names = Set(headers.map { $0.0.lowercased() })
        if !names.contains("host") { head += "Host: 127.0.0.1:\(port)\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !names.contains("content-length") && !names.contains("transfer-encoding")
            && (!body.isEmpty || method == "POST") {
            head += "Content-Length: \(body.count)\r\n"
        }
        head += "Connection: close\r\n\r\n"
        return try exchange(port: port, request: Array(head.utf8) + body)
    }

    /// Writes `request`, reads until the server closes (or the response is complete), parses.
    static func exchange(port: Int, request: [UInt8], timeout: Int = 15) throws -> Response {
        let fd = try connect(port: port, timeout: timeout)
        defer { close(fd) }
        write(fd, request)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received += buffer[0..<count]
            if let response = parse(received), isComplete(response, received) { return response }
        }
        guard let response = parse(received) else {
            throw Failure(description: "no HTTP response (\(received.count) bytes)")
        }
        return response
    }

    /// A blocking socket connected to 127.0.0.1:`port`, reads timing out after `timeout` seconds.
    private static func connect(port: Int, timeout: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket failed") }
        var time = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw Failure(description: "connect failed")
        }
        return fd
    }

    private static func write(_ fd: Int32, _ request: [UInt8]) {
        var sent = 0
        while sent < request.count {
            let count = request.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { break }  // the server may answer (413) and close before reading everything
            sent += count
        }
    }

    /// Writes `request` and reads until the server closes the connection; every response it sent on
    /// it, in order (each framed by its `Content-Length`). Nothing more can happen on a closed
    /// connection, so a test can then check what did without sleeping.
    static func exchangeUntilClosed(port: Int, request: [UInt8], timeout: Int = 15) throws -> [Response] {
        let fd = try connect(port: port, timeout: timeout)
        defer { close(fd) }
        write(fd, request)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { break }
            guard count > 0 else { throw Failure(description: "the server did not close the connection") }
            received += buffer[0..<count]
        }
        return responses(in: received)
    }

    /// Every response in `received`, in order (each framed by its `Content-Length`; a 204 or 304 has no body).
    static func responses(in received: [UInt8]) -> [Response] {
        var responses: [Response] = []
        var rest = received[...]
        while !rest.isEmpty, var response = parse(Array(rest)) {
            let head = Array(rest).count - response.body.count
            let length = response.status == 204 || response.status == 304 ? 0  // no body, whatever follows
                : response.header("Content-Length").flatMap { Int($0) } ?? response.body.count
            response.body = Array(response.body.prefix(length))
            responses.append(response)
            rest = rest.dropFirst(head + response.body.count)
        }
        return responses
    }

    private static func headerEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4)
        where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }

    private static func isComplete(_ response: Response, _ bytes: [UInt8]) -> Bool {
        guard let length = response.header("Content-Length").flatMap({ Int($0) }) else {
            return response.status == 204 || response.status == 304
        }
        return response.body.count >= length
    }

    static func parse(_ bytes: [UInt8]) -> Response? {
        guard let end = headerEnd(bytes) else { return nil }
        let head = String(decoding: bytes[0..<end], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        var headers: [(name: String, value: String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]),
                            line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        return Response(status: status, headers: headers, body: Array(bytes[(end + 4)...]))
    }
}
