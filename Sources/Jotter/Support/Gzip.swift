import CZlib

/// gzip (RFC 1952) at the best level: the page is compressed once at start, not per request.
enum Gzip {
    /// The compressed bytes, or nil if zlib failed.
    static func compress(_ bytes: [UInt8]) -> [UInt8]? {
        let capacity = Int(compressBound(uLong(bytes.count))) + 32  // + gzip header and trailer
        var output = [UInt8](repeating: 0, count: capacity)
        let size = bytes.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out in
                jotter_gzip(input.baseAddress, input.count, out.baseAddress, out.count)
            }
        }
        guard size > 0 else { return nil }
        return Array(output.prefix(size))
    }
}
