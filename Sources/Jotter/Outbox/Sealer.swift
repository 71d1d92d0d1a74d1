import CCrypto

/// Seals and opens a memo's fields with AES-256-GCM under the outbox key, each bound to its row and
/// column (a payload moved to another id, or into another column, fails to open). The outbox and
/// `jotter rekey` share it, so both agree on what a sealed field is.
public struct Sealer: Sendable {
    /// The sealing subkey, prepared once (see `AESGCMKey`): every memo is sealed and opened with it.
    private let key: AESGCMKey

    /// A sealer for the data directory key `key` (the sealing subkey is derived from it).
    public init(dataKey key: SymmetricKey) throws {
        self.key = AESGCMKey(try key.derived(purpose: "jotter outbox sealing v1"))
    }

    /// The fields a memo has sealed.
    public enum Field: String, Sendable {
        case payload
        case subject
    }

    /// Seals `plaintext` as `field` of memo `id`.
    public func seal(_ plaintext: [UInt8], _ field: Field, id: String) throws -> [UInt8] {
        try seal(plaintext, context: Self.context(field, id))
    }

    /// Seals `plaintext` as `field` of memo `id` under `nonce`: fresh random bytes the caller drew
    /// from `SecureRandom` (see `AESGCMKey.seal(_:nonce:authenticating:)`).
    func seal(_ plaintext: [UInt8], _ field: Field, id: String, nonce: [UInt8]) throws -> [UInt8] {
        try key.seal(plaintext, nonce: nonce, authenticating: Self.context(field, id)).combined
    }

    /// Opens `field` of memo `id`; nil if it does not open (another key, tampered, moved).
    public func open(_ sealed: [UInt8], _ field: Field, id: String) -> [UInt8]? {
        open(sealed, context: Self.context(field, id))
    }

    /// Seals `plaintext` bound to `context` (for secrets that are not a memo's field).
    public func seal(_ plaintext: [UInt8], context: [UInt8]) throws -> [UInt8] {
        try key.seal(plaintext, authenticating: context).combined
    }

    /// Opens what `seal(_:context:)` sealed; nil if it does not open.
    public func open(_ sealed: [UInt8], context: [UInt8]) -> [UInt8]? {
        guard let box = try? AESGCM.SealedBox(combined: sealed) else { return nil }
        return try? key.open(box, authenticating: context)
    }

    /// Re-seals `sealed` from `old` to `new`; a field that does not open under `old` comes back as it
    /// was (it stays unopenable, and `held`). The plaintext is wiped after use.
    static func reseal(_ sealed: [UInt8], _ field: Field, id: String, from old: Sealer, to new: Sealer) throws -> [UInt8] {
        guard var plaintext = old.open(sealed, field, id: id) else { return sealed }
        defer { plaintext.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        return try new.seal(plaintext, field, id: id)
    }

    private static func context(_ field: Field, _ id: String) -> [UInt8] {
        Array("jotter/\(field.rawValue)/v1/\(id)".utf8)
    }
}
