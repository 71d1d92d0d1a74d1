import Testing
@testable import Jotter

/// `type/subtype; name=value; …` as the decoders read it: `;` inside quotes is part of a value.
@Suite struct MediaTypeTests {
    @Test func typeAndParametersAreSplitOutsideQuotesOnly() {
        let media = MediaType(#" Multipart/Form-Data ; boundary="a;b ;c"; CHARSET=utf-8;empty=;novalue"#)
        #expect(media.type == "multipart/form-data")
        #expect(media.parameters == ["boundary": "a;b ;c", "charset": "utf-8", "empty": ""])
    }

    @Test func nonASCIIValuesAndCombiningMarksAfterAQuoteStayWhole() {
        // U+0301 after the opening quote: by byte the quote still opens, so the `;` after it is quoted.
        let media = MediaType("form-data; name=\"\u{301}naïve;x\"; filename=\"メモ.txt\"")
        #expect(media.type == "form-data")
        #expect(media.parameters["name"]?.hasSuffix("naïve;x\"") == true, "\(media.parameters)")
        #expect(media.parameters["filename"] == "メモ.txt")
    }

    @Test func aValueWithoutParametersOrWithAnUnclosedQuoteIsReadAsItCame() {
        #expect(MediaType("text/plain").type == "text/plain")
        #expect(MediaType("text/plain").parameters.isEmpty)
        #expect(MediaType("").type == "")
        let unclosed = MediaType(#"text/plain; name="open; charset=utf-8"#)
        #expect(unclosed.parameters == ["name": #""open; charset=utf-8"#])
    }
}
