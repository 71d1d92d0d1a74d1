extension Unicode.Scalar {
    /// Nothing a reader could see: white space, a control character (NUL, U+0001 …), or what Unicode says
    /// to ignore when it cannot be shown (zero-width spaces and joiners, direction marks, a byte order
    /// mark, a soft hyphen) — not the format characters that are visible, such as U+06DD.
    var isInvisible: Bool {
        properties.isWhitespace || properties.generalCategory == .control || properties.isDefaultIgnorableCodePoint
    }

    /// A bidirectional embedding, override or isolate (U+202A–202E, U+2066–2069): one in a name or a
    /// subject shown on a terminal or a page turns the rest of the line around.
    var isBidiControl: Bool {
        (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value)
    }
}
