// libFuzzer entry points, compiled together with the library sources by `Fuzz/run` (one module, so
import Glibc
// internal decoders are reachable). The first input byte chooses the target.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size > 0 else { return 0 }
    let selector = data[0]
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch FuzzTarget.current ?? FuzzTarget(rawValue: selector % 6) ?? .urlencoded {
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
    case .path:
        // One normalisation for the policy and the router: what it accepts is canonical, and stays so.
        let raw = String(decoding: input, as: UTF8.self)
        if case .success(let path) = RequestPath.normalize(raw) {
            precondition(path.hasPrefix("/"), "a normalised path starts with /")
            precondition(!path.contains("//") && !path.contains("/./") && !path.hasSuffix("/."), "not collapsed")
            precondition(!path.split(separator: "/").contains(".."), "a .. survived")
            // The result is decoded (%20 is a space): when it needs no escaping, normalising it again
            // changes nothing.
            if !path.contains("%") && path.utf8.allSatisfy({ $0 == 0x2F || RequestPath.isPathCharacter($0) }) {
                guard case .success(let again) = RequestPath.normalize(path) else {
                    preconditionFailure("a normalised path is refused when normalised again")
                }
                precondition(again == path, "normalising is not idempotent")
            }
        }
    case .framing:
        // Header lines "Name: value" (the first line is the version); every check runs on them.
        let lines = input.split(separator: 10, omittingEmptySubsequences: false)
        var head = RequestFraming.Head()
        head.version = String(decoding: lines.first ?? [], as: UTF8.self)
        for line in lines.dropFirst() {
            let colon = line.firstIndex(of: 0x3A) ?? line.endIndex
            let name = Array(line[line.startIndex..<colon]), value = Array(line[min(colon + 1, line.endIndex)...])
            name.withUnsafeBytes { if !RequestFraming.isToken($0) { head.malformedName = true } }
            value.withUnsafeBytes { if !RequestFraming.isFieldValue($0) { head.malformedValue = true } }
            head.headers.add(name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
        }
        _ = RequestFraming.refusal(head, maxBodyBytes: 262_144)
        _ = RequestFraming.isValidHost(head.headers["Host"] ?? "")
    }
    return 0
}

enum FuzzTarget: UInt8 {
    case urlencoded, multipart, json, policy, path, framing

    /// Set by `Fuzz/run TARGET` through the environment, so one binary serves each target.
    static let current: FuzzTarget? = {
        switch getenv("JOTTER_FUZZ_TARGET").map({ String(cString: $0) }) {
        case "urlencoded": return .urlencoded
        case "multipart": return .multipart
        case "json": return .json
        case "policy": return .policy
        case "path": return .path
        case "framing": return .framing
        default: return nil
        }
    }()

    static let requestPolicy: RequestPolicy = {
        let policy = RequestPolicy(configuredHosts: ["jotter.local"])
        policy.setPort(7373)
        return policy
    }()
}
