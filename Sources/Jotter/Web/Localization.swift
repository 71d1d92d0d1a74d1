/// The page's languages: translations loaded from `Public/i18n/<tag>.json`, and the choice of one
/// for a request (`?lang=` first, then `Accept-Language`, then English).
struct Localization: Sendable {
    /// Every language Jotter ships, by BCP 47 tag.
    static let supported = ["ja", "en", "es", "fr", "de", "it", "pt", "ko", "zh-Hans", "zh-Hant", "ru", "ar"]
    /// Written right to left.
    static let rightToLeft: Set<String> = ["ar"]
    static let fallback = "en"

    /// Tag → key → string, for the languages whose file exists.
    let strings: [String: [String: String]]
    /// Tag → the JSON file's bytes, served to the page's language switch.
    let files: [String: [UInt8]]

    /// The languages that can be served (English always, with or without a file), in `supported` order.
    let available: [String]

    /// Translations given directly (tests).
    init(strings: [String: [String: String]], files: [String: [UInt8]] = [:]) {
        self.strings = strings
        self.files = files
        available = Self.supported.filter { strings[$0] != nil || $0 == Self.fallback }
    }

    /// Loads `directory/<tag>.json` for every supported tag that has one.
    init(directory: String) throws {
        var strings: [String: [String: String]] = [:]
        var files: [String: [UInt8]] = [:]
        for tag in Self.supported {
            // A missing or unreadable file is skipped; one that is read must be valid.
            guard let data = try? FileIO.read(path: "\(directory)/\(tag).json") else { continue }
            guard let table = Self.table(data) else { throw PageRoute.LoadError.invalidTranslations(tag: tag) }
            strings[tag] = table
            files[tag] = data
        }
        self.init(strings: strings, files: files)
    }

    /// A JSON object whose values are all strings, as a dictionary; nil for anything else.
    static func table(_ bytes: [UInt8]) -> [String: String]? {
        guard case .object(let members) = try? JSONValue.parse(bytes) else { return nil }
        var table: [String: String] = [:]
        for (key, value) in members {
            guard let text = value.string else { return nil }
            table[key] = text
        }
        return table
    }

    /// The tag for a request: a valid `?lang=`, else the best `Accept-Language` match, else English.
    func negotiate(query: String?, acceptLanguage: String?) -> String {
        if let query, let tag = Self.match(query, in: available) { return tag }
        guard let acceptLanguage, !acceptLanguage.isEmpty else { return Self.fallback }
        for range in Self.ranges(acceptLanguage) {
            if range == "*" { return Self.fallback }
            if let tag = Self.match(range, in: available) { return tag }
        }
        return Self.fallback
    }

    /// `Accept-Language` ranges by descending quality (stable for ties), without `q=0` ones.
    static func ranges(_ header: String) -> [String] {
        var weighted: [(range: String, quality: Double, index: Int)] = []
        for (index, item) in header.split(separator: ",").prefix(32).enumerated() {
            let parts = item.split(separator: ";")
            guard let first = parts.first else { continue }
            let range = first.trimmingCharacters(in: " \t")
            var quality = 1.0
            for parameter in parts.dropFirst() {
                let pair = parameter.trimmingCharacters(in: " \t")
                if pair.hasPrefix("q="), let value = Double(pair.dropFirst(2)) { quality = value }
            }
            if quality > 0 && !range.isEmpty { weighted.append((String(range), quality, index)) }
        }
        return weighted.sorted { $0.quality != $1.quality ? $0.quality > $1.quality : $0.index < $1.index }
            .map(\.range)
    }

    /// Maps a language range to a shipped tag: exact, Chinese script by region, or the primary language.
    static func match(_ range: String, in available: [String]) -> String? {
        let lowered = range.lowercased().replacingLiterally("_", with: "-")
        if let exact = available.first(where: { $0.lowercased() == lowered }) { return exact }
        let subtags = lowered.split(separator: "-").map(String.init)
        guard let primary = subtags.first else { return nil }
        if primary == "zh" {
            // A script subtag decides (`zh-Hans-HK` is Simplified, read in Hong Kong); only without one does
            // the region tell.
            let traditional = subtags.contains("hant")
                || (!subtags.contains("hans") && subtags.contains(where: { ["tw", "hk", "mo"].contains($0) }))
            let tag = traditional ? "zh-Hant" : "zh-Hans"
            return available.contains(tag) ? tag : nil
        }
        return available.first(where: { $0.lowercased() == primary })
    }
}
