/// Matches a request to its route and adds the headers every response carries.
///
/// Routes are registered as `(method, pattern)`; a pattern segment `{id}` matches any one segment.
/// Unknown paths get `404`, known paths with another method `405` with `Allow`.
public struct Router: Sendable {
    /// A route's handler: answer by calling `respond` once, now or later.
    public typealias Handler = @Sendable (HTTPRequest, _ parameters: [String: String],
                                          _ respond: @escaping @Sendable (HTTPResponse) -> Void) -> Void

    private struct Route: Sendable {
        var method: String
        var pattern: String
        var segments: [Substring]
        var handler: Handler
    }

    private var routes: [Route] = []
    /// The Content-Security-Policy for responses that are not the page (which sets its own).
    public static let defaultContentSecurityPolicy =
        "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    /// The policy this router applies.
    public var defaultContentSecurityPolicy = Router.defaultContentSecurityPolicy

    /// An empty router.
    public init() {}

    /// Adds a route for `method` and `pattern` (`/history/{id}`).
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping Handler) {
        routes.append(Route(method: method, pattern: pattern,
                            segments: pattern.split(separator: "/", omittingEmptySubsequences: true),
                            handler: handler))
    }

    /// Routes `request`; `respond` gets the finished response with the common headers added.
    public func handle(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let path = request.path.split(separator: "/", omittingEmptySubsequences: true)
        var allowed: [String] = []
        for route in routes {
            guard let parameters = Self.match(route.segments, path) else { continue }
            let method = request.method == "HEAD" ? "GET" : request.method
            guard route.method == method else {
                allowed.append(route.method)
                continue
            }
            let policy = defaultContentSecurityPolicy
            let pattern = route.pattern
            route.handler(request, parameters) { response in
                // Changed in place, not copied: a response's copy retains each of its parts.
                var response = response
                response.route = pattern
                Self.addCommonHeaders(&response, policy: policy)
                respond(response)
            }
            return
        }
        if allowed.isEmpty {
            respond(Self.finish(.error(404, code: "not_found", message: "There is nothing here."),
                                policy: defaultContentSecurityPolicy))
        } else {
            var response = HTTPResponse.error(405, code: "method_not_allowed", message: "Method not allowed here.")
            let allow = allowed.contains("GET") ? allowed + ["HEAD"] : allowed
            response.headers.add(name: "Allow", value: allow.joined(separator: ", "))
            respond(Self.finish(response, policy: defaultContentSecurityPolicy))
        }
    }

    private static func match(_ pattern: [Substring], _ path: [Substring]) -> [String: String]? {
        guard pattern.count == path.count else { return nil }
        var parameters: [String: String] = [:]
        for (expected, actual) in zip(pattern, path) {
            if expected.hasPrefix("{") && expected.hasSuffix("}") {
                parameters[String(expected.dropFirst().dropLast())] = String(actual)
            } else if expected != actual {
                return nil
            }
        }
        return parameters
    }

    /// `response` with the headers every response carries (for answers given before routing).
    public func finish(_ response: HTTPResponse) -> HTTPResponse {
        Self.finish(response, policy: defaultContentSecurityPolicy)
    }

    /// `response` with the common headers and the default policy (for answers the HTTP layer gives itself).
    static func finish(_ response: HTTPResponse) -> HTTPResponse {
        finish(response, policy: defaultContentSecurityPolicy)
    }

    /// `no-store` (a memo must never sit in a cache), `nosniff`, `no-referrer`, a CSP, and no cookie ever.
    static func finish(_ response: HTTPResponse, policy: String) -> HTTPResponse {
        var response = response
        addCommonHeaders(&response, policy: policy)
        return response
    }

    /// The same, in place; a response that has them already (built once, ahead) is left as it is.
    private static func addCommonHeaders(_ response: inout HTTPResponse, policy: String) {
        if response.finished { return }
        response.finished = true
        response.headers.add(name: "Cache-Control", value: "no-store")
        response.headers.add(name: "X-Content-Type-Options", value: "nosniff")
        response.headers.add(name: "Referrer-Policy", value: "no-referrer")
        if response.headers["Content-Security-Policy"] == nil {
            response.headers.add(name: "Content-Security-Policy", value: policy)
        }
    }
}
