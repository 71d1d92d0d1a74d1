/// The relay's keys, each derived for one purpose from the data directory's hashing secret (which
/// `jotter rekey` re-seals and keeps, so every stored hash and sealed address stays valid).
///
/// Every keyed hash binds its inputs with length prefixes, so no two different inputs hash alike.
struct RelayKeys: Sendable {
    /// Device secrets and invites.
    private let secrets: SymmetricKey
    /// Addresses (their lookup keys), verification codes, idempotency keys, payloads, IP partitions.
    private let hashing: SymmetricKey
    /// Seals addresses for `GET /v1/destinations`.
    private let sealing: AESGCMKey

    /// The keys of the outbox's data directory.
    init(outbox: any MessageOutbox) throws {
        secrets = try outbox.hashingKey(purpose: "jotter relay secrets v1")
        hashing = try outbox.hashingKey(purpose: "jotter relay hashing v1")
        sealing = AESGCMKey(try outbox.hashingKey(purpose: "jotter relay sealing v1"))
    }

    /// The stored form of a device secret or an invite.
    func secretHash(_ secret: String, kind: String) -> [UInt8] {
        HMAC.sha256(Self.fields([kind, secret]), key: secrets)
    }

    /// A keyed hash of `fields` for `purpose` (`address`, `code`, `idempotency-key`, `payload`, `ip`).
    func hash(_ purpose: String, _ fields: [String]) -> [UInt8] {
        HMAC.sha256(Self.fields([purpose] + fields), key: hashing)
    }

    /// Seals `address` for `deviceID` (bound to it: a row copied to another device does not open).
    func seal(address: String, deviceID: String) throws -> [UInt8] {
        try sealing.seal(Array(address.utf8), authenticating: Self.addressContext(deviceID)).combined
    }

    /// Opens what `seal(address:deviceID:)` sealed; nil if it does not open.
    func open(address sealed: [UInt8], deviceID: String) -> String? {
        guard let box = try? AESGCM.SealedBox(combined: sealed),
              let bytes = try? sealing.open(box, authenticating: Self.addressContext(deviceID)) else {
            return nil
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func addressContext(_ deviceID: String) -> [UInt8] {
        Array("jotter/relay/address/v1/\(deviceID)".utf8)
    }

    /// `len:field` for each field, so field boundaries are part of what is hashed.
    private static func fields(_ fields: [String]) -> [UInt8] {
        var bytes: [UInt8] = []
        for field in fields {
            bytes += Array(String(field.utf8.count).utf8) + [0x3A] + Array(field.utf8)
        }
        return bytes
    }

    /// A device secret as `newSecret(prefix: "jrs_")` makes them: `jrs_` and 43 base64url characters
    /// (256 bits). A client that proposes its own must propose one of this shape.
    static func isDeviceSecret(_ text: String) -> Bool {
        text.utf8.count == 47 && text.hasPrefix("jrs_") && text.utf8.dropFirst(4).allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
    }

    /// A fresh secret: `prefix` and 32 random bytes in base64url without padding (256 bits, and a
    /// prefix secret scanners can recognise).
    static func newSecret(prefix: String) throws -> String {
        let encoded = Base64.encode(try SecureRandom.bytes(count: 32))
        return prefix + String(encoded.compactMap { character -> Character? in
            switch character {
            case "+": return "-"
            case "/": return "_"
            case "=": return nil
            default: return character
            }
        })
    }

    /// Lowercase hex.
    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] })
    }
}
