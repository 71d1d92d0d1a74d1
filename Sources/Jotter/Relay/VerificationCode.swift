/// The 6-digit codes that prove a device's owner reads an address.
enum VerificationCode {
    /// A uniformly random code from the kernel's CSPRNG, `000000`–`999999` (rejection sampling, so no
    /// code is likelier than another).
    static func generate() throws -> String {
        // The largest multiple of 10^6 that fits in 32 bits: draws at or above it are redrawn.
        let bound: UInt32 = 4_294_000_000
        while true {
            let bytes = try SecureRandom.bytes(count: 4)
            let value = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard value < bound else { continue }
            let number = String(value % 1_000_000)
            return String(repeating: "0", count: 6 - number.count) + number
        }
    }

    /// Exactly six ASCII digits.
    static func isWellFormed(_ code: String) -> Bool {
        code.utf8.count == 6 && code.utf8.allSatisfy { (0x30...0x39).contains($0) }
    }
}
