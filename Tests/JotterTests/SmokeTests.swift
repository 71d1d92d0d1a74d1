import Testing
@testable import Jotter

@Suite struct SmokeTests {
    /// Over a socket on purpose: the one quick check that the whole path (HTTP layer included) serves.
    @Test func servesThePageAndTakesAMemo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let page = try server.request("GET", "/")
        #expect(page.status == 200)
        let sent = try server.request("POST", "/", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                                      body: Array("buy milk".utf8))
        #expect(sent.status == 204)
        #expect(server.waitUntil { server.deliveredFiles().count == 1 })
    }
}
