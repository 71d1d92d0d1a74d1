import Foundation

/// A fresh directory under /tmp, removed when released.
final class TemporaryDirectory: Sendable {
    let path: String

    init() {
        var template = Array("/tmp/jotter-test-XXXXXX".utf8CString)
        let created: String? = template.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
        }
        path = created ?? "/tmp/jotter-test-\(UUID().uuidString)"
        if created == nil { try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// `path/name`.
    func file(_ name: String) -> String { path + "/" + name }
}

/// Paths in the repository checkout.
enum Repository {
    /// The repository root (three levels above this file).
    static let root: String = {
        var components = #filePath.split(separator: "/", omittingEmptySubsequences: false)
        components.removeLast(4)  // Tests/JotterTests/Support/TemporaryDirectory.swift
        return components.joined(separator: "/")
    }()

    static let publicDirectory = root + "/Public"
}
