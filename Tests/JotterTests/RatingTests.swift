import Foundation
import Testing
@testable import Jotter

/// The rating prompt: after every 100th send, at most every 14 days, not for 30 days after a dismissal;
/// counters on the server.
@Suite struct RatingPolicyTests {
    let day: Int64 = 86_400_000

    @Test func everyHundredthSendFromThePage() {
        let policy = RatingPolicy()
        var state = RatingPolicy.State()
        var prompts: [Int64] = []
        for send in 1...350 {
            policy.countSend(&state)
            if policy.considerPrompt(&state, now: Int64(send) * 15 * day) { prompts.append(state.sends) }
        }
        #expect(prompts == [100, 200, 300])
    }

    @Test func aHundredReachedByScriptsIsConsideredAtTheNextPageSend() {
        let policy = RatingPolicy()
        var state = RatingPolicy.State()
        for _ in 1...103 { policy.countSend(&state) }  // curl: counted, never prompted
        #expect(policy.considerPrompt(&state, now: 0))
        policy.countSend(&state)
        #expect(!policy.considerPrompt(&state, now: 0), "each hundred once")
    }

    @Test func fourteenDaysSinceShownAndThirtySinceDismissed() {
        let policy = RatingPolicy()
        var shown = RatingPolicy.State(sends: 99, shownAt: 0)
        policy.countSend(&shown)
        #expect(!policy.considerPrompt(&shown, now: 13 * day), "shown 13 days ago")
        var later = RatingPolicy.State(sends: 199, consideredBucket: 1, shownAt: 0)
        policy.countSend(&later)
        #expect(policy.considerPrompt(&later, now: 14 * day))

        var dismissed = RatingPolicy.State(sends: 99, shownAt: 0, dismissedAt: 0)
        policy.countSend(&dismissed)
        #expect(!policy.considerPrompt(&dismissed, now: 29 * day), "dismissed 29 days ago")
        var afterMonth = RatingPolicy.State(sends: 99, shownAt: 0, dismissedAt: 0)
        policy.countSend(&afterMonth)
        #expect(policy.considerPrompt(&afterMonth, now: 30 * day))
    }
}

@Suite struct RatingRouteTests {
    private func send(_ server: TestServer, fromPage: Bool) throws -> RawHTTP.Response {
        let page = fromPage ? [("Sec-Fetch-Site", "same-origin"), ("Sec-Fetch-Mode", "cors"),
                               ("Origin", "http://127.0.0.1:\(server.port)")] : []
        return try server.route("POST", "/send", headers: [("Content-Type", "text/plain")] + page,
                                body: Array("memo".utf8))
    }

    private func rating(_ server: TestServer, _ json: String) throws -> RawHTTP.Response {
        try server.route("POST", "/rating", headers: [("Content-Type", "application/json")], body: Array(json.utf8))
    }

    @Test func theHundredthPageSendInvitesThePromptAndEventsAreKeptAcrossRestarts() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        do {
            let server = try TestServer(dataDirectory: data) { $0.rateLimit = nil }
            defer { server.stop() }
            for _ in 1...99 { #expect(try send(server, fromPage: false).header("X-Rating-Prompt") == nil) }
            let hundredth = try send(server, fromPage: true)
            #expect(hundredth.status == 204)
            #expect(hundredth.header("X-Rating-Prompt") == "1")
            #expect(try send(server, fromPage: true).header("X-Rating-Prompt") == nil)
            #expect(try rating(server, "{\"event\":\"shown\"}").status == 204)
            #expect(try rating(server, "{\"event\":\"rated\",\"stars\":5}").status == 204)
            #expect(try rating(server, "{\"event\":\"dismissed\"}").status == 204)
        }
        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        let state = try #require(try server.route("GET", "/rating").json as? [String: Any])
        #expect(state["sends"] as? Int == 101)
        #expect(state["shown_at"] is String)
        #expect(state["dismissed_at"] is String)
    }

    @Test(arguments: ["{}", "{\"event\":\"liked\"}", "{\"event\":\"rated\"}", "{\"event\":\"rated\",\"stars\":0}",
                      "{\"event\":\"rated\",\"stars\":6}", "{\"event\":\"shown\",\"stars\":9}",
                      "{\"event\":\"rated\",\"stars\":true}", "not json", "[1]"])
    func badEventsAre400(body: String) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let response = try rating(server, body)
        #expect(response.status == 400)
        #expect(["invalid_event", "invalid_stars"].contains(response.errorCode ?? ""))
    }

    @Test func pairingOutsideLANModeIs404AndOtherMethodsAre405() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let pair = try server.route("POST", "/pair", headers: [("Content-Type", "application/json")],
                                    body: Array("{\"pairing_token\":\"x\"}".utf8))
        #expect(pair.status == 404)
        #expect(pair.errorCode == "not_lan_mode")
        let trace = try server.route("TRACE", "/pair")
        #expect(trace.status == 405)
        #expect(trace.header("Allow") == "POST")
    }
}
