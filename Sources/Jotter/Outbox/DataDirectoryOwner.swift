/// Which command a data directory belongs to: `jotter serve` (a composer: one person's memos, for one
/// inbox) or `jotter relay` (other people's messages, each for its own address). Both keep an outbox in
/// the same form, so each would otherwise take the other's over: a `serve` pointed at a relay's directory
/// mailed every relay message (refused ones included) to its own Maildir, and a relay pointed at a
/// composer's delivered that person's memos through the relay's mail account. Each refuses the other's
/// directory, by name, before it delivers anything.
enum DataDirectoryOwner: String, Sendable {
    case composer = "serve"
    case relay

    /// The setting that names the owner.
    static let settingName = "data_directory_owner"

    /// Why a command will not take a directory.
    struct Refusal: Error, CustomStringConvertible {
        let path: String
        let owner: DataDirectoryOwner
        let claimant: DataDirectoryOwner

        var description: String {
            "\(path) is the data directory of a 'jotter \(owner.rawValue)'"
                + (owner == .composer ? " (it holds that composer's memos)" : " (it holds other people's messages)")
                + ": give 'jotter \(claimant.rawValue)' a --data-dir of its own"
        }
    }

    /// Takes the directory of `outbox` (just opened) for `claimant`, or closes the outbox and throws
    /// `Refusal` if it is the other command's. A directory from before this setting is known by what it
    /// holds: the relay's tables (`relay_schema`) make it a relay's; memos and no relay tables, a
    /// composer's. One holding nothing yet is anyone's to take.
    static func claim(_ claimant: DataDirectoryOwner, path: String, outbox: Outbox) throws {
        do {
            let settings = outbox.settings
            let named = try settings.read(settingName).flatMap(DataDirectoryOwner.init(rawValue:))
            var owner = named
            if owner == nil {
                if try settings.read("relay_schema") != nil {
                    owner = .relay
                } else if try outbox.history.acceptedCount() > 0 {
                    owner = .composer
                }
            }
            if let owner, owner != claimant { throw Refusal(path: path, owner: owner, claimant: claimant) }
            if named == nil { try settings.write(settingName, value: claimant.rawValue) }
        } catch {
            outbox.close()
            throw error
        }
    }
}
