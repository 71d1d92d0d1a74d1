import CSystem
import Glibc

/// The kernel's CSPRNG (`getrandom(2)`), the source OpenSSL's own generator seeds from.
///
/// It replaced OpenSSL's `RAND_bytes`, which took about 7 µs of one memo's accept (a per-thread DRBG
/// lookup, locks, a fork check with `getpid`, and the generation) where one `getrandom` call takes about
/// 1 µs; and it keeps no generator state in the process (nothing to reseed after a fork). See
/// bench/README.md.
public enum SecureRandom {
    /// `count` random bytes.
    public static func bytes(count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let filled = bytes.withUnsafeMutableBytes { buffer -> Bool in
            var offset = 0
            while offset < buffer.count {
                let got = jotter_getrandom(buffer.baseAddress.map { $0 + offset }, UInt(buffer.count - offset))
                if got > 0 {
                    offset += got
                } else if got < 0 && errno == EINTR {
                    continue
                } else {
                    return false
                }
            }
            return true
        }
        guard filled else { throw CryptoError.randomFailed }
        return bytes
    }
}

extension SecureRandom {
    /// A random (version 4) UUID in lowercase, from the kernel's CSPRNG — the ids of memos, relay messages
    /// and devices. (Foundation's `UUID()` opened, read and closed /dev/urandom for each one.)
    public static func uuid() throws -> String {
        uuid(from: try bytes(count: 16)[...])
    }

    /// The version 4 UUID made of 16 random bytes the caller drew from `bytes(count:)` (with other
    /// random bytes it needs, in one call: each call to the kernel costs more than the bytes it returns).
    static func uuid(from random: ArraySlice<UInt8>) -> String {
        precondition(random.count == 16, "a UUID is 16 random bytes")
        return text { index in
            let byte = random[random.startIndex + index]
            switch index {
            case 6: return byte & 0x0F | 0x40   // version 4
            case 8: return byte & 0x3F | 0x80   // RFC 4122 variant
            default: return byte
            }
        }
    }

    /// A time-ordered (version 7, RFC 9562) UUID: `milliseconds` since the Unix epoch in its first 48 bits,
    /// then 74 of the `random` bytes' bits. Ids made later sort after earlier ones (to the millisecond),
    /// so a table's index on them grows at its end: an insert rewrites the index's last page, which the
    /// inserts before it rewrote too, where a random id's entry lands on any page (see bench/README.md,
    /// "Time-ordered ids").
    static func uuidV7(milliseconds: Int64, random: ArraySlice<UInt8>) -> String {
        precondition(random.count == 10, "a version 7 UUID has 10 random bytes after its time")
        let time = UInt64(clamping: max(0, milliseconds)) & 0xFFFF_FFFF_FFFF
        return text { index in
            guard index >= 6 else { return UInt8(truncatingIfNeeded: time >> (40 - 8 * index)) }
            let byte = random[random.startIndex + index - 6]
            switch index {
            case 6: return byte & 0x0F | 0x70   // version 7
            case 8: return byte & 0x3F | 0x80   // RFC 9562 variant
            default: return byte
            }
        }
    }

    /// The UUID whose byte `i` is `byte(i)` (0 to 15), as text: lowercase hex in groups of 8-4-4-4-12,
    /// written straight into the string's storage.
    private static func text(_ byte: (Int) -> UInt8) -> String {
        String(unsafeUninitializedCapacity: 36) { text in
            var count = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    text[count] = UInt8(ascii: "-")
                    count += 1
                }
                let value = byte(index)
                text[count] = hexDigit(value >> 4)
                text[count + 1] = hexDigit(value & 0x0F)
                count += 2
            }
            return count
        }
    }

    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }
}
