import Glibc

/// Other files in `Public/` (manifest, icons), loaded once at start and served by name.
struct StaticFiles: Sendable {
    let files: [String: (type: String, body: [UInt8])]

    init(publicDirectory: String) {
        var files: [String: (type: String, body: [UInt8])] = [:]
        for name in Self.names(in: publicDirectory) where name != "index.html" && !name.hasPrefix(".") {
            guard let type = Self.contentTypes[Self.pathExtension(name).lowercased()],
                  let data = try? FileIO.read(path: publicDirectory + "/" + name) else { continue }
            files[name] = (type, data)
        }
        self.files = files
    }

    /// The names in `directory` (none when it cannot be read).
    static func names(in directory: String) -> [String] {
        guard let stream = opendir(directory) else { return [] }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// What follows the name's last dot (`icon.svg` → `svg`); "" when there is none, or only a leading one.
    static func pathExtension(_ name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return String(name[name.index(after: dot)...])
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
