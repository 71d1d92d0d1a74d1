/// Makes a memo's text safe to append to a Markdown note: whatever it holds, a CommonMark reader
/// (CommonMark 0.30, as `cmark` and Obsidian read it) sees it as one entry's content, and the
/// entries after it as what they are.
///
/// The memo's lines are read with CommonMark's block structure (block quotes and list items with
/// their continuation and laziness; fenced and indented code, HTML blocks, paragraphs), and only
/// these are changed:
/// - a level 1–2 heading, ATX (`#`, `## `, `#\t…`) or setext (a paragraph underlined with `=` or
///   `-`), anywhere outside code and HTML, gets a backslash: it would read as the note's own
///   structure (its entries are `##` headings);
/// - an HTML block that would run past the memo's end (`<pre>`, `<script>`, `<style>`,
///   `<textarea>`, `<!--`, `<?`, `<!X`, `<![CDATA[` without their end) has its `<` written `&lt;`,
///   at the top level (inside a quote or list item it ends with its container);
/// - a code fence still open at the top level is closed with a fence as long as the one that opened it;
/// - a paragraph that would begin with a link reference definition (`[x]: https://…`, footnotes'
///   `[^1]: …` alike) has its `[` escaped: a definition is the whole note's, so it could turn another
///   entry's `[x]` into a link, or win over that entry's own definition;
/// - a line break is `\n` (a lone `\r` is a line break to CommonMark too), and `<!-- jotter:` is
///   defused, so a memo cannot forge another entry's marker.
/// The blank line and the `##` heading that begin the next entry end everything else a memo can
/// leave open: paragraphs, quotes, lists (and what is inside them), indented code, other HTML blocks.
///
/// A memo nested deeper than `maximumDepth` quotes and list items (no one writes that; a hostile memo
/// could, and would cost time in proportion to its depth on every line) is written as a code block,
/// fenced with more `~` than any run of them in it: shown as typed, and containing itself.
enum MarkdownContainment {
    /// `body` contained, ending in one `\n`, without trailing blank lines.
    static func contain(_ body: String) -> String {
        var lines = Self.lines(body)
        while lines.last?.isEmpty == true { lines.removeLast() }
        var scanner = Scanner(lines: lines)
        for index in lines.indices {
            scanner.scan(index)
            if scanner.containers.count > maximumDepth { return fenced(lines) }
        }
        var output: [UInt8] = []
        output.reserveCapacity(body.utf8.count + 16)
        for (index, line) in scanner.lines.enumerated() {
            if index > 0 { output.append(UInt8(ascii: "\n")) }
            output += line
        }
        if scanner.containers.isEmpty, case .fence(let character, let length) = scanner.leaf {
            if !lines.isEmpty { output.append(UInt8(ascii: "\n")) }
            output += [UInt8](repeating: character, count: length)
        }
        output.append(UInt8(ascii: "\n"))
        return String(decoding: output, as: UTF8.self)
    }

    /// Quotes and list items nested deeper than this make the memo a code block.
    static let maximumDepth = 32

    /// `lines` as one code block fenced with `~`, longer than any run of `~` in them.
    private static func fenced(_ lines: [[UInt8]]) -> String {
        var longest = 0
        for line in lines {
            var run = 0
            for byte in line {
                run = byte == UInt8(ascii: "~") ? run + 1 : 0
                longest = max(longest, run)
            }
        }
        let fence = [UInt8](repeating: UInt8(ascii: "~"), count: max(3, longest + 1))
        var output = fence + [UInt8(ascii: "\n")]
        for line in lines { output += line + [UInt8(ascii: "\n")] }
        output += fence + [UInt8(ascii: "\n")]
        return String(decoding: output, as: UTF8.self)
    }

    /// The lines of `body` (split at `\n`, `\r\n` and a lone `\r`), each with `<!-- jotter:` defused.
    private static func lines(_ body: String) -> [[UInt8]] {
        let marker = Array("<!-- jotter:".utf8), defused = Array("&lt;!-- jotter:".utf8)
        var lines: [[UInt8]] = []
        var current: [UInt8] = []
        var previous: UInt8 = 0
        for byte in body.utf8 {
            defer { previous = byte }
            if byte == UInt8(ascii: "\n") && previous == UInt8(ascii: "\r") { continue }
            if byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") {
                lines.append(current)
                current.removeAll(keepingCapacity: true)
                continue
            }
            current.append(byte)
            if byte == UInt8(ascii: ":") && current.count >= marker.count && current.suffix(marker.count).elementsEqual(marker) {
                current.removeLast(marker.count)
                current += defused
            }
        }
        lines.append(current)
        return lines
    }

    /// What a block-structure reader keeps open between lines.
    private enum Container: Equatable {
        case quote
        /// A list item: its content is indented `width` columns from where its parent's content starts;
        /// `empty` until its first non-blank line (a blank line then ends it).
        case item(width: Int, empty: Bool)
    }

    private enum Leaf: Equatable {
        case none, paragraph, indentedCode
        case fence(character: UInt8, length: Int)
        case html(kind: Int)
    }

    private struct Scanner {
        var lines: [[UInt8]]
        var containers: [Container] = []
        var leaf = Leaf.none
        /// For each HTML block kind 1–5, the last line holding its end condition (−1: none).
        private let lastEnd: [Int]

        init(lines: [[UInt8]]) {
            self.lines = lines
            var last = [Int](repeating: -1, count: 6)
            for (index, line) in lines.enumerated() {
                for kind in 1...5 where HTML.ends(kind, line[...]) { last[kind] = index }
            }
            lastEnd = last
        }

        /// Reads line `index` (tabs expanded to stops of 4, as CommonMark measures indentation), and
        /// changes it where it would break the note.
        mutating func scan(_ index: Int) {
            let line = Line(lines[index])
            var position = 0
            var matched = 0
            // 1. Which open containers the line continues.
            for container in containers {
                if case .quote = container {
                    let (indent, at) = line.indentation(from: position)
                    guard indent <= 3, at < line.count, line[at] == UInt8(ascii: ">") else { break }
                    position = at + 1
                    if position < line.count && line[position] == UInt8(ascii: " ") { position += 1 }
                } else if case .item(let width, let empty) = container {
                    if line.isBlank(from: position) {
                        guard !empty else { break }
                    } else {
                        guard line.indentation(from: position).columns >= width else { break }
                        position += width
                        containers[matched] = .item(width: width, empty: false)
                    }
                }
                matched += 1
            }
            let allMatched = matched == containers.count
            // 2. The open leaf's own continuation.
            if allMatched {
                switch leaf {
                case .fence(let character, let length):
                    if Self.closesFence(line, from: position, character: character, length: length) { leaf = .none }
                    return
                case .html(let kind):
                    if kind >= 6 ? line.isBlank(from: position) : HTML.ends(kind, line.bytes(from: position)) {
                        leaf = .none
                    }
                    return
                case .indentedCode:
                    if line.isBlank(from: position) || line.indentation(from: position).columns >= 4 { return }
                    leaf = .none
                case .none, .paragraph:
                    break
                }
            } else if leaf != .paragraph {
                // Only a paragraph continues lazily; any other leaf ends with its container.
                closeContainers(keeping: matched)
            }
            // 3. New containers.
            var opened = false
            while containers.count <= MarkdownContainment.maximumDepth {  // deeper: the memo is fenced
                let (indent, at) = line.indentation(from: position)
                guard indent < 4, at < line.count else { break }
                if line[at] == UInt8(ascii: ">") {
                    closeContainers(keeping: matched)
                    containers.append(.quote)
                    matched = containers.count
                    leaf = .none
                    opened = true
                    position = at + 1
                    if position < line.count && line[position] == UInt8(ascii: " ") { position += 1 }
                    continue
                }
                let interrupts = allMatched && !opened && leaf == .paragraph
                guard !Self.isThematicBreak(line, at: at),
                      let item = Self.listItem(line, at: at, interruptingParagraph: interrupts) else { break }
                closeContainers(keeping: matched)
                containers.append(.item(width: at - position + item.width, empty: item.blank))
                matched = containers.count
                leaf = .none
                opened = true
                position = item.contentStart
            }
            // 4. The leaf this line begins or continues.
            let lazy = !allMatched && !opened && leaf == .paragraph
            if line.isBlank(from: position) {
                closeContainers(keeping: matched)
                if leaf != .indentedCode { leaf = .none }
                return
            }
            let (indent, at) = line.indentation(from: position)
            if indent >= 4 {
                if leaf == .paragraph { return }
                closeContainers(keeping: matched)
                leaf = .indentedCode
                return
            }
            if let level = Self.atxLevel(line, at: at) {
                if level <= 2 {
                    insertBackslash(index, before: line.origin[at])
                    text(lazy: lazy, matched: matched)
                } else {
                    closeContainers(keeping: matched)
                    leaf = .none
                }
                return
            }
            if let fence = Self.fenceOpening(line, at: at) {
                closeContainers(keeping: matched)
                leaf = .fence(character: fence.character, length: fence.length)
                return
            }
            if let kind = HTML.start(line.bytes(from: at), paragraphOpen: leaf == .paragraph) {
                let endsHere = kind <= 5 && HTML.ends(kind, line.bytes(from: at))
                if kind == 0 || (kind <= 5 && !endsHere && matched == 0 && lastEnd[kind] <= index) {
                    // Would run past the memo's end, or readers disagree: not an HTML block, then.
                    escapeLessThan(index, at: line.origin[at])
                    text(lazy: lazy, matched: matched)
                    return
                }
                closeContainers(keeping: matched)
                leaf = endsHere ? .none : .html(kind: kind)
                return
            }
            if leaf == .paragraph && allMatched && !opened && Self.isSetextUnderline(line, at: at) {
                insertBackslash(index, before: line.origin[at])
                return
            }
            if Self.isThematicBreak(line, at: at) {
                closeContainers(keeping: matched)
                leaf = .none
                return
            }
            let begins = !(leaf == .paragraph && (lazy || matched == containers.count))
            if begins && line[at] == UInt8(ascii: "[") && labelEndsInColon(index, from: line.origin[at] + 1) {
                insertBackslash(index, before: line.origin[at])
            }
            text(lazy: lazy, matched: matched)
        }

        /// Whether the `[` just before `offset` in line `index` opens a link reference definition's
        /// label: no `[` before its `]`, and a `:` right after that (over up to 999 bytes, across the
        /// paragraph's lines). Such a definition is the whole note's (CommonMark resolves every
        /// `[label]` of the document against it, and the first one of a label wins), so a memo could
        /// turn another entry's `[x]` into a link, or take over its own references.
        private func labelEndsInColon(_ index: Int, from offset: Int) -> Bool {
            var budget = 999
            var escaped = false, closed = false
            for (number, line) in lines[index...].enumerated() {
                if number > 0 && Line(line).isBlank(from: 0) { return false }
                if closed { return false }  // `]` at the end of a line: the `:` must follow it at once
                for byte in line[(number == 0 ? offset : 0)...] {
                    if closed { return byte == UInt8(ascii: ":") }
                    budget -= 1
                    if budget < 0 { return false }
                    if escaped {
                        escaped = false
                    } else if byte == UInt8(ascii: "\\") {
                        escaped = true
                    } else if byte == UInt8(ascii: "[") {
                        return false
                    } else if byte == UInt8(ascii: "]") {
                        closed = true
                    }
                }
                escaped = false
            }
            return false
        }

        /// A line of paragraph text: it continues the open paragraph (lazily, keeping containers it did
        /// not continue) or begins one.
        private mutating func text(lazy: Bool, matched: Int) {
            if leaf == .paragraph && (lazy || matched == containers.count) { return }
            closeContainers(keeping: matched)
            leaf = .paragraph
        }

        private mutating func closeContainers(keeping count: Int) {
            guard containers.count > count else { return }
            containers.removeSubrange(count...)
            leaf = .none
        }

        private mutating func insertBackslash(_ index: Int, before offset: Int) {
            lines[index].insert(UInt8(ascii: "\\"), at: offset)
        }

        private mutating func escapeLessThan(_ index: Int, at offset: Int) {
            lines[index].replaceSubrange(offset...offset, with: Array("&lt;".utf8))
        }

        /// `#`–`######` followed by a space, a tab or the end of the line: its level.
        static func atxLevel(_ line: Line, at start: Int) -> Int? {
            var end = start
            while end < line.count && line[end] == UInt8(ascii: "#") { end += 1 }
            let level = end - start
            guard (1...6).contains(level) else { return nil }
            return end == line.count || line[end] == UInt8(ascii: " ") ? level : nil
        }

        static func fenceOpening(_ line: Line, at start: Int) -> (character: UInt8, length: Int)? {
            let character = line[start]
            guard character == UInt8(ascii: "`") || character == UInt8(ascii: "~") else { return nil }
            var end = start
            while end < line.count && line[end] == character { end += 1 }
            guard end - start >= 3 else { return nil }
            if character == UInt8(ascii: "`") && line.bytes(from: end).contains(UInt8(ascii: "`")) { return nil }
            return (character, end - start)
        }

        static func closesFence(_ line: Line, from position: Int, character: UInt8, length: Int) -> Bool {
            let (indent, at) = line.indentation(from: position)
            guard indent <= 3 else { return false }
            var end = at
            while end < line.count && line[end] == character { end += 1 }
            return end - at >= length && line.isBlank(from: end)
        }

        static func isSetextUnderline(_ line: Line, at start: Int) -> Bool {
            let character = line[start]
            guard character == UInt8(ascii: "=") || character == UInt8(ascii: "-") else { return false }
            var end = start
            while end < line.count && line[end] == character { end += 1 }
            return line.isBlank(from: end)
        }

        static func isThematicBreak(_ line: Line, at start: Int) -> Bool {
            let character = line[start]
            guard character == UInt8(ascii: "*") || character == UInt8(ascii: "-") || character == UInt8(ascii: "_") else {
                return false
            }
            var count = 0
            for index in start..<line.count {
                if line[index] == character { count += 1 } else if line[index] != UInt8(ascii: " ") { return false }
            }
            return count >= 3
        }

        /// A list item's marker at `start`: the columns from `start` to its content, where that content
        /// starts, and whether the item begins blank. Nil when the line is not a list item (an empty
        /// item, or a numbered one not starting at 1, cannot interrupt a paragraph).
        static func listItem(_ line: Line, at start: Int, interruptingParagraph: Bool)
            -> (width: Int, contentStart: Int, blank: Bool)? {
            var end = start
            let first = line[start]
            if first == UInt8(ascii: "-") || first == UInt8(ascii: "+") || first == UInt8(ascii: "*") {
                end += 1
            } else {
                while end < line.count && end - start < 10 && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(line[end]) {
                    end += 1
                }
                guard (1...9).contains(end - start), end < line.count,
                      line[end] == UInt8(ascii: ".") || line[end] == UInt8(ascii: ")") else { return nil }
                if interruptingParagraph && line.bytes(from: start).prefix(end - start).reduce(0, { $0 * 10 + Int($1 - 48) }) != 1 {
                    return nil
                }
                end += 1
            }
            guard end == line.count || line[end] == UInt8(ascii: " ") else { return nil }
            let blank = line.isBlank(from: end)
            if blank && interruptingParagraph { return nil }
            let spaces = line.indentation(from: end).columns
            if blank || spaces >= 5 {
                return (end - start + 1, min(end + 1, line.count), blank)
            }
            return (end - start + spaces, end + spaces, false)
        }
    }

    /// One line with its tabs expanded (to stops of 4 columns), each column knowing its byte in the original.
    private struct Line {
        private let expanded: [UInt8]
        let origin: [Int]

        init(_ bytes: [UInt8]) {
            var expanded: [UInt8] = [], origin: [Int] = []
            expanded.reserveCapacity(bytes.count)
            origin.reserveCapacity(bytes.count)
            for (offset, byte) in bytes.enumerated() {
                if byte == UInt8(ascii: "\t") {
                    repeat {
                        expanded.append(UInt8(ascii: " "))
                        origin.append(offset)
                    } while expanded.count % 4 != 0
                } else {
                    expanded.append(byte)
                    origin.append(offset)
                }
            }
            self.expanded = expanded
            self.origin = origin
        }

        var count: Int { expanded.count }
        subscript(index: Int) -> UInt8 { expanded[index] }
        func bytes(from index: Int) -> ArraySlice<UInt8> { expanded[min(index, expanded.count)...] }

        /// The spaces from `position`, and where the first other character is.
        func indentation(from position: Int) -> (columns: Int, at: Int) {
            var at = position
            while at < expanded.count && expanded[at] == UInt8(ascii: " ") { at += 1 }
            return (at - position, at)
        }

        func isBlank(from position: Int) -> Bool { indentation(from: position).at >= expanded.count }
    }

    /// CommonMark's HTML blocks: the seven kinds of start, and the end of kinds 1–5.
    private enum HTML {
        static let raw = ["script", "pre", "style", "textarea"]
        static let block: Set<String> = [
            "address", "article", "aside", "base", "basefont", "blockquote", "body", "caption", "center", "col",
            "colgroup", "dd", "details", "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure",
            "footer", "form", "frame", "frameset", "h1", "h2", "h3", "h4", "h5", "h6", "head", "header", "hr", "html",
            "iframe", "legend", "li", "link", "main", "menu", "menuitem", "nav", "noframes", "ol", "optgroup", "option",
            "p", "param", "section", "source", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr",
            "track", "ul",
        ]

        /// The kind (1–7) of HTML block `text` (from its first non-space) starts, if any (kind 7 cannot
        /// interrupt a paragraph); 0 for a line CommonMark readers disagree on (`</pre>`, `<!doctype`).
        static func start(_ text: ArraySlice<UInt8>, paragraphOpen: Bool) -> Int? {
            guard text.first == UInt8(ascii: "<") else { return nil }
            let rest = text.dropFirst()
            let lower = lowercased(rest.prefix(9))
            for name in raw where lower.hasPrefix(name) {
                let after = rest.dropFirst(name.utf8.count).first
                if after == nil || after == UInt8(ascii: " ") || after == UInt8(ascii: ">") { return 1 }
            }
            if rest.starts(with: "!--".utf8) { return 2 }
            if rest.first == UInt8(ascii: "?") { return 3 }
            if rest.first == UInt8(ascii: "!"), let letter = rest.dropFirst().first, isLetter(letter) {
                // The spec (0.30) takes any letter; cmark only a capital one.
                return (65...90).contains(letter) ? 4 : 0
            }
            if rest.starts(with: "![CDATA[".utf8) { return 5 }
            let closing = rest.first == UInt8(ascii: "/")
            let name = rest.dropFirst(closing ? 1 : 0).prefix(while: { isLetter($0) || isDigit($0) })
            let afterName = rest[name.endIndex...]
            if !name.isEmpty, block.contains(lowercased(name)),
               afterName.isEmpty || afterName.first == UInt8(ascii: " ") || afterName.first == UInt8(ascii: ">")
                || afterName.starts(with: "/>".utf8) {
                return 6
            }
            if !paragraphOpen, let end = completeTag(rest), rest[end...].allSatisfy({ $0 == UInt8(ascii: " ") }) {
                // `</pre>` or `<pre/>`: the spec says no HTML block, cmark says one (kind 7).
                let tag = rest.dropFirst(closing ? 1 : 0).prefix(while: { isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "-") })
                return raw.contains(lowercased(tag)) ? 0 : 7
            }
            return nil
        }

        /// Whether `text` holds the end of an HTML block of `kind` (1–5).
        static func ends(_ kind: Int, _ text: ArraySlice<UInt8>) -> Bool {
            switch kind {
            case 1:
                let lower = text.map { (65...90).contains($0) ? $0 | 0x20 : $0 }
                return raw.contains { lower.containsLiterally(Array("</\($0)>".utf8)) }
            case 2: return text.containsLiterally(Array("-->".utf8))
            case 3: return text.containsLiterally(Array("?>".utf8))
            case 4: return text.contains(UInt8(ascii: ">"))
            case 5: return text.containsLiterally(Array("]]>".utf8))
            default: return false
            }
        }

        /// The end of a complete open tag (`name`, attributes, `/`?, `>`) or closing tag (`/name >`)
        /// at the start of `text` (just after its `<`).
        static func completeTag(_ text: ArraySlice<UInt8>) -> ArraySlice<UInt8>.Index? {
            var index = text.startIndex
            func at(_ offset: Int = 0) -> UInt8? { index + offset < text.endIndex ? text[index + offset] : nil }
            func skipSpace() -> Bool {
                let start = index
                while let byte = at(), byte == UInt8(ascii: " ") { index += 1 }
                return index > start
            }
            let closing = at() == UInt8(ascii: "/")
            if closing { index += 1 }
            guard let first = at(), isLetter(first) else { return nil }
            while let byte = at(), isLetter(byte) || isDigit(byte) || byte == UInt8(ascii: "-") { index += 1 }
            if closing {
                _ = skipSpace()
                return at() == UInt8(ascii: ">") ? index + 1 : nil
            }
            while true {
                let spaced = skipSpace()
                guard let byte = at() else { return nil }
                if byte == UInt8(ascii: ">") { return index + 1 }
                if byte == UInt8(ascii: "/") { return at(1) == UInt8(ascii: ">") ? index + 2 : nil }
                guard spaced, isLetter(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ":") else { return nil }
                while let byte = at(), isLetter(byte) || isDigit(byte) || "_.:-".utf8.contains(byte) { index += 1 }
                let beforeValue = index
                _ = skipSpace()
                guard at() == UInt8(ascii: "=") else {
                    index = beforeValue
                    continue
                }
                index += 1
                _ = skipSpace()
                guard let quote = at() else { return nil }
                if quote == UInt8(ascii: "\"") || quote == UInt8(ascii: "'") {
                    index += 1
                    while let byte = at(), byte != quote { index += 1 }
                    guard at() == quote else { return nil }
                    index += 1
                } else {
                    let start = index
                    while let byte = at(), !" \"'=<>`".utf8.contains(byte) { index += 1 }
                    guard index > start else { return nil }
                }
            }
        }

        static func lowercased(_ bytes: ArraySlice<UInt8>) -> String {
            String(decoding: bytes.map { (65...90).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
        }

        static func isLetter(_ byte: UInt8) -> Bool { (65...90).contains(byte) || (97...122).contains(byte) }
        static func isDigit(_ byte: UInt8) -> Bool { (48...57).contains(byte) }
    }
}

private extension Collection where Element == UInt8 {
    func containsLiterally(_ needle: [UInt8]) -> Bool {
        guard let first = needle.first, count >= needle.count else { return false }
        var index = startIndex
        while let found = self[index...].firstIndex(of: first) {
            if self[found...].starts(with: needle) { return true }
            index = self.index(after: found)
        }
        return false
    }
}
