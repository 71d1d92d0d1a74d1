import Foundation

/// What main prints in LAN mode.
public struct LANInfo: Sendable {
    /// The machine's LAN addresses.
    public var addresses: [String]
    /// `https` (or `http` with `--insecure-http`).
    public var scheme: String
    /// The certificate's SHA-256 fingerprint, to compare with what the phone shows.
    public var fingerprint: String?
    /// The one-time pairing token (10 minutes).
    public var pairingToken: String
    /// The bound port.
    public var port = 0

    /// `https://ADDRESS:PORT/#pair=TOKEN` for each address: the fragment never reaches a server log.
    public var pairingURLs: [String] {
        addresses.map { "\(scheme)://\($0):\(port)/#pair=\(pairingToken)" }
    }
}

/// `POST /pair` `{"pairing_token": "…", "name": "…"}` → `201 {"device_token": "…"}`.
struct PairRoute: Sendable {
    let devices: DeviceRegistry
    let policy: RequestPolicy

    private struct Body: Decodable {
        var pairing_token: String
        var name: String?
    }

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        guard let body = try? JSONDecoder().decode(Body.self, from: Data(request.body)) else {
            return .error(400, code: "invalid_pairing", message: "Send {\"pairing_token\": \"…\"}.")
        }
        do {
            guard let token = try devices.pair(pairingToken: body.pairing_token, deviceName: body.name ?? "device")
            else {
                return policy.failedAttempt(client: request.remoteAddress)
            }
            var json = JSONWriter()
            json.object { $0.field("device_token", token) }
            return .json(201, json.bytes)
        } catch {
            return .error(503, code: "storage_unavailable", message: "The device could not be stored.")
        }
    }
}

/// The machine's addresses and names, for LAN mode.
enum NetworkInterfaces {
    /// IPv4 addresses of interfaces that are up and not loopback.
    static func lanAddresses() -> [String] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var addresses: [String] = []
        var cursor = list
        while let entry = cursor {
            cursor = entry.pointee.ifa_next
            guard let address = entry.pointee.ifa_addr, Int32(address.pointee.sa_family) == AF_INET,
                  entry.pointee.ifa_flags & UInt32(IFF_UP) != 0,
                  entry.pointee.ifa_flags & UInt32(IFF_LOOPBACK) == 0 else { continue }
            var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            var inet = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            inet_ntop(AF_INET, &inet, &buffer, socklen_t(buffer.count))
            let text = String(decoding: buffer.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)), as: UTF8.self)
            if !addresses.contains(text) { addresses.append(text) }
        }
        return addresses
    }

    /// This machine's host name and its mDNS form (`name.local`).
    static func hostNames() -> [String] {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return [] }
        let name = String(decoding: buffer.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)), as: UTF8.self)
            .lowercased()
        guard !name.isEmpty, name != "localhost" else { return [] }
        return name.hasSuffix(".local") ? [name] : [name, name + ".local"]
    }
}
