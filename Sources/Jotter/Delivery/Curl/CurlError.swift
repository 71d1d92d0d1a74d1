/// A libcurl failure by code; `CurlError` never carries libcurl's error text (it can quote a server).
public struct CurlError: Error, Sendable, Equatable {
    /// The `CURLcode`.
    public let code: Int32
}
