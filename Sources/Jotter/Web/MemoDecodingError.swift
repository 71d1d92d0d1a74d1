/// Why a request body is not a memo. Messages are fixed text and never quote the body.
public enum MemoDecodingError: HTTPResponseError, Equatable {
    case empty
    case undecodable(String)
    /// A field given twice: which one counts would be a guess.
    case repeatedField(String)
    case unsupportedMediaType

    public var status: Int {
        switch self {
        case .empty, .undecodable, .repeatedField: return 400
        case .unsupportedMediaType: return 415
        }
    }

    public var code: String {
        switch self {
        case .empty: return "empty"
        case .undecodable: return "undecodable"
        case .repeatedField: return "repeated_field"
        case .unsupportedMediaType: return "unsupported_media_type"
        }
    }

    public var message: String {
        switch self {
        case .empty: return "The memo is empty."
        case .undecodable(let why): return why
        case .repeatedField(let name): return "The field \"\(name)\" is given more than once."
        case .unsupportedMediaType:
            return "Send text/plain, application/x-www-form-urlencoded, multipart/form-data or application/json."
        }
    }
}
