/// `GET /rating` (the counters) and `POST /rating` (`{"event":"shown"|"dismissed"|"rated","stars":1-5}`).
struct RatingRoute: Sendable {
    let store: RatingStore

    func state() -> HTTPResponse {
        let state = store.snapshot
        var json = JSONWriter()
        json.object { json in
            json.field("sends", state.sends)
            json.field("shown_at", state.shownAt.map(Timestamp.iso8601(milliseconds:)))
            json.field("dismissed_at", state.dismissedAt.map(Timestamp.iso8601(milliseconds:)))
        }
        return .json(200, json.bytes)
    }

    private static let invalidEvent = HTTPResponse.error(
        400, code: "invalid_event", message: "Send {\"event\": \"shown\", \"dismissed\" or \"rated\"}.")

    func record(_ request: HTTPRequest) -> HTTPResponse {
        guard MediaType(request.headers["Content-Type"] ?? "").type == "application/json" else {
            return .error(415, code: "unsupported_media_type", message: "Send application/json.")
        }
        guard let body = try? JSONValue.parse(request.body), let event = body["event"]?.string else {
            return Self.invalidEvent
        }
        // `stars` only with "rated", and then a whole number from 1 to 5 (not null, not 4.0).
        let stars = body["stars"]
        if event == "rated" || stars != nil {
            guard let stars = stars?.integer, (1...5).contains(stars) else {
                return .error(400, code: "invalid_stars", message: "stars must be a whole number from 1 to 5.")
            }
        }
        guard store.record(event: event) else {
            return Self.invalidEvent
        }
        return HTTPResponse(status: 204)
    }
}
