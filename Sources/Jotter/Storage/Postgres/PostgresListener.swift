import Dispatch
import Glibc
import Synchronization

/// Listens on one PostgreSQL channel (`LISTEN`) on a connection of its own and calls `notified` when
/// a notification arrives — how a relay node hears that another node accepted a message. A lost
/// connection is made again (every few seconds until it is back), and `notified` is called once then,
/// since notifications sent meanwhile were lost. A wake-up may be spurious; none is ever the only way
/// work is found (the worker's timer still looks), so a missed one costs latency, never a message.
final class PostgresListener: Sendable {
    private let url: String
    private let channel: String
    private let notified: @Sendable () -> Void
    private let logger: Logger
    private let stopped = Atomic<Bool>(false)
    /// The listening thread runs (started, and not yet stopped).
    private let running = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    /// How long one wait lasts before the stop flag is looked at again.
    static let pollMilliseconds: Int32 = 250
    /// How long to wait before connecting again after the connection was lost.
    static let reconnectMilliseconds: Int64 = 2000

    /// A listener on `channel` (a fixed identifier, never input) of the database at `url`.
    init(url: String, channel: String, logger: Logger, notified: @escaping @Sendable () -> Void) {
        self.url = url
        self.channel = channel
        self.logger = logger
        self.notified = notified
    }

    /// Connects and starts listening; throws if the first connection fails.
    func start() throws {
        let first = Mutex<(any Error)?>(nil)
        let connected = DispatchSemaphore(value: 0)
        DispatchQueue(label: "jotter.postgres.listen").async {
            // The connection is made on the thread that uses it (a connection is not shared).
            var connection: PostgresConnection?
            do {
                connection = try self.connect()
            } catch {
                first.withLock { $0 = error }
            }
            connected.signal()
            guard let connection else {
                self.done.signal()
                return
            }
            self.run(connection)
        }
        connected.wait()
        if let error = first.withLock({ $0 }) {
            done.wait()
            throw error
        }
        running.store(true, ordering: .releasing)
    }

    /// Stops listening and waits for the listening thread to end.
    func stop() {
        stopped.store(true, ordering: .releasing)
        if running.exchange(false, ordering: .acquiringAndReleasing) { done.wait() }
    }

    private func connect() throws -> PostgresConnection {
        let connection = try PostgresConnection(url: url)
        try connection.execute("LISTEN \(channel)")
        return connection
    }

    private func run(_ first: PostgresConnection) {
        var connection: PostgresConnection? = first
        while !stopped.load(ordering: .acquiring) {
            guard let current = connection else {
                if let again = try? connect() {
                    connection = again
                    logger.notice("listening for other nodes again")
                    notified()
                } else {
                    wait(milliseconds: Self.reconnectMilliseconds)
                }
                continue
            }
            var descriptor = pollfd(fd: current.socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Self.pollMilliseconds)
            guard ready > 0 else { continue }
            do {
                if try current.takeNotifications() > 0 { notified() }
            } catch {
                logger.warning("lost the connection that listens for other nodes; connecting again")
                connection = nil
            }
        }
        done.signal()
    }

    /// Waits up to `milliseconds`, returning early once stopped.
    private func wait(milliseconds: Int64) {
        var left = milliseconds
        while left > 0, !stopped.load(ordering: .acquiring) {
            usleep(UInt32(min(left, Int64(Self.pollMilliseconds))) * 1000)
            left -= Int64(Self.pollMilliseconds)
        }
    }
}
