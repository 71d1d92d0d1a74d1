import Foundation
import Testing
@testable import Jotter

/// Where each relay URL delivers, as `serve` prints it (no password, no API key), and sendmail's
/// recipient: `?to=`, else the local user, whom every local MTA delivers to.
@Suite struct RelayDestinationTests {
    @Test(arguments: [
        ("maildir:/home/ana/Mail", "maildir:/home/ana/Mail"),
        ("markdown:/vault/Inbox", "markdown:/vault/Inbox"),
        ("smtps://ana%40example.com:s3cret-pass@smtp.example.com:465", "smtps://smtp.example.com:465 as ana@example.com → ana@example.com"),
        ("smtp://ana:s3cret-pass@mail.example.com?from=ana@example.com&to=me@example.org",
         "smtp://mail.example.com:587 as ana → me@example.org"),
        ("resend://re_SECRETKEY123?to=ana@example.com", "resend:// (api.resend.com) → ana@example.com"),
        ("sendmail:?to=ana@example.com", "sendmail:/usr/sbin/sendmail → ana@example.com"),
        ("sendmail:/usr/lib/sendmail?to=ana@example.com&from=Notes%20%3Cnotes@example.com%3E",
         "sendmail:/usr/lib/sendmail → ana@example.com"),
    ])
    func theDestinationLineNamesThePlaceAndNoSecret(url: String, expected: String) throws {
        let relay = try RelayURL(url)
        #expect(relay.destination == expected)
        for secret in ["s3cret-pass", "SECRETKEY123"] { #expect(!relay.destination.contains(secret)) }
    }

    @Test func sendmailWithoutToMailsTheLocalUser() throws {
        let relay = try RelayURL("sendmail:")
        let user = RelayURL.localUser()
        #expect(!user.isEmpty)
        #expect(relay.to?.address == user + "@localhost")
        #expect(relay.destination == "sendmail:/usr/sbin/sendmail → \(user)@localhost")
    }

    @Test func sendmailOptionsAreNotReadAsAPath() throws {
        let relay = try RelayURL("sendmail:?to=ana@example.com&from=notes@example.com")
        let transport = try #require(relay.transport as? SendmailTransport)
        #expect(transport.path == "/usr/sbin/sendmail")
        #expect(relay.to?.address == "ana@example.com")
        #expect(relay.from?.address == "notes@example.com")
        #expect(throws: RelayURL.Failure.self) { try RelayURL("sendmail:?to=not-an-address") }
    }
}
