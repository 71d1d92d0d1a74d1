/// A name a person recognises for a paired device ("iPhone", "Android — Pixel 8", "Mac — Firefox"),
/// from what the browser says about itself: the User-Agent and, when offered, User-Agent client hints
/// (`Sec-CH-UA-Model`, `Sec-CH-UA-Platform`, which Chromium sends over HTTPS once the page asked with
/// `Accept-CH`). Nothing here is trusted: it is a label, and `jotter devices rename` changes it.
enum DeviceName {
    /// The name for a device whose requests carry `headers`; `touch` when its page says it has a touch
    /// screen.
    static func from(_ headers: HTTPHeaders, touch: Bool = false) -> String {
        from(userAgent: headers["User-Agent"] ?? "", model: headers["Sec-CH-UA-Model"],
             platform: headers["Sec-CH-UA-Platform"], touch: touch)
    }

    /// The name for a device with this User-Agent and client hints.
    static func from(userAgent: String, model: String?, platform: String?, touch: Bool = false) -> String {
        let hintedModel = model.map(unquoted).flatMap { $0.isEmpty ? nil : $0 }
        let hintedPlatform = platform.map(unquoted).flatMap { $0.isEmpty ? nil : $0 }
        let agent = userAgent
        if agent.contains("iPhone") { return "iPhone" }
        if agent.contains("iPad") { return "iPad" }
        // An iPad's browsers ask for desktop sites and say "Macintosh"; no Mac has a touch screen.
        if touch && agent.contains("Macintosh") && hintedPlatform == nil { return "iPad" }
        if agent.contains("Android") || hintedPlatform == "Android" {
            guard let model = hintedModel ?? androidModel(agent) else { return "Android" }
            return "Android — " + model
        }
        let system: String
        if hintedPlatform == "macOS" || agent.contains("Macintosh") {
            system = "Mac"
        } else if hintedPlatform == "Windows" || agent.contains("Windows") {
            system = "Windows"
        } else if hintedPlatform == "Chrome OS" || agent.contains("CrOS") {
            system = "Chromebook"
        } else if hintedPlatform == "Linux" || agent.contains("Linux") {
            system = "Linux"
        } else {
            return browser(agent) ?? "Browser"
        }
        return browser(agent).map { system + " — " + $0 } ?? system
    }

    /// `"Pixel 8"` → `Pixel 8` (structured-field strings are quoted).
    private static func unquoted(_ value: String) -> String {
        var text = value.trimmingASCIISpaces()[...]
        if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") { text = text.dropFirst().dropLast() }
        return String(text.filter { !$0.isASCII || ($0.asciiValue ?? 0) >= 0x20 }.prefix(40))
    }

    /// The model in `Mozilla/5.0 (Linux; Android 14; Pixel 8) …`; nil when reduced to "K" (UA reduction).
    private static func androidModel(_ agent: String) -> String? {
        guard let open = agent.firstIndex(of: "("), let close = agent[open...].firstIndex(of: ")") else { return nil }
        let parts = agent[agent.index(after: open)..<close].split(separator: ";")
            .map { String($0).trimmingASCIISpaces() }
        guard let android = parts.firstIndex(where: { $0.hasPrefix("Android") }), android + 1 < parts.count else {
            return nil
        }
        var model = String(parts[android + 1])
        if let build = model.firstLiteralRange(of: " Build/") { model = String(model[..<build.lowerBound]) }
        guard !model.isEmpty, model != "K", !model.hasPrefix("wv") else { return nil }
        return String(model.prefix(40))
    }

    /// The browser's everyday name, when the User-Agent says it clearly.
    private static func browser(_ agent: String) -> String? {
        if agent.contains("Firefox/") { return "Firefox" }
        if agent.contains("Edg/") { return "Edge" }
        if agent.contains("Chrome/") || agent.contains("Chromium/") { return "Chrome" }
        if agent.contains("Safari/") { return "Safari" }
        return nil
    }
}
