import Testing

@testable import Ordo

/// SPEC §1: keypath and pattern syntax, limits, messages, matching.
@Suite struct KeypathTests {
  static let s32 = Array(repeating: "s", count: 32).joined(separator: ".")
  static let s33 = Array(repeating: "s", count: 33).joined(separator: ".")

  @Test(arguments: ["a", "A-z_0.9", "doc.items.3.title", "-", "_._", s32, String(repeating: "k", count: 256)])
  func validKeypaths(_ k: String) throws {
    let kp = try Keypath(k)
    #expect(kp.string == k)
    #expect(kp.segments.joined(separator: ".") == k)
    #expect(try Pattern(k).isConcrete)
  }

  @Test func segmentLimit() {
    #expect(throws: Never.self) { try Keypath(Self.s32) }
    expectError(.invalidKeypath, [Self.s33, "32 segments", "byte 64"]) { _ = try Keypath(Self.s33) }
    expectError(.invalidKeypath, ["32 segments"]) { _ = try Pattern(Self.s32 + ".**") }
    #expect(throws: Never.self) { try Pattern(Array(repeating: "s", count: 31).joined(separator: ".") + ".**") }
  }

  @Test func byteLimit() {
    let ok = String(repeating: "k", count: 256)
    let long = String(repeating: "k", count: 257)
    #expect(throws: Never.self) { try Keypath(ok) }
    // Long keypaths are named by their first 80 characters.
    let e = expectError(.invalidKeypath, [String(long.prefix(80)) + "\"…", "257 bytes", "the limit is 256", "byte 256"]) {
      _ = try Keypath(long)
    }
    #expect(e?.message.contains(String(long.prefix(81))) == false)
    expectError(.invalidKeypath, ["257 bytes"]) { _ = try Pattern(long) }
    // The limit counts bytes, not characters.
    expectError(.invalidKeypath, ["258 bytes"]) { _ = try Keypath(String(repeating: "é", count: 129)) }
  }

  @Test func badCharactersNameKeypathAndPosition() {
    expectError(.invalidKeypath, ["\"doc.ti tle\"", "byte 6", "' '"]) { _ = try Keypath("doc.ti tle") }
    expectError(.invalidKeypath, ["\"doc/title\"", "byte 3", "'/'"]) { _ = try Keypath("doc/title") }
    expectError(.invalidKeypath, ["byte 5", "0xc3"]) { _ = try Keypath("doc.tïtle") }
    expectError(.invalidKeypath, ["\"doc..title\"", "empty segment", "byte 4"]) { _ = try Keypath("doc..title") }
    expectError(.invalidKeypath, ["\"doc.\"", "byte 4"]) { _ = try Keypath("doc.") }
    expectError(.invalidKeypath, ["\".doc\"", "byte 0"]) { _ = try Keypath(".doc") }
    expectError(.invalidKeypath, ["\"\""]) { _ = try Keypath("") }
    // Control characters are escaped in the message.
    let e = expectError(.invalidKeypath, ["a\\u{1}b", "byte 1", "0x1"]) { _ = try Keypath("a\u{1}b") }
    #expect(e?.message.contains("\u{1}") == false)
  }

  @Test func wildcardsAreNotKeypaths() {
    expectError(.invalidKeypath, ["\"doc.*\"", "byte 4", "not allowed"]) { _ = try Keypath("doc.*") }
    expectError(.invalidKeypath, ["\"**\""]) { _ = try Keypath("**") }
  }

  @Test(arguments: ["**", "*", "doc.*", "doc.**", "doc.*.items.*.**", "*.*.*"])
  func validPatterns(_ p: String) throws {
    let pattern = try Pattern(p)
    #expect(pattern.string == p)
    #expect(!pattern.isConcrete)
  }

  @Test func invalidPatternsNamePosition() {
    expectError(.invalidKeypath, ["\"doc.a*\"", "byte 5", "whole segment"]) { _ = try Pattern("doc.a*") }
    expectError(.invalidKeypath, ["\"doc.*a\"", "byte 4", "whole segment"]) { _ = try Pattern("doc.*a") }
    expectError(.invalidKeypath, ["\"doc.***\"", "byte 4"]) { _ = try Pattern("doc.***") }
    expectError(.invalidKeypath, ["\"doc.**.title\"", "byte 4", "last segment"]) { _ = try Pattern("doc.**.title") }
    expectError(.invalidKeypath, ["\"**.a\"", "byte 0", "last segment"]) { _ = try Pattern("**.a") }
    expectError(.invalidKeypath, ["\"a.**.**\"", "byte 2"]) { _ = try Pattern("a.**.**") }
  }

  @Test func patternMatching() throws {
    let star = try Pattern("doc.*.name")
    #expect(star.matches("doc.a.name"))
    #expect(!star.matches("doc.a.b.name"))
    #expect(!star.matches("doc.name"))
    let tree = try Pattern("doc.**")
    #expect(tree.matches("doc"))
    #expect(tree.matches("doc.a.b.c"))
    #expect(!tree.matches("docs"))
    #expect(!tree.matches("other.doc"))
    let all = try Pattern("**")
    #expect(all.matches("x"))
    #expect(all.matches("x.y.z"))
    #expect(try Pattern("doc").matches("doc"))
    #expect(try !Pattern("doc").matches("doc.title"))
  }

  /// SPEC §1: a write to k affects R when R matches k or k is a proper
  /// ancestor of something R can match.
  @Test func affects() throws {
    let title = try Pattern("doc.title")
    #expect(title.isAffected(byWriteTo: "doc.title"))
    #expect(title.isAffected(byWriteTo: "doc"))
    #expect(!title.isAffected(byWriteTo: "doc.title.font"))
    #expect(!title.isAffected(byWriteTo: "doc.other"))
    let exact = try Pattern("doc")
    #expect(!exact.isAffected(byWriteTo: "doc.title"))
    #expect(exact.isAffected(byWriteTo: "doc"))
    let star = try Pattern("a.*.c")
    #expect(star.isAffected(byWriteTo: "a"))
    #expect(star.isAffected(byWriteTo: "a.b"))
    #expect(star.isAffected(byWriteTo: "a.c"))  // ancestor of a.c.c
    #expect(star.isAffected(byWriteTo: "a.b.c"))
    #expect(!star.isAffected(byWriteTo: "a.b.d"))
    #expect(!star.isAffected(byWriteTo: "a.b.c.d"))
    let tree = try Pattern("doc.**")
    #expect(tree.isAffected(byWriteTo: "doc"))
    #expect(tree.isAffected(byWriteTo: "doc.x.y.z"))
    #expect(!tree.isAffected(byWriteTo: "docs"))
    #expect(try Pattern("**").isAffected(byWriteTo: "anything.at.all"))
  }

  /// SPEC §4: a possible writer of k is a possible writer for every reader a
  /// write to k affects.
  @Test func writePatternMayAffectReader() throws {
    #expect(try Pattern("g").mayAffect(reader: Pattern("g.a.*")))
    #expect(try Pattern("g.a.b").mayAffect(reader: Pattern("g.a.*")))
    #expect(try !Pattern("g.a.b.c").mayAffect(reader: Pattern("g.a.*")))
    #expect(try Pattern("in.**").mayAffect(reader: Pattern("in.x.y")))
    #expect(try Pattern("*.v").mayAffect(reader: Pattern("a.v")))
    #expect(try !Pattern("*.v").mayAffect(reader: Pattern("a.w")))
    #expect(try !Pattern("doc.**").mayAffect(reader: Pattern("other")))
    #expect(try !Pattern("doc.title.**").mayAffect(reader: Pattern("doc")))
  }
}
