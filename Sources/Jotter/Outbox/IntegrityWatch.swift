import Dispatch
import Synchronization

/// Whether the outbox database is damaged: pages SQLite cannot read back as it wrote them (a failing
/// disk, a file changed under the server, a bad restore). Such a page can hold accepted memos that are
/// never delivered, and nothing else says so: the server starts, takes new memos and reports itself
/// healthy, and only the reads that reach the page fail.
///
/// It looks with `PRAGMA quick_check` (every page's structure, not the indexes' agreement with the
/// table), on a connection of its own so that nothing waits for it, and it takes the word of any read
/// that meets a damaged page. Once seen, damage stays for the life of the process: a page does not mend
/// itself, and the remedy (a backup) needs a restart.
final class IntegrityWatch: Sendable {
    /// What was found, and when.
    struct Damage: Sendable, Equatable {
        /// `damaged` (pages SQLite cannot make sense of) or `io_error` (pages the disk cannot read).
        var reason: String
        /// When it was first seen (wall clock, milliseconds since 1970).
        var sinceMilliseconds: Int64
    }

    private let path: String
    private let vfs: String?
    private let clock: any WallClock
    private let logger: Logger
    private let found = Mutex<Damage?>(nil)
    /// Where the checks run: a queue of their own, so no request, no write and no delivery waits for one
    /// (a cold 100 MB database takes about a second), and a relay that is down or refused delays none.
    private let checks = DispatchQueue(label: "jotter.integrity", qos: .utility)
    private let timer = Mutex<(any SchedulerTimer)?>(nil)
    /// Whether the checks were stopped, and the connection of the one under way, to interrupt at stop.
    private let running = Mutex<(stopped: Bool, check: Database.Interrupter?)>((false, nil))

    init(path: String, vfs: String?, clock: any WallClock, logger: Logger) {
        self.path = path
        self.vfs = vfs
        self.clock = clock
        self.logger = logger
    }

    /// How often the pages are read through (and once at start).
    static let intervalMilliseconds: Int64 = 86_400_000

    /// Reads every page now and then every `intervalMilliseconds`, on the checks' own queue.
    func startChecking(everyMilliseconds interval: Int64 = intervalMilliseconds,
                       scheduler: any Scheduler = DispatchScheduler()) {
        let made = scheduler.makeTimer(queue: checks) { [weak self] in
            guard let self else { return }
            check()
            timer.withLock { $0 }?.arm(afterMilliseconds: interval)  // none once stopped
        }
        timer.withLock { timer in
            timer?.cancel()
            timer = made
        }
        running.withLock { $0.stopped = false }
        made.arm(afterMilliseconds: 0)
    }

    /// Stops the checks: one under way is interrupted (a large file on a failing disk can take minutes, and
    /// a service manager does not wait that long for a stop), and waited for.
    func stopChecking() {
        timer.withLock { timer in
            defer { timer = nil }
            return timer
        }?.cancel()
        running.withLock { running in
            running.stopped = true
            running.check?.interrupt()
        }
        checks.sync {}
    }

    /// The damage seen so far, if any.
    var damage: Damage? { found.withLock { $0 } }

    /// Reads every page of the database once (on the calling thread: call it off the request and writer
    /// queues). Returns the damage seen, this time or before.
    @discardableResult
    func check() -> Damage? {
        do {
            let connection = try Database(path: path, vfs: vfs)
            defer {
                running.withLock { $0.check = nil }  // never interrupted once closed
                connection.close()
            }
            let started = running.withLock { running in
                if !running.stopped { running.check = connection.interrupter }
                return !running.stopped
            }
            guard started else { return damage }
            try connection.execute("PRAGMA busy_timeout = 5000")
            // At most 100 problems are listed: one is enough to know, and their text is not kept (it names
            // pages and tables only, but a log line says what kind, not what text).
            let problems = try connection.read { database in
                try database.statement("PRAGMA quick_check(100)").rows { $0.text(0) ?? "" }.filter { $0 != "ok" }.count
            }
            if problems > 0 { record("damaged", problems: problems) }
        } catch {
            note(error)
        }
        return damage
    }

    /// Takes the word of a failed read or write: SQLite found a page it cannot make sense of, or the disk
    /// could not read one (`SQLITE_IOERR_READ`, `_SHORT_READ`). Any other failure says nothing of the pages:
    /// a full disk or quota, a failed write or sync, a lock held too long pass with the next good commit.
    func note(_ error: any Error) {
        guard let failure = error as? DatabaseError, failure.meansDamage else { return }
        record(failure.isFailedRead ? "io_error" : "damaged", problems: nil)
    }

    private func record(_ reason: String, problems: Int?) {
        let now = clock.nowMilliseconds()
        let first = found.withLock { found -> Bool in
            guard found == nil else { return false }
            found = Damage(reason: reason, sinceMilliseconds: now)
            return true
        }
        guard first else { return }
        logger.error("the outbox database is damaged: memos in it may not be delivered; stop Jotter, keep a copy "
                     + "of the data directory, and restore jotter.db from a backup (README: 'A damaged database')",
                     metadata: ["reason": reason, "problems": problems.map(String.init) ?? "-"])
    }
}
