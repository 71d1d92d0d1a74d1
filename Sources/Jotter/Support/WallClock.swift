/// Wall-clock time in milliseconds since the Unix epoch: the one seam tests replace to control time.
public protocol WallClock: Sendable {
    /// Now, in milliseconds since 1970-01-01T00:00:00Z.
    func nowMilliseconds() -> Int64
}
