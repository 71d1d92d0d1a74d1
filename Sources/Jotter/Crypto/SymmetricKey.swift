import CCrypto

/// 32 secret bytes held in memory Jotter owns, zeroed with `OPENSSL_cleanse` when released.
///
/// `@unchecked Sendable`: the bytes are written once in `init` and only read afterwards.
public final class SymmetricKey: @unchecked Sendable {
    /// The key length AES-256 needs.
    public static let byteCount = 32

    private let storage: UnsafeMutableRawBufferPointer

    /// Copies `bytes` (exactly 32 of them) into the key.
    public init<Bytes: Collection>(bytes: Bytes) throws where Bytes.Element == UInt8 {
        guard bytes.count == Self.byteCount else { throw CryptoError.invalidKeyLength }
        storage = .allocate(byteCount: Self.byteCount, alignment: 16)
        storage.copyBytes(from: bytes)
    }

    /// A fresh key from the kernel's CSPRNG.
    public static func random() throws -> SymmetricKey {
        var bytes = try SecureRandom.bytes(count: byteCount)
        defer { bytes.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        return try SymmetricKey(bytes: bytes)
    }

    deinit {
        OPENSSL_cleanse(storage.baseAddress, storage.count)
        storage.deallocate()
    }

    /// Lends the key bytes to `body`; the pointer must not escape.
    public func withUnsafeBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try body(UnsafeRawBufferPointer(storage))
    }

    /// A subkey for one purpose (HMAC-SHA256 of the purpose under this key), so one secret serves
    /// encryption and keyed hashing without reusing the same key for both.
    public func derived(purpose: String) throws -> SymmetricKey {
        var bytes = HMAC.sha256(Array(purpose.utf8), key: self)
        defer { bytes.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        return try SymmetricKey(bytes: bytes)
    }
}
