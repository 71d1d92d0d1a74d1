import Foundation

/// `GET /`: the page, held in memory, with a Content-Security-Policy that allows exactly its own
/// inline `<style>` and `<script>` (by SHA-256 hash) and nothing from any other origin.
struct PageRoute: Sendable {
    /// Why the page could not be loaded at start.
    enum LoadError: Error, CustomStringConvertible {
        case missing(path: String)

        var description: String {
            switch self {
            case .missing(let path): return "cannot read the page at \(path)"
            }
        }
    }

    let html: [UInt8]
    let contentSecurityPolicy: String

    /// Reads `index.html` from `publicDirectory` and hashes its inline style and script.
    init(publicDirectory: String) throws {
        guard let data = FileManager.default.contents(atPath: publicDirectory + "/index.html") else {
            throw LoadError.missing(path: publicDirectory + "/index.html")
        }
        self.init(html: Array(data))
    }

    /// Serves `html`.
    init(html: [UInt8]) {
        self.html = html
        let text = String(decoding: html, as: UTF8.self)
        let scripts = Self.elementContents(tag: "script", in: text).map(Self.hashSource)
        let styles = Self.elementContents(tag: "style", in: text).map(Self.hashSource)
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
    }

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [
            "Content-Type": "text/html; charset=utf-8",
            "Content-Security-Policy": contentSecurityPolicy,
        ], body: html)
    }

    /// The exact text inside each `<tag …>…</tag>` (what CSP hashes).
    static func elementContents(tag: String, in html: String) -> [Substring] {
        var results: [Substring] = []
        var searchStart = html.startIndex
        while let open = html.range(of: "<\(tag)", range: searchStart..<html.endIndex),
              let openEnd = html.range(of: ">", range: open.upperBound..<html.endIndex),
              let close = html.range(of: "</\(tag)>", range: openEnd.upperBound..<html.endIndex) {
            results.append(html[openEnd.upperBound..<close.lowerBound])
            searchStart = close.upperBound
        }
        return results
    }

    static func hashSource(_ content: Substring) -> String {
        "'sha256-\(MIME.base64(SHA256.hash(Array(content.utf8))))'"
    }
}

/// Other files in `Public/` (manifest, icons), loaded once at start and served by name.
struct StaticFiles: Sendable {
    let files: [String: (type: String, body: [UInt8])]

    init(publicDirectory: String) {
        var files: [String: (type: String, body: [UInt8])] = [:]
        let names = (try? FileManager.default.contentsOfDirectory(atPath: publicDirectory)) ?? []
        for name in names where name != "index.html" && !name.hasPrefix(".") {
            guard let type = Self.contentTypes[(name as NSString).pathExtension.lowercased()],
                  let data = FileManager.default.contents(atPath: publicDirectory + "/" + name) else { continue }
            files[name] = (type, Array(data))
        }
        self.files = files
    }

    static let contentTypes = [
        "png": "image/png", "svg": "image/svg+xml", "ico": "image/x-icon", "webmanifest": "application/manifest+json",
        "json": "application/json", "txt": "text/plain; charset=utf-8", "css": "text/css; charset=utf-8",
        "js": "text/javascript; charset=utf-8",
    ]

    func handle(name: String) -> HTTPResponse {
        guard let file = files[name] else {
            return .error(404, code: "not_found", message: "There is nothing here.")
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": file.type], body: file.body)
    }
}
