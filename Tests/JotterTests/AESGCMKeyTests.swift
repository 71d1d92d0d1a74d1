import Foundation
import Testing
@testable import Jotter

/// A key prepared once seals and opens message after message exactly as a fresh context would: no
/// state of one message (its nonce, its associated data, its tag, a failed open) reaches the next.
@Suite struct AESGCMKeyTests {
    /// Test case 16 of the GCM specification (McGrew and Viega): a 256-bit key, a 96-bit nonce,
    /// 20 bytes of associated data and 60 of plaintext.
    private static let key = bytes("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
    private static let nonce = bytes("cafebabefacedbaddecaf888")
    private static let plaintext = bytes("""
        d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
        1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39
        """)
    private static let associatedData = bytes("feedfacedeadbeeffeedfacedeadbeefabaddad2")
    private static let ciphertextAndTag = bytes("""
        522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa\
        8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662\
        76fc6ece0f4e1768cddf8853bb2d551b
        """)

    private static func bytes(_ hex: String) -> [UInt8] {
        var result: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            result.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return result
    }

    @Test func everyMessageSealedWithAKeptKeyMatchesTheSpecification() throws {
        let key = AESGCMKey(try SymmetricKey(bytes: Self.key))
        for round in 0..<3 {
            let box = try key.seal(Self.plaintext, nonce: Self.nonce, authenticating: Self.associatedData)
            #expect(box.combined == Self.nonce + Self.ciphertextAndTag, "message \(round * 3 + 1)")
            // Other messages between: another nonce, no associated data, an empty plaintext.
            _ = try key.seal(Array("memo".utf8), nonce: SecureRandom.bytes(count: 12), authenticating: [])
            _ = try key.seal([], nonce: SecureRandom.bytes(count: 12), authenticating: Array("ad".utf8))
        }
        // And a key made for this one message (what `AESGCM`'s one-shot calls do) agrees.
        let once = try AESGCMKey(SymmetricKey(bytes: Self.key)).seal(Self.plaintext, nonce: Self.nonce,
                                                                     authenticating: Self.associatedData)
        #expect(once.combined == Self.nonce + Self.ciphertextAndTag)
    }

    @Test func aKeptKeyOpensTheSpecificationsMessageAgainAndAgain() throws {
        let key = AESGCMKey(try SymmetricKey(bytes: Self.key))
        let box = try AESGCM.SealedBox(combined: Self.nonce + Self.ciphertextAndTag)
        for _ in 0..<3 {
            #expect(try key.open(box, authenticating: Self.associatedData) == Self.plaintext)
            // A failed open between (a flipped tag bit, other associated data) leaves nothing behind.
            var tampered = box.combined
            tampered[tampered.count - 1] ^= 1
            #expect(throws: CryptoError.authenticationFailure) {
                try key.open(AESGCM.SealedBox(combined: tampered), authenticating: Self.associatedData)
            }
            #expect(throws: CryptoError.authenticationFailure) {
                try key.open(box, authenticating: Array("other".utf8))
            }
        }
    }

    @Test func aNonceOfAnyOtherLengthIsRefusedAndTheKeyStillSeals() throws {
        let key = AESGCMKey(try SymmetricKey(bytes: Self.key))
        for count in [0, 11, 13, 16] {
            #expect(throws: CryptoError.sealFailed) {
                try key.seal(Self.plaintext, nonce: [UInt8](repeating: 7, count: count), authenticating: [])
            }
        }
        let box = try key.seal(Self.plaintext, nonce: Self.nonce, authenticating: Self.associatedData)
        #expect(box.combined == Self.nonce + Self.ciphertextAndTag)
    }

    /// Threads sealing and opening under one key at once each get their own message back.
    @Test func threadsSharingAKeyEachGetTheirOwnMessage() async throws {
        let key = AESGCMKey(try SymmetricKey.random())
        let mismatches = try await withThrowingTaskGroup(of: Int.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    var mismatches = 0
                    for index in 0..<200 {
                        let plaintext = Array("worker \(worker) memo \(index)".utf8)
                        let context = Array("jotter/payload/v1/\(worker)-\(index)".utf8)
                        let box = try key.seal(plaintext, nonce: SecureRandom.bytes(count: 12), authenticating: context)
                        if try key.open(box, authenticating: context) != plaintext { mismatches += 1 }
                    }
                    return mismatches
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(mismatches == 0)
    }
}
