import CCurl

extension DeliveryFailure {
    /// The delivery failure a libcurl error code means. Only the code is used, never libcurl's text.
    init(curl error: CurlError) {
        switch CURLcode(rawValue: UInt32(error.code)) {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT:
            self.init(.unreachable, permanent: false)
        case CURLE_OPERATION_TIMEDOUT:
            self.init(.timeout, permanent: false)
        case CURLE_LOGIN_DENIED, CURLE_AUTH_ERROR:
            self.init(.auth, permanent: true)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_USE_SSL_FAILED,
             CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER:
            // A certificate or TLS policy problem does not fix itself: it needs the configuration changed.
            self.init(.tls, permanent: true)
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT, CURLE_BAD_FUNCTION_ARGUMENT:
            self.init(.configuration, permanent: true)
        default:
            self.init(.network, permanent: false)
        }
    }
}
