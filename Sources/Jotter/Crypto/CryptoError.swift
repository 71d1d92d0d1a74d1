/// Failures of the crypto layer. They carry no key or plaintext bytes.
public enum CryptoError: Error, Equatable, Sendable {
    case invalidKeyLength
    case randomFailed
    case sealFailed
    /// Authentication failed: wrong key, tampered bytes, or a payload moved to another id.
    case authenticationFailure
    case malformedSealedBox
}
