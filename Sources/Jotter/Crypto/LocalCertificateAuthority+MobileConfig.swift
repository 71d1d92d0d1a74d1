extension LocalCertificateAuthority {
    /// An iOS/iPadOS configuration profile that installs this CA (`com.apple.security.root`), as an XML
    /// property list. Its UUIDs and identifier derive from the CA's fingerprint, so downloading it
    /// again replaces the installed profile instead of adding a second one. After installing it, iOS
    /// still asks for full trust in Settings → General → About → Certificate Trust Settings.
    public var mobileConfig: [UInt8] {
        let hex = fingerprint.filter { $0 != ":" }.lowercased()
        let identifier = "local.jotter.ca." + hex.prefix(8)
        let name = Self.escaped(machineName)
        let profile = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
            \t<key>PayloadContent</key>
            \t<array>
            \t\t<dict>
            \t\t\t<key>PayloadCertificateFileName</key>
            \t\t\t<string>jotter-ca.crt</string>
            \t\t\t<key>PayloadContent</key>
            \t\t\t<data>\(Base64.encode(certificateDER))</data>
            \t\t\t<key>PayloadDescription</key>
            \t\t\t<string>Adds the certificate authority of Jotter on \(name).</string>
            \t\t\t<key>PayloadDisplayName</key>
            \t\t\t<string>Jotter local CA (\(name))</string>
            \t\t\t<key>PayloadIdentifier</key>
            \t\t\t<string>\(identifier).root</string>
            \t\t\t<key>PayloadType</key>
            \t\t\t<string>com.apple.security.root</string>
            \t\t\t<key>PayloadUUID</key>
            \t\t\t<string>\(uuid(for: "root"))</string>
            \t\t\t<key>PayloadVersion</key>
            \t\t\t<integer>1</integer>
            \t\t</dict>
            \t</array>
            \t<key>PayloadDescription</key>
            \t<string>Lets this device reach Jotter on \(name) over HTTPS. The CA can vouch only for \
            local names and private network addresses.</string>
            \t<key>PayloadDisplayName</key>
            \t<string>Jotter on \(name)</string>
            \t<key>PayloadIdentifier</key>
            \t<string>\(identifier)</string>
            \t<key>PayloadRemovalDisallowed</key>
            \t<false/>
            \t<key>PayloadType</key>
            \t<string>Configuration</string>
            \t<key>PayloadUUID</key>
            \t<string>\(uuid(for: "profile"))</string>
            \t<key>PayloadVersion</key>
            \t<integer>1</integer>
            </dict>
            </plist>

            """
        return Array(profile.utf8)
    }

    /// A UUID fixed by this CA's fingerprint and `purpose`: SHA-256 truncated to 128 bits, marked as
    /// RFC 9562 version 8 (custom) with the RFC variant.
    private func uuid(for purpose: String) -> String {
        var bytes = Array(SHA256.hash(Array("jotter-ca-\(purpose):\(fingerprint)".utf8)).prefix(16))
        bytes[6] = bytes[6] & 0x0F | 0x80
        bytes[8] = bytes[8] & 0x3F | 0x80
        let hex = bytes.map { byte in
            let digits = String(byte, radix: 16, uppercase: true)
            return byte < 16 ? "0" + digits : digits
        }.joined()
        var text = ""
        for (index, character) in hex.enumerated() {
            if [8, 12, 16, 20].contains(index) { text.append("-") }
            text.append(character)
        }
        return text
    }

    /// `text` safe inside an XML element.
    private static func escaped(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
