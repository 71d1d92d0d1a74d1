/// `GET /`: the page, rendered once per language at start and held in memory, with a
/// Content-Security-Policy that allows exactly its own inline `<style>` and `<script>` (by SHA-256
/// hash) and nothing from any other origin.
///
/// `Public/index.html` is a template: `{{key}}` becomes the HTML-escaped string for `key` in the
/// chosen language, plus `{{lang}}`, `{{dir}}` and `{{projectURL}}`. Style and script hold no
/// placeholders, so one policy fits every language.
struct PageRoute: Sendable {
    /// Why the page could not be loaded at start.
    enum LoadError: Error, CustomStringConvertible {
        case missing(path: String)
        case invalidTranslations(tag: String)

        var description: String {
            switch self {
            case .missing(let path): return "cannot read the page at \(path)"
            case .invalidTranslations(let tag): return "Public/i18n/\(tag).json is not a JSON object of strings"
            }
        }
    }

    let localization: Localization
    let contentSecurityPolicy: String
    /// Each language's answer, plain and gzip-compressed (about a third of the size: the shell stays one
    /// small request): headers, body and the built libmicrohttpd response, made once (a request only
    /// picks one).
    private let responses: [String: Variant]

    /// One language's two answers, shared by reference: a request picks one without copying the other.
    private final class Variant: Sendable {
        let plain: HTTPResponse
        let compressed: HTTPResponse?

        init(plain: HTTPResponse, compressed: HTTPResponse?) {
            self.plain = plain
            self.compressed = compressed
        }
    }

    /// LAN mode: the page asks for client hints, so a phone's device name can say "Android — Pixel 8".
    let lan: Bool

    /// Reads the template and translations from `publicDirectory`.
    init(publicDirectory: String, projectURL: String = PageRoute.defaultProjectURL, lan: Bool = false) throws {
        guard let data = try? FileIO.read(path: publicDirectory + "/index.html") else {
            throw LoadError.missing(path: publicDirectory + "/index.html")
        }
        let localization = try Localization(directory: publicDirectory + "/i18n")
        self.init(template: String(decoding: data, as: UTF8.self), localization: localization,
                  projectURL: projectURL, lan: lan)
    }

    /// Renders `template` for every available language.
    init(template: String, localization: Localization, projectURL: String = PageRoute.defaultProjectURL,
         lan: Bool = false) {
        self.localization = localization
        self.lan = lan
        let scripts = Self.elementContents(tag: "script", in: template).map(Self.hashSource)
        let styles = Self.elementContents(tag: "style", in: template).map(Self.hashSource)
        contentSecurityPolicy = [
            "default-src 'none'",
            "script-src " + (scripts.isEmpty ? "'none'" : scripts.joined(separator: " ")),
            "style-src " + (styles.isEmpty ? "'none'" : styles.joined(separator: " ")),
            "img-src 'self' data:",
            "connect-src 'self'",
            "manifest-src 'self'",
            "form-action 'self'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ].joined(separator: "; ")
        var responses: [String: Variant] = [:]
        let english = localization.strings[Localization.fallback] ?? [:]
        for tag in localization.available {
            var values = english.merging(localization.strings[tag] ?? [:]) { $1 }
            values["lang"] = tag
            values["dir"] = Localization.rightToLeft.contains(tag) ? "rtl" : "ltr"
            values["projectURL"] = projectURL
            values["mode"] = lan ? "lan" : "local"
            let page = Array(Self.render(template, values: values).utf8)
            var headers: HTTPHeaders = [
                "Content-Type": "text/html; charset=utf-8",
                "Content-Language": tag,
                "Vary": "Accept-Language, Accept-Encoding",
                "Content-Security-Policy": contentSecurityPolicy,
            ]
            if lan { headers.add(name: "Accept-CH", value: "Sec-CH-UA-Model, Sec-CH-UA-Platform") }
            var plain = HTTPResponse(status: 200, headers: headers, body: page)
            plain.reusable = ReusableResponse()
            var compressed: HTTPResponse?
            if let bytes = Gzip.compress(page) {
                headers.add(name: "Content-Encoding", value: "gzip")
                compressed = HTTPResponse(status: 200, headers: headers, body: bytes)
                compressed?.reusable = ReusableResponse()
            }
            responses[tag] = Variant(plain: Router.finish(plain), compressed: compressed.map { Router.finish($0) })
        }
        self.responses = responses
    }

    /// Where five stars send a happy user.
    static let defaultProjectURL = "/about"

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        let tag = localization.negotiate(query: request.queryValue("lang"),
                                         acceptLanguage: request.headers["Accept-Language"])
        // Same language and encoding, same bytes and headers: each variant was built once, at start.
        guard let variant = responses[tag] ?? responses[Localization.fallback] else {
            return .error(500, code: "no_page", message: "The page is not available.")
        }
        if let compressed = variant.compressed, Self.acceptsGzip(request.headers["Accept-Encoding"]) {
            return compressed
        }
        return variant.plain
    }

    /// True when `Accept-Encoding` lists gzip (or `*`) without `q=0`. Read as bytes, on every `GET /`:
    /// only a listed coding's parameters, if it has any, become a string.
    static func acceptsGzip(_ header: String?) -> Bool {
        guard let header else { return false }
        for item in header.utf8.split(separator: UInt8(ascii: ",")) {
            let end = item.firstIndex(of: UInt8(ascii: ";")) ?? item.endIndex
            let coding = trimmed(item[..<end])
            let isGzip = coding.count == 4 && coding.elementsEqual("gzip".utf8, by: { $0 | 0x20 == $1 })
            guard isGzip || coding.elementsEqual("*".utf8) else { continue }
            let refused = item[end...].split(separator: UInt8(ascii: ";")).contains { parameter in
                let pair = String(decoding: trimmed(parameter), as: UTF8.self).lowercased()
                return pair.hasPrefix("q=") && (Double(pair.dropFirst(2)) ?? 1) == 0
            }
            return !refused
        }
        return false
    }

    /// `bytes` without leading and trailing spaces and tabs.
    private static func trimmed(_ bytes: Substring.UTF8View) -> Substring.UTF8View {
        let isBlank = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        guard let first = bytes.firstIndex(where: { !isBlank($0) }),
              let last = bytes.lastIndex(where: { !isBlank($0) }) else { return bytes[bytes.endIndex...] }
        return bytes[first...last]
    }

    /// `GET /i18n/{tag}.json`: one language's strings, for the in-page language switch.
    func translations(file: String) -> HTTPResponse {
        guard file.hasSuffix(".json"), let bytes = localization.files[String(file.dropLast(5))] else {
            return .error(404, code: "not_found", message: "No such language.")
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: bytes)
    }

    /// Replaces each `{{name}}` whose name is in `values` with its HTML-escaped value; leaves others.
    static func render(_ template: String, values: [String: String]) -> String {
        var output = ""
        output.reserveCapacity(template.utf8.count + 1024)
        var rest = template[...]
        while let open = rest.firstLiteralRange(of: "{{") {
            output += rest[..<open.lowerBound]
            let afterOpen = rest[open.upperBound...]
            guard let close = afterOpen.firstLiteralRange(of: "}}"),
                  afterOpen.distance(from: afterOpen.startIndex, to: close.lowerBound) <= 64,
                  let value = values[String(afterOpen[..<close.lowerBound])] else {
                output += "{{"
                rest = afterOpen
                continue
            }
            output += escapeHTML(value)
            rest = afterOpen[close.upperBound...]
        }
        output += rest
        return output
    }

    static func escapeHTML(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// The exact text inside each `<tag …>…</tag>` (what CSP hashes).
    static func elementContents(tag: String, in html: String) -> [Substring] {
        var results: [Substring] = []
        var searchStart = html.startIndex
        while let open = html[searchStart...].firstLiteralRange(of: "<\(tag)"),
              let openEnd = html[open.upperBound...].firstLiteralRange(of: ">"),
              let close = html[openEnd.upperBound...].firstLiteralRange(of: "</\(tag)>") {
            results.append(html[openEnd.upperBound..<close.lowerBound])
            searchStart = close.upperBound
        }
        return results
    }

    static func hashSource(_ content: Substring) -> String {
        "'sha256-\(MIME.base64(SHA256.hash(Array(content.utf8))))'"
    }
}
