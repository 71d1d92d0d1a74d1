/// The byte budget of one claim: due memos are taken in order while their sealed contents fit in
/// `maxBytes`, and the first is taken whatever its size, so a claim always makes progress.
struct ClaimBudget {
    let maxBytes: Int
    private(set) var usedBytes = 0
    private(set) var taken = 0

    init(maxBytes: Int) {
        self.maxBytes = maxBytes
    }

    /// Whether a memo of `sealed` still fits.
    func fits(_ sealed: [UInt8]?) -> Bool {
        taken == 0 || (sealed?.count ?? 0) <= maxBytes - usedBytes
    }

    /// Counts a memo that was claimed.
    mutating func take(_ sealed: [UInt8]?) {
        usedBytes += sealed?.count ?? 0
        taken += 1
    }
}
