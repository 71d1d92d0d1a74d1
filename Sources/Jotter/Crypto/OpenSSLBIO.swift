import CCrypto

/// Memory BIOs for PEM in and out, freed before returning.
enum OpenSSLBIO {
    /// Runs `read` on a read-only BIO over `text`'s bytes.
    static func reading<T>(_ text: String, _ read: (OpaquePointer) -> T?) -> T? {
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBytes { buffer -> T? in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return read(bio)
        }
    }

    /// What `write` put into a fresh memory BIO (it returns 1 on success), as text.
    static func writing(_ write: (OpaquePointer) -> Int32) -> String? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else {
            ERR_clear_error()
            return nil
        }
        var data: UnsafeMutablePointer<CChar>?
        let count = jotter_bio_contents(bio, &data)
        guard count > 0, let data else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
    }
}
