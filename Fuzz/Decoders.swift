// libFuzzer entry points, compiled together with the library sources by `Fuzz/run` (one module, so
import Glibc
// internal decoders are reachable). The first input byte chooses the target.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size > 0 else { return 0 }
    let selector = data[0]
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch FuzzTarget.current ?? FuzzTarget(rawValue: selector % 4) ?? .urlencoded {
    case .urlencoded:
        _ = try? MemoDecoder.decode(contentType: "application/x-www-form-urlencoded", body: input)
    case .multipart:
        // Boundary from the input's first line, the rest as the body.
        let newline = input.firstIndex(of: 10) ?? min(input.count, 20)
        let boundary = String(decoding: input[..<newline], as: UTF8.self)
        let body = Array(input[min(newline + 1, input.count)...])
        _ = try? MemoDecoder.decode(contentType: "multipart/form-data; boundary=\(boundary)", body: body)
    case .json:
        _ = try? MemoDecoder.decode(contentType: "application/json", body: input)
    case .policy:
        // Host, Origin and Sec-Fetch-Site values separated by newlines.
        let fields = input.split(separator: 10, maxSplits: 3, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        var headers = HTTPHeaders()
        if fields.count > 0 { headers.add(name: "Host", value: fields[0]) }
        if fields.count > 1 { headers.add(name: "Origin", value: fields[1]) }
        if fields.count > 2 { headers.add(name: "Sec-Fetch-Site", value: fields[2]) }
        let request = HTTPRequest(method: fields.count > 3 && fields[3].hasPrefix("G") ? "GET" : "POST",
                                  path: "/send", headers: headers, remoteAddress: "192.0.2.1")
        _ = FuzzTarget.requestPolicy.refusal(for: request)
        _ = Localization.ranges(fields.first ?? "")
    }
    return 0
}

enum FuzzTarget: UInt8 {
    case urlencoded, multipart, json, policy

    /// Set by `Fuzz/run TARGET` through the environment, so one binary serves each target.
    static let current: FuzzTarget? = {
        switch getenv("JOTTER_FUZZ_TARGET").map({ String(cString: $0) }) {
        case "urlencoded": return .urlencoded
        case "multipart": return .multipart
        case "json": return .json
        case "policy": return .policy
        default: return nil
        }
    }()

    static let requestPolicy: RequestPolicy = {
        let policy = RequestPolicy(configuredHosts: ["jotter.local"])
        policy.setPort(7373)
        return policy
    }()
}
