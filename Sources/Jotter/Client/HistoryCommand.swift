/// `jotter history [-n N]`: the latest memos' delivery status as a table.
public enum HistoryCommand {
    /// Fetches and formats; the status is 0, or `SendCommand.Status`'s meaning for what went wrong.
    public static func run(url: String, token: String?, limit: Int, caFile: String? = nil) -> SendCommand.Result {
        if let refusal = SendCommand.unreadableCA(caFile, command: "jotter history") { return refusal }
        if let refusal = SendCommand.unusableURL(url, command: "jotter history") { return refusal }
        let client = ServerClient(baseURL: SendCommand.trimmed(url), token: token, timeoutSeconds: 10, caFile: caFile)
        let response: ServerClient.Response
        do {
            response = try client.request("GET", "/history?limit=\(limit)", headers: ["Accept: application/json"])
        } catch {
            if let failure = error as? ServerClient.Unreachable, failure.isCertificateProblem {
                return SendCommand.Result(status: .notAllowed, output: "",
                                          error: SendCommand.certificateAdvice("jotter history", url, outcome: ""))
            }
            return SendCommand.Result(status: .unreachable, output: "",
                                      error: "jotter history: no answer from \(SendCommand.shown(url))\n")
        }
        guard response.status == 200, case .array(let entries)? = try? JSONValue.parse(response.body) else {
            let lockedOut = response.status == 429 && response.errorCode == "too_many_attempts"
            let status: SendCommand.Status = [401, 403].contains(response.status) || lockedOut ? .notAllowed
                : [404, 405].contains(response.status) ? .usage : .temporary
            return SendCommand.Result(status: status, output: "",
                                      error: "jotter history: \(response.status) \(response.errorCode ?? "")\n")
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
            subject = subject.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : String($0) }.joined()
            if subject.count > 40 { subject = String(subject.prefix(39)) + "…" }
            rows.append([String(created.prefix(19)).replacingLiterally("T", with: " "),
                         entry["status"]?.string ?? "?", entry["attempts"]?.integer.map(String.init) ?? "0",
                         subject, note])
        }
        let widths = (0..<5).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count)
            }.joined(separator: "  ").trimmingTrailingSpaces()
        }.joined(separator: "\n") + "\n"
    }
}

private extension String {
    func trimmingTrailingSpaces() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
