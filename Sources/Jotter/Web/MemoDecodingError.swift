/// Why a request body is not a memo. Messages are fixed text and never quote the body.
public enum MemoDecodingError: HTTPResponseError, Equatable {
    case empty
    case undecodable(String)
    /// A field given twice: which one counts would be a guess.
    case repeatedField(String)
    case unsupportedMediaType
    /// `text/plain` in a character set other than UTF-8 (or its ASCII subset).
    case unsupportedCharset
    /// A compressed body (`Content-Encoding: gzip`, …): read as text it would be bytes, or refused as such.
    case unsupportedEncoding

    public var status: Int {
        switch self {
        case .empty, .undecodable, .repeatedField: return 400
        case .unsupportedMediaType, .unsupportedCharset, .unsupportedEncoding: return 415
        }
    }

    public var code: String {
        switch self {
        case .empty: return "empty"
        case .undecodable: return "undecodable"
        case .repeatedField: return "repeated_field"
        case .unsupportedMediaType: return "unsupported_media_type"
        case .unsupportedCharset: return "unsupported_charset"
        case .unsupportedEncoding: return "unsupported_encoding"
        }
    }

    public var message: String {
        switch self {
        case .empty: return "The memo is empty."
        case .undecodable(let why): return why
        case .repeatedField(let name): return "The field \"\(name)\" is given more than once."
        case .unsupportedMediaType:
            return "Send text/plain, application/x-www-form-urlencoded, multipart/form-data or application/json."
        case .unsupportedCharset: return "Send the memo as UTF-8 (charset=utf-8); other character sets are not read."
        case .unsupportedEncoding: return "Send the memo uncompressed: no Content-Encoding is read."
        }
    }
}
