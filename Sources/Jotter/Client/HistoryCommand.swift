import Glibc

/// `jotter history [-n N]`: the latest memos' delivery status as a table.
public enum HistoryCommand {
    /// Fetches and formats; the status is 0, or `SendCommand.Status`'s meaning for what went wrong.
    public static func run(url: String, token: String?, limit: Int, caFile: String? = nil) -> SendCommand.Result {
        if let refusal = SendCommand.unreadableCA(caFile, command: "jotter history") { return refusal }
        if let refusal = SendCommand.unusableURL(url, command: "jotter history") { return refusal }
        if let refusal = SendCommand.missingCurl(command: "jotter history") { return refusal }
        let client = ServerClient(baseURL: SendCommand.trimmed(url), token: token, timeoutSeconds: 10, caFile: caFile)
        let response: ServerClient.Response
        do {
            response = try client.request("GET", "/history?limit=\(limit)", headers: ["Accept: application/json"])
        } catch {
            if let failure = error as? ServerClient.Unreachable, failure.isCertificateProblem {
                return SendCommand.Result(status: .notAllowed, output: "",
                                          error: SendCommand.certificateAdvice("jotter history", url, outcome: ""))
            }
            if let refusal = SendCommand.plainHTTPToTLS(error, client, url, command: "jotter history") { return refusal }
            return SendCommand.Result(status: .unreachable, output: "",
                                      error: "jotter history: no answer from \(SendCommand.shown(url))\n")
        }
        guard response.status == 200, case .array(let entries)? = try? JSONValue.parse(response.body) else {
            let lockedOut = response.status == 429 && response.errorCode == "too_many_attempts"
            // A 200 that is not a history, or a 404/405/501: another server at this URL, not a Jotter.
            let notJotter = [404, 405, 501].contains(response.status) || response.status == 200
            let status: SendCommand.Status = [401, 403].contains(response.status) || lockedOut ? .notAllowed
                : notJotter ? .usage : .temporary
            let error = notJotter
                ? "jotter history: no Jotter at \(SendCommand.shown(url)) (it answered \(response.status)); "
                    + "--url is the server's base, like http://127.0.0.1:7373\n"
                : "jotter history: \(response.status) \(response.errorCode ?? "")\n"
            return SendCommand.Result(status: status, output: "", error: error)
        }
        return SendCommand.Result(status: .sent, output: table(entries), error: "")
    }

    /// One line per memo: when, status, attempts, subject, and why it waits.
    static func table(_ entries: [JSONValue]) -> String {
        guard !entries.isEmpty else { return "No memos yet.\n" }
        var rows = [["ACCEPTED", "STATUS", "TRIES", "SUBJECT", "NOTE"]]
        for entry in entries {
            let created = entry["created_at"]?.string ?? ""
            let note = entry["waiting_for"]?.string ?? entry["last_error"]?.string ?? ""
            var subject = entry["subject"]?.string ?? "—"
            // Control characters are spaces; bidi embeddings, overrides and isolates go (a U+202E in a
            // subject reversed the rest of the terminal line), as in device names.
            subject = subject.unicodeScalars.compactMap { scalar -> String? in
                if scalar.isBidiControl { return nil }
                return scalar.properties.generalCategory == .control ? " " : String(scalar)
            }.joined()
            if TerminalColumns.count(subject) > 40 { subject = TerminalColumns.prefix(subject, columns: 39) + "…" }
            rows.append([localTime(created) ?? String(created.prefix(19)).replacingLiterally("T", with: " "),
                         entry["status"]?.string ?? "?", entry["attempts"]?.integer.map(String.init) ?? "0",
                         subject, note])
        }
        // Aligned by terminal columns, not characters: 日本語 takes six, as the terminal draws it.
        let widths = (0..<5).map { column in rows.map { TerminalColumns.count($0[column]) }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell
                    : cell + String(repeating: " ", count: widths[index] - TerminalColumns.count(cell))
            }.joined(separator: "  ").trimmingTrailingSpaces()
        }.joined(separator: "\n") + "\n"
    }
}

/// `2026-12-07T08:33:05.123Z` (the server's UTC) as this machine's local time, `2026-12-07 17:33:05`
/// under TZ=Asia/Tokyo: the table showed the UTC digits without their `Z`, read as local time.
func localTime(_ iso: String) -> String? {
    let digits = Array(iso.utf8)
    guard digits.count >= 19 else { return nil }
    func number(_ range: Range<Int>) -> Int32? { Int32(String(decoding: digits[range], as: UTF8.self)) }
    guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
          let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19) else { return nil }
    var broken = tm()
    broken.tm_year = year - 1900
    broken.tm_mon = month - 1
    broken.tm_mday = day
    broken.tm_hour = hour
    broken.tm_min = minute
    broken.tm_sec = second
    var seconds = timegm(&broken)
    var local = tm()
    guard localtime_r(&seconds, &local) != nil else { return nil }
    var buffer = [CChar](repeating: 0, count: 32)
    let count = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S", &local)
    guard count > 0 else { return nil }
    return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

private extension String {
    func trimmingTrailingSpaces() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
