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

    /// A typo in an option (`too=` for `to=`) silently ignored sent the memos to the fallback address;
    /// a timeout that is no number of seconds was ignored, or 0. Each is refused at start, by its name.
    @Test(arguments: [
        ("smtps://u:PW@smtp.example.com:465?from=a@example.com&too=x@example.org", "has no option too="),
        ("smtp://127.0.0.1:2525?tls=none&from=a@example.com&to=b@example.com&timout=5", "has no option timout="),
        ("smtp://127.0.0.1:2525?tls=off&from=a@example.com&to=b@example.com", "tls= takes only none"),
        ("smtps://u:PW@smtp.example.com?from=a@example.com&timeout=abc", "timeout= must be"),
        ("smtps://u:PW@smtp.example.com?from=a@example.com&timeout=0", "timeout= must be"),
        ("resend://re_KEY?to=a@example.com&timeout=-5", "timeout= must be"),
        ("resend://re_KEY?to=a@example.com&form=b@example.com", "has no option form="),
        ("jotter+https://relay.example.com?invte=abc", "has no option invte="),
        ("sendmail:?to=a@example.com&fro=b@example.com", "has no option fro="),
        ("markdown:/vault?files=%Y.md", "has no option files="),
        ("maildir:/home/ana/Mail?sync=1", "takes no options"),
    ])
    func anOptionThatIsNotOneIsRefusedByName(url: String, message: String) throws {
        let error = try #require(throws: RelayURL.Failure.self) { try RelayURL(url) }
        #expect("\(error)".contains(message), "\(error)")
        #expect(!"\(error)".contains("PW") && !"\(error)".contains("re_KEY"), "never a secret: \(error)")
    }

    /// `maildir:~/Maildir` is the home folder's (not a folder named `~` in the working directory), and a
    /// relative folder is made absolute at start (a service runs elsewhere), as the start line shows it.
    @Test func aFolderIsAbsoluteAndTildeIsHome() throws {
        let home = try #require(ProcessInfo.processInfo.environment["HOME"])
        let tilde = try RelayURL("maildir:~/Maildir")
        #expect(tilde.destination == "maildir:" + (home.hasSuffix("/") ? String(home.dropLast()) : home) + "/Maildir")
        #expect(try RelayURL.absolutePath("~", environment: ["HOME": "/home/ana"]) == "/home/ana")
        #expect(throws: RelayURL.Failure.self) { try RelayURL.absolutePath("~bob/Mail", environment: ["HOME": "/home/ana"]) }
        let relative = try RelayURL("markdown:notes/Inbox")
        let cwd = FileManager.default.currentDirectoryPath
        #expect(relative.destination == "markdown:" + cwd + "/notes/Inbox")
        #expect(try RelayURL("maildir:./Mail").destination == "maildir:" + cwd + "/Mail")
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

/// The CA bundle a relay is verified with: `?ca=`, `SSL_CERT_FILE`, `CURL_CA_BUNDLE`, checked at start.
@Suite struct RelayCATests {
    @Test func aMissingCABundleIsRefusedAtStartNotAtTheFirstDelivery() throws {
        let error = try #require(throws: RelayURL.Failure.self) {
            try RelayURL("smtps://ana%40example.com:pw@smtp.example.com:465?ca=/no/such/ca.pem")
        }
        #expect("\(error)".contains("/no/such/ca.pem"))
        #expect(!"\(error)".contains("pw@"), "never the URL itself")
        let directory = TemporaryDirectory()
        #expect(throws: RelayURL.Failure.self) { try RelayURL("resend://re_x?to=a@b.example&ca=\(directory.path)") }
    }

    @Test func sslCertFileAndCurlCABundleAreHonoured() throws {
        let directory = TemporaryDirectory()
        let bundle = directory.file("ca.pem")
        #expect(FileManager.default.createFile(atPath: bundle, contents: Data("-----BEGIN CERTIFICATE-----\n".utf8)))
        let url = try #require(URLParts("smtps://h.example:465"))
        #expect(try RelayURL.caFile(url, environment: ["SSL_CERT_FILE": bundle]) == bundle)
        #expect(try RelayURL.caFile(url, environment: ["CURL_CA_BUNDLE": bundle]) == bundle)
        #expect(try RelayURL.caFile(url, environment: [:]) == nil, "the system's bundle")
        let given = try #require(URLParts("smtps://h.example:465?ca=\(bundle)"))
        #expect(try RelayURL.caFile(given, environment: ["SSL_CERT_FILE": "/elsewhere"]) == bundle, "?ca= first")
        #expect(throws: RelayURL.Failure.self) { try RelayURL.caFile(url, environment: ["SSL_CERT_FILE": "/missing.pem"]) }
    }

    @Test func aPlusInFromIsAPlus() throws {
        let relay = try RelayURL("smtp://ana:pw@mail.example.com?from=ana+jotter@example.com&to=ana@example.com")
        #expect(relay.from?.address == "ana+jotter@example.com")
    }
}

/// What an SMTP failure is called: a wrong password (535) is `auth`; a login refused without any
/// reply about it (the server offers AUTH only after STARTTLS, and `?tls=none` skipped that) is
/// `configuration`, not a wrong password.
@Suite struct SMTPFailureKindTests {
    @Test func aLoginThatWasNeverOfferedIsAConfigurationProblem() {
        let denied = CurlError(code: 67)  // CURLE_LOGIN_DENIED
        #expect(SMTPTransport.failure(curl: denied, reply: 535).kind == .auth)
        #expect(SMTPTransport.failure(curl: denied, reply: 250).kind == .configuration)
        #expect(SMTPTransport.failure(curl: denied, reply: 0).kind == .configuration)
        #expect(SMTPTransport.failure(curl: CurlError(code: 7), reply: 0).kind == .unreachable)
        #expect(SMTPTransport.failure(curl: CurlError(code: 55), reply: 451).kind == .serverError)
    }
}
