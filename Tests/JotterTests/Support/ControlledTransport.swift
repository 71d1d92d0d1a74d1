import Foundation
@testable import Jotter

/// A `Transport` a test steers: it records every message it is handed (every attempt, retries
/// included), and either delivers at once, holds each send until `release()`, or fails with a given
/// `DeliveryFailure`. With `forwardingTo:` a successful send is passed on (to a real Maildir, say).
///
/// A held send gives up after `maximumWait` seconds with a transient `timeout`, so a test that forgets
/// to release cannot hang the worker's `stop()` for ever.
///
/// `@unchecked Sendable`: every mutable field is read and written only while holding `condition`.
final class ControlledTransport: Transport, @unchecked Sendable {
    /// What `send` does.
    enum Behaviour: Sendable {
        /// Succeed (or forward) at once.
        case deliver
        /// Wait until the behaviour changes.
        case block
        /// Throw this failure.
        case fail(DeliveryFailure)
    }

    private let condition = NSCondition()
    private var behaviour: Behaviour
    private var received: [MailMessage] = []
    private var waiting = 0
    private let next: (any Transport)?
    private let maximumWait: Double
    private var batchSizes: [Int] = []
    private var niceness: [Int32] = []
    /// How many messages one `send(batch:)` may take (1: the worker sends one at a time).
    let batchLimit: Int
    /// How many bytes of memos one batch may hold.
    let batchByteLimit: Int

    /// A transport that starts out doing `behaviour`.
    init(_ behaviour: Behaviour = .deliver, forwardingTo next: (any Transport)? = nil, maximumWait: Double = 30,
         batchLimit: Int = 1, batchByteLimit: Int = .max) {
        self.behaviour = behaviour
        self.next = next
        self.maximumWait = maximumWait
        self.batchLimit = batchLimit
        self.batchByteLimit = batchByteLimit
    }

    /// The size of each `send(batch:)` call, in order.
    var batches: [Int] {
        condition.withLock { batchSizes }
    }

    /// The nice value of the thread that sent each message, in order (one entry per attempt).
    var sendingNiceness: [Int32] {
        condition.withLock { niceness }
    }

    /// Records the batch, then sends its messages one by one.
    func send(batch messages: [MailMessage]) -> [Result<DeliveryReceipt, DeliveryFailure>] {
        condition.withLock { batchSizes.append(messages.count) }
        return messages.map { message in Result { () throws(DeliveryFailure) in try send(message) } }
    }

    /// Every message handed to `send`, in order (one entry per attempt).
    var messages: [MailMessage] {
        condition.withLock { received }
    }

    /// How many sends are waiting right now.
    var blockedCount: Int {
        condition.withLock { waiting }
    }

    /// Later sends wait until `release()` or `fail(with:)`.
    func block() {
        change(to: .block)
    }

    /// Lets waiting and later sends succeed.
    func release() {
        change(to: .deliver)
    }

    /// Waiting and later sends throw `failure`.
    func fail(with failure: DeliveryFailure) {
        change(to: .fail(failure))
    }

    /// Polls until `count` sends are waiting.
    func waitUntilBlocked(count: Int = 1, timeout: Double = 10) -> Bool {
        TestServer.waitUntil(timeout: timeout) { blockedCount >= count }
    }

    /// Polls until at least `count` messages were handed over.
    func waitUntilReceived(count: Int = 1, timeout: Double = 10) -> Bool {
        TestServer.waitUntil(timeout: timeout) { messages.count >= count }
    }

    private func change(to behaviour: Behaviour) {
        condition.withLock {
            self.behaviour = behaviour
            condition.broadcast()
        }
    }

    func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        condition.lock()
        received.append(message)
        niceness.append(nice)
        let deadline = Date(timeIntervalSinceNow: maximumWait)
        while case .block = behaviour {
            waiting += 1
            let signalled = condition.wait(until: deadline)
            waiting -= 1
            if !signalled {
                condition.unlock()
                throw DeliveryFailure(.timeout, permanent: false)
            }
        }
        let current = behaviour
        condition.unlock()
        if case .fail(let failure) = current {
            throw failure
        }
        if let next {
            return try next.send(message)
        }
        return DeliveryReceipt()
    }
}
