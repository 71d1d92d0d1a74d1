import Testing
@testable import Jotter

/// How a relay node spaces its announcements (`NOTIFY`) to the others.
@Suite struct ThrottleTests {
    @Test func saysYesOncePerIntervalFromTheFirstCall() {
        let throttle = Throttle(everyMilliseconds: 50)
        #expect(throttle.due(now: 1_000))
        #expect(!throttle.due(now: 1_000) && !throttle.due(now: 1_049))
        #expect(throttle.due(now: 1_050))
        #expect(!throttle.due(now: 1_060))
        #expect(throttle.due(now: 9_000), "after a quiet spell, at once")
    }

    @Test func callsAtOnceFromManyThreadsGetOneYes() async {
        let throttle = Throttle(everyMilliseconds: 1_000)
        let yeses = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<64 { group.addTask { throttle.due(now: 5_000) } }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(yeses == 1)
    }
}
