import Glibc

/// The process's environment variables, read from `environ` (what `ProcessInfo.environment` gave,
/// without Foundation).
public enum ProcessEnvironment {
    /// Every `NAME=value` in the environment, by name (the first one when a name appears twice, as
    /// `getenv` reads it; an entry without `=` is skipped).
    public static var current: [String: String] {
        var variables: [String: String] = [:]
        var entry: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = environ  // nil after clearenv()
        while let current = entry, let pointer = current.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "=") {
                let name = String(text[..<equals])
                if variables[name] == nil { variables[name] = String(text[text.index(after: equals)...]) }
            }
            entry = current + 1
        }
        return variables
    }
}
