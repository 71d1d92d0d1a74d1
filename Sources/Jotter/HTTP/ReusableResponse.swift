import CMicroHTTPD
import Synchronization

/// A response that never changes (the page in one language): the adapter builds libmicrohttpd's
/// response once and queues it for every request, instead of copying 16 KB and adding headers each time.
/// The route hands out the same `ReusableResponse` only with the same status, headers and body.
public final class ReusableResponse: Sendable {
    private let built = Mutex<OpaquePointer?>(nil)

    /// An empty slot; filled on first use.
    public init() {}

    /// The built response, building it with `build` the first time.
    func response(building build: () -> OpaquePointer?) -> OpaquePointer? {
        built.withLock { pointer in
            if pointer == nil { pointer = build() }
            return pointer
        }
    }

    deinit {
        built.withLock { pointer in
            if let pointer { MHD_destroy_response(pointer) }
        }
    }
}
