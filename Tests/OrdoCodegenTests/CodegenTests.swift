import Foundation
import Ordo
import OrdoCodegen
import Testing

/// `ordoctl codegen` (docs/schema.md, "Generated accessors"): the checked-in
/// accessors of the examples are what the generators give today, the same
/// schema always gives the same text, and the generated Swift accessors
/// (PlaylistModel.swift, a link to the example's) behave as documented.
@Suite struct CodegenTests {
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

  static func schema() throws -> Schema {
    try Schema(json: Data(contentsOf: root.appendingPathComponent("examples/schema/playlist.json")))
  }

  /// Where the example keeps each language's generated file.
  static let checkedIn: [Codegen.Language: String] = [
    .swift: "examples/playlist/swift/Sources/playlist", .c: "examples/playlist/c", .python: "examples/playlist/python",
  ]

  @Test(arguments: Codegen.Language.allCases) func checkedInCodeIsCurrent(_ language: Codegen.Language) throws {
    for file in try Codegen.generate(Self.schema(), language: language, name: "playlist") {
      let path = Self.root.appendingPathComponent(Self.checkedIn[language]! + "/" + file.name)
      let text = try String(contentsOf: path, encoding: .utf8)
      #expect(text == file.text, "\(path.path) is stale: ordoctl codegen --\(language.rawValue) --output \(Self.checkedIn[language]!) examples/schema/playlist.json")
    }
  }

  @Test(arguments: Codegen.Language.allCases) func sameSchemaSameText(_ language: Codegen.Language) throws {
    let schema = try Self.schema()
    let reordered = try Schema(schema.declarations.reversed())
    #expect(try Codegen.generate(schema, language: language, name: "playlist") == Codegen.generate(reordered, language: language, name: "playlist"))
  }

  @Test func shapesWithoutAccessorsAreRefused() throws {
    let cases: [(keys: String, message: String)] = [
      (#""a.*.b.*.c": {"type": "bool"}"#, "a collection inside a collection's element"),
      (#""a.*": {"type": "event"}"#, "a collection of events"),
      (#""a.*": {"type": "bool"}, "a.*.b": {"type": "bool"}"#, "\"a.*\" is declared and has keypaths declared under it"),
      (#""a": {"type": "bool"}, "a.b": {"type": "bool"}"#, "is declared and has keypaths declared under it"),
      (#""a.x-y": {"type": "bool"}, "a.x_y": {"type": "bool"}"#, "would both be named"),
      (#""a.tree": {"type": "bool"}"#, "a name \"a\" already uses"),
      (#""a.*.e": {"type": "event"}"#, "an event cannot be a field of a record"),
    ]
    for (keys, message) in cases {
      let schema = try Schema(json: #"{"ordo-schema": 1, "keys": {"# + keys + "}}")
      for language in [Codegen.Language.swift, .python] {
        let error = #expect(throws: OrdoError.self) { try Codegen.generate(schema, language: language, name: "m") }
        #expect(error?.code == .schema && error?.message.contains(message) == true, "\(keys): \(error?.message ?? "-")")
      }
    }
    #expect(throws: OrdoError.self) { try Codegen.generate(Self.schema(), language: .c, name: "9lives") }
  }

  static func model() throws -> (Bus, PlaylistModel) {
    let bus = Bus(schema: try schema())
    return (bus, try PlaylistModel(bus: bus))
  }

  /// A record write is one transaction's net changes: an unchanged field is
  /// no change, and a contract reading one field runs only when it changes.
  @Test func recordWritesAreNetChanges() throws {
    let (bus, model) = try Self.model()
    let tracks = model.playlist.tracks
    let calls = Calls()
    try bus.register(name: "titles", reads: [tracks.anyElement.title]) { _ in calls.add("title") }
    try bus.register(name: "durations", reads: [tracks.anyElement.duration]) { _ in calls.add("duration") }
    try bus.transaction { try tracks.set("t1", .init(duration: 200, title: "Intro")) }
    #expect(calls.all == ["title", "duration"] || calls.all == ["duration", "title"])
    let counter = try tracks.element("t1").title.counter
    try bus.transaction { try tracks.set("t1", .init(duration: 200, title: "Intro")) }
    #expect(calls.all.count == 2)
    try bus.transaction { try tracks.set("t1", .init(duration: 180, title: "Intro")) }
    #expect(calls.all.suffix(1) == ["duration"] && calls.all.count == 3)
    #expect(try tracks.element("t1").title.counter == counter)
    #expect(try tracks["t1"] == .init(duration: 180, title: "Intro"))
  }

  @Test func removalRemovesTheSubtree() throws {
    let (bus, model) = try Self.model()
    let tracks = model.playlist.tracks
    try bus.transaction {
      try tracks.set("t1", .init(duration: 1, title: "a"))
      try tracks.set("t2", .init(duration: 2, title: "b"))
    }
    try bus.transaction { try tracks.remove("t1") }
    #expect(try tracks["t1"] == nil)
    #expect(try bus.snapshot(["playlist.tracks.t1.**"]).values.isEmpty)
    #expect(try tracks.records() == ["t2": .init(duration: 2, title: "b")])
  }

  /// Fields without a stored value read as their defaults (or nil); a nil
  /// field is removed by a record write; values fall back to defaults.
  @Test func defaultsAndAbsentFields() throws {
    let (bus, model) = try Self.model()
    let playlist = model.playlist
    #expect(try playlist.modeValue == "list" && PlaylistModel.Playlist.modeDefault == "list")
    #expect(try playlist.totalValue == 0)
    try bus.transaction { try playlist.tracks.element("t1").title.set("only a title") }
    #expect(try playlist.tracks["t1"] == .init(duration: 0, title: "only a title"))
    try bus.transaction { try playlist.tracks.set("t1", .init(duration: 5)) }
    #expect(try playlist.tracks["t1"] == .init(duration: 5, title: nil))
    #expect(try bus.isStored("playlist.tracks.t1.title") == false)
  }

  @Test func patternsAndEvents() throws {
    let (bus, model) = try Self.model()
    #expect(model.playlist.tracks.anyElement.title.string == "playlist.tracks.*.title")
    #expect(model.playlist.tracks.anyElement.tree.string == "playlist.tracks.*.**")
    #expect(model.playlist.tree.string == "playlist.**" && model.tree.string == "**")
    #expect(model.playlist.total.pattern.string == "playlist.total")
    try bus.transaction { try model.ui.refresh.touch() }
    #expect(try model.ui.refresh.counter == 1)
    #expect(model.ui.refresh.pattern.string == "ui.refresh")
  }
}

/// Names recorded by callbacks.
final class Calls: @unchecked Sendable {
  private let lock = NSLock()
  private var names: [String] = []
  var all: [String] { lock.withLock { names } }
  func add(_ name: String) { lock.withLock { names.append(name) } }
}
