import CLibPQ
import Glibc

/// One libpq connection to PostgreSQL. Not thread-safe: `PostgresPool` lends it to one user at a time.
///
/// Parameters go separately from the SQL (`PQexecParams`: text for numbers and strings, binary for
/// bytes), so no value is ever spliced into a statement. Errors keep the SQLSTATE and drop the
/// server's text, which may quote the values of the row (a key's hash, an address's).
final class PostgresConnection {
    /// A parameter.
    enum Value: Sendable {
        case text(String)
        case integer(Int64)
        case bytes([UInt8])
        case null
    }

    /// A failed statement or connection, by SQLSTATE.
    struct Failure: Error, CustomStringConvertible, Sendable {
        /// The SQLSTATE (`40001` serialization failure, `23505` unique violation, …), if the server sent one.
        var sqlState: String?
        /// What failed: `connect`, `statement`, `connection_lost`.
        var kind: String

        /// For a connection that could not be made: libpq's reason (`database "relay" does not exist`,
        /// `Connection refused`, `password authentication failed for user "relay"`), which names the
        /// server, the user and the database but never a password, and no row's values. Shown to the
        /// operator who started the command; logs take only `kind`.
        var reason: String?

        var description: String {
            "PostgreSQL \(kind)" + (sqlState.map { " (SQLSTATE \($0))" } ?? "") + (reason.map { ": " + $0 } ?? "")
        }

        /// Worth running the whole transaction again: another transaction won a race.
        var isRetryable: Bool { sqlState == "40001" || sqlState == "40P01" }

        /// The `kind` of a transaction whose COMMIT was sent but never answered (the connection was lost):
        /// the server may have committed it. Whoever acts on the failure must not assume it did not.
        static let commitUnknown = "commit_unknown"

        /// Whether the transaction may have committed after all (see `commitUnknown`).
        var mayHaveCommitted: Bool { kind == Self.commitUnknown }

        /// The connection was found lost at `BEGIN`: nothing of the transaction reached the server.
        var lostBeforeBegin = false
    }

    /// The rows of a result, as text (NULL as nil), read by column.
    struct Rows {
        fileprivate(set) var values: [[String?]]

        var count: Int { values.count }
        var first: Row? { values.first.map(Row.init) }
        var all: [Row] { values.map(Row.init) }
    }

    /// One row.
    struct Row {
        let fields: [String?]

        func text(_ column: Int) -> String? { fields[column] }
        func int64(_ column: Int) -> Int64 { fields[column].flatMap { Int64($0) } ?? 0 }
        func optionalInt64(_ column: Int) -> Int64? { fields[column].flatMap { Int64($0) } }
        func isNull(_ column: Int) -> Bool { fields[column] == nil }
        /// A `bytea` column: PostgreSQL's text form is `\x` and hex digits.
        func bytes(_ column: Int) -> [UInt8]? {
            guard let text = fields[column] else { return nil }
            let digits = Array(text.utf8.dropFirst(2))
            guard text.hasPrefix("\\x"), digits.count % 2 == 0 else { return nil }
            var bytes: [UInt8] = []
            bytes.reserveCapacity(digits.count / 2)
            var index = 0
            while index < digits.count {
                guard let high = digits[index].hexDigitValue, let low = digits[index + 1].hexDigitValue else { return nil }
                bytes.append(high << 4 | low)
                index += 2
            }
            return bytes
        }
    }

    private let library: PostgresLibrary.Loaded
    private let connection: OpaquePointer
    /// libpq's functions.
    private var pq: jotter_pq { library.functions }

    /// Connects to `url` (`postgres://user:password@host:port/database?…`, as libpq reads it).
    init(url: String) throws(Failure) {
        let library = try Self.opened(PostgresLibrary.shared)
        let pq = library.functions
        guard let connection = jotter_PQconnectdb(pq, Self.withDefaults(url)) else {
            throw Failure(sqlState: nil, kind: "connect")
        }
        guard jotter_PQstatus(pq, connection) == CONNECTION_OK else {
            var failure = Failure(sqlState: nil, kind: "connect")
            failure.reason = Self.reason(jotter_PQerrorMessage(pq, connection), connecting: url)
            jotter_PQfinish(pq, connection)
            throw failure
        }
        self.library = library
        self.connection = connection
        // libpq prints the server's notices and warnings (`FATAL: terminating connection due to
        // administrator command`) on standard error itself, bare, around the log's own lines; their text
        // may quote a row. The failures that matter reach the caller as `Failure`, by SQLSTATE.
        jotter_PQsetNoticeProcessor(pq, connection, { _, _ in }, nil)
        _ = try execute("SET client_min_messages = warning")
        // `bytes` reads bytea's hex form; a database or role set to `escape` would make every sealed value
        // and key hash unreadable (a wrong-key refusal at start, every device's secret refused).
        _ = try execute("SET bytea_output = hex")
    }

    /// libpq's defaults wait without end for a server that does not answer: a host gone from the network
    /// held every request and a node's shutdown until TCP gave up, many minutes on. So, unless `url` says
    /// otherwise: at most 10 s to connect, and a connection whose server stops acknowledging (keepalives
    /// unanswered for about a minute, or data unacknowledged for a minute) fails, and is replaced.
    static func withDefaults(_ url: String) -> String {
        let defaults = [("connect_timeout", "10"), ("keepalives", "1"), ("keepalives_idle", "30"),
                        ("keepalives_interval", "10"), ("keepalives_count", "3"), ("tcp_user_timeout", "60000")]
        // Only a URI has a query to extend (a `key=value` connection string is taken as it is).
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else { return url }
        let query = url.split(separator: "?", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
        let named = Set(query.split(separator: "&").map {
            $0.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)[0]
        })
        let added = defaults.filter { !named.contains(Substring($0.0)) }.map { "\($0.0)=\($0.1)" }
        guard !added.isEmpty else { return url }
        return url + (url.contains("?") ? (query.isEmpty || url.hasSuffix("&") ? "" : "&") : "?")
            + added.joined(separator: "&")
    }

    deinit {
        jotter_PQfinish(pq, connection)
    }

    /// libpq, or a failure to connect that says why there is none (and which package to install).
    static func opened(_ library: Result<PostgresLibrary.Loaded, SharedLibrary.Missing>) throws(Failure) -> PostgresLibrary.Loaded {
        switch library {
        case .success(let opened): return opened
        case .failure(let missing): throw Failure(sqlState: nil, kind: "connect", reason: missing.description)
        }
    }

    /// libpq's message on one line: its lines joined, `FATAL:` and the like kept, at most 300 characters.
    static func reason(_ message: UnsafePointer<CChar>?, connecting url: String = "") -> String? {
        guard let message else { return nil }
        let lines = String(cString: message).split(whereSeparator: { $0 == "\n" || $0 == "\r" })
            .map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
            .map { Self.withoutSecrets(String($0), url: url) }
            .filter { !$0.isEmpty }
        guard !lines.isEmpty else { return nil }
        let joined = lines.joined(separator: "; ")
        return joined.count > 300 ? String(joined.prefix(299)) + "…" : joined
    }

    /// `line` without what it may quote of the URL's secrets: libpq's own complaints about the URL
    /// (`invalid percent-encoded token: "…"`, `invalid sslmode value: "…"`) quote what they could not read,
    /// which can be a password; the server's (`database "relay" does not exist`) quote names worth keeping.
    /// So a complaint's quotes are dropped, and the password is dropped wherever it stands.
    static func withoutSecrets(_ line: String, url: String) -> String {
        var text = line
        if text.lowercased().contains("invalid") {
            var kept = "", quoted = false
            for character in text {
                if character == "\"" {
                    kept += quoted ? "…\"" : "\""
                    quoted.toggle()
                } else if !quoted {
                    kept.append(character)
                }
            }
            text = quoted ? kept + "…" : kept
        }
        // A password wherever it stands, as written and percent-decoded.
        func hide(_ password: Substring) {
            for form in Set([String(password), URLParts.percentDecoded(password) ?? String(password)]) where form.utf8.count >= 3 {
                text = text.replacingLiterally(form, with: "…")
            }
        }
        // user:password@ in the authority, which ends at the first /, ? or # (an @ in the query is not its).
        if let scheme = url.firstLiteralRange(of: "://") {
            let rest = url[scheme.upperBound...]
            let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
            if let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
                hide(authority[authority.index(after: colon)..<at])
            }
        }
        // And one given as a query parameter (`?password=…`).
        if let given = url.firstLiteralRange(of: "password=") {
            hide(url[given.upperBound...].prefix { $0 != "&" && $0 != "#" })
        }
        return text
    }

    /// False once the server has gone (a pool then drops the connection).
    var isUsable: Bool { jotter_PQstatus(pq, connection) == CONNECTION_OK }

    /// Whether an idle connection is still open: the server sends nothing to a connection at rest, so
    /// anything waiting to be read (a server that restarted or ended the session said goodbye, then closed
    /// the socket) means it is not. Looked at without waiting.
    var isStillOpen: Bool {
        var waiting = pollfd(fd: jotter_PQsocket(pq, connection), events: Int16(POLLIN), revents: 0)
        return poll(&waiting, 1, 0) == 0 && jotter_PQstatus(pq, connection) == CONNECTION_OK
    }

    /// Runs one statement with `parameters` ($1, $2, …).
    @discardableResult
    func execute(_ sql: String, _ parameters: [Value] = []) throws(Failure) -> Rows {
        var texts: [[CChar]?] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
        for parameter in parameters {
            switch parameter {
            case .text(let text):
                texts.append(Array(text.utf8CString))
                lengths.append(0)
                formats.append(0)
            case .integer(let number):
                texts.append(Array(String(number).utf8CString))
                lengths.append(0)
                formats.append(0)
            case .bytes(let bytes):
                texts.append(bytes.isEmpty ? [0] : bytes.map { CChar(bitPattern: $0) })
                lengths.append(Int32(bytes.count))
                formats.append(1)
            case .null:
                texts.append(nil)
                lengths.append(0)
                formats.append(0)
            }
        }
        let result = withPointers(texts) { pointers in
            jotter_PQexecParams(pq, connection, sql, Int32(parameters.count), nil, pointers, lengths, formats, 0)
        }
        guard let result else { throw Failure(sqlState: nil, kind: "connection_lost") }
        defer { jotter_PQclear(pq, result) }
        switch jotter_PQresultStatus(pq, result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK:
            break
        default:
            let state = jotter_PQresultErrorField(pq, result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            throw Failure(sqlState: state, kind: isUsable ? "statement" : "connection_lost")
        }
        let rowCount = jotter_PQntuples(pq, result), columnCount = jotter_PQnfields(pq, result)
        var rows = Rows(values: [])
        rows.values.reserveCapacity(Int(rowCount))
        for row in 0..<rowCount {
            var fields: [String?] = []
            fields.reserveCapacity(Int(columnCount))
            for column in 0..<columnCount {
                if jotter_PQgetisnull(pq, result, row, column) == 1 {
                    fields.append(nil)
                } else {
                    let length = Int(jotter_PQgetlength(pq, result, row, column))
                    let value = jotter_PQgetvalue(pq, result, row, column)
                    fields.append(value.map { pointer in
                        pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
                            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
                        }
                    } ?? "")
                }
            }
            rows.values.append(fields)
        }
        return rows
    }

    /// The connection's socket, to wait on for notifications (`LISTEN`).
    var socket: Int32 { jotter_PQsocket(pq, connection) }

    /// Reads what the server sent and returns how many notifications (`NOTIFY`) arrived, dropping
    /// their payloads (Jotter's carry none).
    func takeNotifications() throws(Failure) -> Int {
        guard jotter_PQconsumeInput(pq, connection) == 1 else { throw Failure(sqlState: nil, kind: "connection_lost") }
        var count = 0
        while let notification = jotter_PQnotifies(pq, connection) {
            jotter_PQfreemem(pq, notification)
            count += 1
        }
        return count
    }

    /// Runs `body` in one transaction (SERIALIZABLE unless told otherwise), committing at its end;
    /// a transaction that lost a race to another (serialization failure, deadlock) runs again, up to
    /// `attempts` times. So a decision over several rows — a limit's last unit, an idempotency key —
    /// is taken as if the nodes asked one after the other.
    ///
    /// A retry first waits a random time, up to 1 ms after the first loss and doubling to 64 ms: many
    /// requests racing for one row (a device's limit) that all retried at once would collide again,
    /// and on a busy machine some lost all their attempts (seen with 60 at once from two nodes).
    func transaction<T>(serializable: Bool = true, attempts: Int = 20,
                        _ body: (PostgresConnection) throws -> T) throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                try execute(serializable ? "BEGIN ISOLATION LEVEL SERIALIZABLE" : "BEGIN")
            } catch {
                var failure = error
                failure.lostBeforeBegin = failure.kind == "connection_lost"
                throw failure
            }
            do {
                let value = try body(self)
                try commit()
                return value
            } catch let failure as Failure where failure.isRetryable && attempt < attempts {
                _ = try? execute("ROLLBACK")
                let ceiling = UInt32(1_000) << UInt32(min(attempt - 1, 6))
                usleep(UInt32.random(in: 0...ceiling))
                continue
            } catch {
                _ = try? execute("ROLLBACK")
                throw error
            }
        }
    }

    /// `COMMIT`. Sent, and the connection lost before its answer came, it may have been carried out or
    /// not: that is `Failure.commitUnknown`.
    private func commit() throws(Failure) {
        if case .failure(let failure) = Result(catching: { () throws(Failure) in try execute("COMMIT") }) {
            throw failure.kind == "connection_lost" ? Failure(sqlState: nil, kind: Failure.commitUnknown) : failure
        }
    }

    /// Calls `body` with C string pointers for `texts` (nil for NULL), valid during the call.
    private func withPointers<R>(_ texts: [[CChar]?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        var pointers: [UnsafePointer<CChar>?] = []
        func next(_ index: Int) -> R {
            guard index < texts.count else { return body(pointers) }
            guard let text = texts[index] else {
                pointers.append(nil)
                return next(index + 1)
            }
            return text.withUnsafeBufferPointer { buffer in
                pointers.append(buffer.baseAddress)
                return next(index + 1)
            }
        }
        return next(0)
    }
}
