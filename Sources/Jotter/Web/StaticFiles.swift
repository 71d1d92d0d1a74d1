import Foundation

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
        "js": "text/javascript; charset=utf-8", "html": "text/html; charset=utf-8",
    ]

    func handle(name: String) -> HTTPResponse {
        guard let file = files[name] else {
            return .error(404, code: "not_found", message: "There is nothing here.")
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": file.type], body: file.body)
    }
}
