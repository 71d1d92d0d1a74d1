extension Unicode.Scalar {
    /// Nothing a reader could see: white space, a control character (NUL, U+0001 …), or what Unicode says
    /// to ignore when it cannot be shown (zero-width spaces and joiners, direction marks, a byte order
    /// mark, a soft hyphen) — not the format characters that are visible, such as U+06DD.
    var isInvisible: Bool {
        properties.isWhitespace || properties.generalCategory == .control || properties.isDefaultIgnorableCodePoint
    }
}
