import Testing

@testable import Ordo

/// SPEC §14: the schema format, its validation and its lookups.
@Suite struct SchemaTests {
  static let playlist = """
    {
      "ordo-schema": 1,
      "keys": {
        "playlist.title":             {"type": "string", "default": "", "max-length": 200,
                                       "description": "shown in the header"},
        "playlist.tracks.*.title":    {"type": "string"},
        "playlist.tracks.*.duration": {"type": "int64", "min": 0, "default": 0},
        "playlist.total":             {"type": "int64", "min": 0, "default": 0},
        "playlist.mode":              {"type": "string", "choices": ["list", "grid"], "default": "list"},
        "playlist.cover":             {"type": "bytes", "max-length": 1048576},
        "ui.refresh":                 {"type": "event"}
      }
    }
    """

  @Test func readsTheSpecExample() throws {
    let s = try Schema(json: Self.playlist)
    #expect(s.declarations.count == 7)
    let title = try #require(s.declaration(for: "playlist.title"))
    #expect(title.type == .string)
    #expect(title.defaultValue == .string(""))
    #expect(title.maxLength == 200)
    #expect(title.description == "shown in the header")
    #expect(s.declaration(for: "playlist.tracks.t7.duration")?.keypath == "playlist.tracks.*.duration")
    #expect(s.declaration(for: "playlist.tracks.t7") == nil)
    #expect(s.declaration(for: "playlist.titel") == nil)
    #expect(s.declaration(for: "ui.refresh")?.type == .event)
  }

  @Test func canonicalTextReadsBackAndIsStable() throws {
    let s = try Schema(json: Self.playlist)
    let again = try Schema(json: s.json)
    #expect(again == s)
    #expect(again.json == s.json)
    #expect(s.json.contains("\"playlist.mode\": {\"type\": \"string\", \"default\": \"list\", \"choices\": [\"list\", \"grid\"]}"))
    let d = try Schema([Schema.Declaration("x", type: .double, default: .double(1), min: .double(-0.5))])
    #expect(d.json.contains("\"default\": 1.0, \"min\": -0.5"))
    #expect(try Schema(json: d.json) == d)
  }

  @Test func declaredInCode() throws {
    let s = try Schema([
      Schema.Declaration("doc.title", type: .string, default: .string("Untitled")),
      Schema.Declaration("doc.items.*.done", type: .bool, default: .bool(false)),
    ])
    #expect(s.declarations.map(\.keypath) == ["doc.items.*.done", "doc.title"])
    #expect(s.declaration(for: "doc.items.4.done")?.defaultValue == .bool(false))
  }

  /// Every malformed schema is refused naming the entry and the problem.
  @Test(arguments: [
    (#"[]"#, ["document is an array"]),
    (#"{"keys": {}}"#, ["no \"ordo-schema\""]),
    (#"{"ordo-schema": 2, "keys": {}}"#, ["version 2"]),
    (#"{"ordo-schema": 1}"#, ["no \"keys\""]),
    (#"{"ordo-schema": 1, "keys": {}, "extra": 1}"#, ["unknown field \"extra\""]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "float"}}}"#, ["\"a\"", "unknown type \"float\""]),
    (#"{"ordo-schema": 1, "keys": {"a": {}}}"#, ["\"a\"", "no \"type\""]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "maximum": 3}}}"#, ["\"a\"", "unknown field \"maximum\""]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "default": "3"}}}"#, ["\"a\"", "default \"3\" is a string, not an int64"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "default": 1.5}}}"#, ["default 1.5 is a number, not an int64"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "min": 0, "default": -1}}}"#, ["default -1 is below min 0"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "min": 5, "max": 1}}}"#, ["min 5 is greater than max 1"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "string", "choices": ["x"], "default": "y"}}}"#, ["default \"y\" is not one of the choices [\"x\"]"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "string", "max-length": 2, "default": "abc"}}}"#, ["over max-length 2"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "bool", "min": 0}}}"#, ["min and max apply to int64 and double"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "bool", "choices": [true]}}}"#, ["choices apply to"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "choices": []}}}"#, ["not a non-empty array"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "choices": [1, 1]}}}"#, ["choice 1 appears twice"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "event", "default": 1}}}"#, ["an event holds no value"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "bytes", "default": "0g"}}}"#, ["hex digits"]),
    (#"{"ordo-schema": 1, "keys": {"a.**": {"type": "int64"}}}"#, ["\"a.**\"", "'**' may not appear"]),
    (#"{"ordo-schema": 1, "keys": {"a..b": {"type": "int64"}}}"#, ["\"a..b\"", "empty segment"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64"}, "a": {"type": "int64"}}}"#, ["appears twice"]),
    (#"{"ordo-schema": 1, "keys": {"a.*.x": {"type": "int64"}, "a.b.x": {"type": "string"}}}"#, ["names the same keypaths as"]),
    (#"{"ordo-schema": 1, "keys": {"a.*": {"type": "int64"}, "*.b": {"type": "int64", "default": 1}}}"#, ["names the same keypaths as"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "string", "max-length": -1}}}"#, ["max-length -1"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64"}"#, ["JSON error at byte"]),
    (#"{"ordo-schema": 1, "keys": {"a": {"type": "int64", "description": 3}}}"#, ["description is a number"]),
  ])
  func malformedSchemasAreRefused(_ text: String, _ fragments: [String]) {
    _ = expectError(.schema, fragments) { _ = try Schema(json: text) }
  }

  @Test func overlappingEntriesWithTheSameRulesAreAllowed() throws {
    let s = try Schema(json: #"{"ordo-schema": 1, "keys": {"a.*.x": {"type": "int64"}, "a.b.x": {"type": "int64", "description": "b's"}}}"#)
    #expect(s.declaration(for: "a.b.x")?.description == "b's")
    #expect(s.declaration(for: "a.c.x")?.keypath == "a.*.x")
  }

  @Test func valueChecks() throws {
    let s = try Schema(json: Self.playlist)
    func check(_ k: String, _ v: Value) throws(OrdoError) {
      let parts = k.split(separator: ".").map(String.init)
      try s.check(v, at: k, declaration: try s.resolve(k, parts))
    }
    try check("playlist.total", .int64(3))
    _ = expectError(.schema, ["playlist.total", "-1 is below min 0"]) { try check("playlist.total", .int64(-1)) }
    _ = expectError(.typeMismatch, ["playlist.total", "declared int64", "a string value"]) { try check("playlist.total", .string("3")) }
    _ = expectError(.schema, ["\"tile\" is not one of the choices [\"list\", \"grid\"]"]) { try check("playlist.mode", .string("tile")) }
    _ = expectError(.schema, ["ui.refresh", "event"]) { try check("ui.refresh", .bool(true)) }
    _ = expectError(.schema, ["playlist.titel", "did you mean \"playlist.title\"?"]) { try check("playlist.titel", .string("x")) }
    _ = expectError(.schema, ["did you mean \"playlist.tracks.t7.title\"?"]) { try check("playlist.tracks.t7.titel", .string("x")) }
    _ = expectError(.schema, ["over max-length 200"]) { try check("playlist.title", .string(String(repeating: "x", count: 201))) }
  }

  @Test func treesAndPatterns() throws {
    let s = try Schema(json: Self.playlist)
    try s.checkTree("playlist.tracks.t7", ["playlist", "tracks", "t7"])
    try s.checkTree("playlist", ["playlist"])
    _ = expectError(.schema, ["playlist.trucks", "nor a prefix"]) { try s.checkTree("playlist.trucks", ["playlist", "trucks"]) }
    for ok in ["playlist.tracks.*.title", "playlist.**", "**", "playlist.tracks.t1.*", "*.title", "playlist.tracks.**"] {
      try s.checkPattern(try Pattern(ok), contract: "c", role: "read")
    }
    _ = expectError(.schema, ["contract \"c\"", "read pattern \"playlist.tracks.*.titel\"", "did you mean \"playlist.tracks.*.title\"?"]) {
      try s.checkPattern(try Pattern("playlist.tracks.*.titel"), contract: "c", role: "read")
    }
    _ = expectError(.schema, ["matches no keypath"]) { try s.checkPattern(try Pattern("playlist.tracks"), contract: "c", role: "write") }
    #expect(try s.declarations(matching: "playlist.tracks.**").map(\.keypath) == ["playlist.tracks.*.duration", "playlist.tracks.*.title"])
  }

  @Test func jsonReader() throws {
    #expect(try JSON.parse(Array(#" {"a": [1, -2.5e1, "x\u00e9\ud83d\ude00", true, null]} "#.utf8))
      == .object([("a", .array([.integer(1), .number(-25), .string("xé😀"), .bool(true), .null]))]))
    for bad in ["", "{", "[1,]", "01", "\"\\ud800\"", "1 2", "\"a\nb\"", "{\"a\":1,\"a\":2}", "1e999"] {
      #expect(throws: JSONError.self, "\(bad)") { try JSON.parse(Array(bad.utf8)) }
    }
  }
}
