import Testing

@testable import Ordo

/// SPEC §14 through the Swift API: a bus made with a schema refuses what
/// the schema does not allow, all or nothing, and reads return defaults.
@Suite struct SchemaBusTests {
  static func makeBus() throws -> Bus { Bus(schema: try Schema(json: SchemaTests.playlist)) }

  @Test func writesAreChecked() throws {
    let bus = try Self.makeBus()
    bus.begin()
    _ = expectError(.schema, ["\"playlist.titel\" is not declared", "did you mean \"playlist.title\"?"]) {
      try bus.set("playlist.titel", .string("x"))
    }
    _ = expectError(.typeMismatch, ["playlist.total", "declared int64", "a string value"]) { try bus.set("playlist.total", .string("3")) }
    _ = expectError(.schema, ["-1 is below min 0"]) { try bus.set("playlist.total", .int64(-1)) }
    _ = expectError(.schema, ["\"tile\" is not one of the choices"]) { try bus.set("playlist.mode", .string("tile")) }
    _ = expectError(.schema, ["event"]) { try bus.set("ui.refresh", .bool(true)) }
    _ = expectError(.schema, ["not declared"]) { try bus.touch("playlist.nothing") }
    _ = expectError(.schema, ["not declared"]) { try bus.remove("playlist.nothing") }
    _ = expectError(.schema, ["nor a prefix"]) { try bus.removeTree("playlist.trucks") }
    _ = expectError(.schema, ["did you mean \"playlist.tracks.t1.title\"?"]) { try bus.set("playlist.tracks.t1.titel", .string("x")) }
    try bus.set("playlist.total", .int64(3))
    try bus.set("playlist.tracks.t1.title", .string("Intro"))
    try bus.set("playlist.tracks.t1.duration", .int64(30))
    try bus.touch("ui.refresh")
    #expect(try bus.commit() == 1)
    #expect(try bus.counter("ui.refresh") == 1)
    #expect(try bus.value("playlist.titel") == nil)
    #expect(try bus.counter("playlist.titel") == 0)
    try bus.transaction { () throws(OrdoError) in try bus.removeTree("playlist.tracks.t1") }
    #expect(try bus.isStored("playlist.tracks.t1.title") == false)
  }

  @Test func defaults() throws {
    let bus = try Self.makeBus()
    #expect(try bus.value("playlist.mode") == .string("list"))
    #expect(try bus.isStored("playlist.mode") == false)
    #expect(try bus.value("playlist.tracks.t9.duration") == .int64(0))
    #expect(try bus.value("playlist.tracks.t9.title") == nil)
    #expect(try bus.value("playlist.nothing") == nil)
    try bus.transaction { () throws(OrdoError) in try bus.set("playlist.mode", .string("grid")) }
    #expect(try bus.value("playlist.mode") == .string("grid"))
    #expect(try bus.isStored("playlist.mode"))
    #expect(try bus.counter("playlist.mode") == 1)
    // Removing the stored value returns the default and is a change.
    let calls = Calls()
    try bus.watch(calls, "mode", reads: ["playlist.mode"])
    #expect(try bus.transaction { () throws(OrdoError) in try bus.remove("playlist.mode") } == 2)
    #expect(calls.all == [Call(name: "mode", changed: ["playlist.mode"], txn: 2)])
    #expect(try bus.value("playlist.mode") == .string("list"))
    #expect(try bus.isStored("playlist.mode") == false)
    #expect(try bus.counter("playlist.mode") == 2)
    // Setting the default's value is a stored value, a change.
    #expect(try bus.transaction { () throws(OrdoError) in try bus.set("playlist.mode", .string("list")) } == 3)
    #expect(try bus.isStored("playlist.mode"))
    // A snapshot and changes hold stored values only.
    #expect(try bus.snapshot(["playlist.**"]).values == ["playlist.mode": .string("list")])
  }

  @Test func handlesAndProperties() throws {
    let bus = try Self.makeBus()
    _ = expectError(.schema, ["did you mean \"playlist.total\"?"]) { _ = try bus.resolve("playlist.totl") }
    _ = expectError(.typeMismatch, ["declared int64", "not string"]) { _ = try bus.property("playlist.total", as: String.self) }
    let total = try bus.property("playlist.total", as: Int.self)
    let mode = try bus.property("playlist.mode", as: String.self)
    let h = try bus.resolve("playlist.total")
    #expect(try total.value == 0)
    #expect(try mode.value == "list")
    bus.begin()
    try total.set(5)  // held back
    _ = expectError(.schema, ["-2 is below min 0"]) { try total.set(-2) }
    _ = expectError(.schema, ["not one of the choices"]) { try mode.set("tile") }
    _ = expectError(.typeMismatch, ["a double value"]) { try bus.set(h, .double(1)) }
    #expect(try bus.commit() == 1)
    #expect(try total.value == 5)
    #expect(try bus.counter("playlist.total") == 1)
  }

  @Test func batchesAreAllOrNothing() throws {
    let bus = try Self.makeBus()
    bus.begin()
    _ = expectError(.schema, ["playlist.total"]) {
      try bus.write([.set("playlist.title", .string("A")), .set("playlist.total", .int64(-1))])
    }
    #expect(try bus.commit() == 0)
    #expect(try bus.isStored("playlist.title") == false)
  }

  @Test func registrationsAreChecked() throws {
    let bus = try Self.makeBus()
    _ = expectError(.schema, ["contract \"v\"", "read pattern \"playlist.tracks.*.titel\"", "did you mean"]) {
      try bus.register(name: "v", reads: ["playlist.tracks.*.titel"]) { _ in }
    }
    _ = expectError(.schema, ["write pattern \"playlist.sum\""]) {
      try bus.register(name: "v", reads: ["playlist.tracks.*.duration"], writes: ["playlist.sum"], priority: -1) { _ in }
    }
    #expect(bus.contracts().isEmpty)
    try bus.register(name: "total", reads: ["playlist.tracks.*.duration"], writes: ["playlist.total"], priority: -1) { _ in }
    try bus.register(name: "all", reads: ["**"]) { _ in }
    try bus.register(name: "tracks", reads: ["playlist.tracks.**"]) { _ in }
    try bus.register(name: "log", reads: []) { _ in }
    #expect(bus.contracts().count == 4)
  }

  @Test func callbacksAreChecked() throws {
    let bus = try Self.makeBus()
    let refusal = Box<OrdoError?>(nil)
    try bus.register(owner: refusal, name: "total", reads: ["playlist.tracks.*.duration"], writes: ["playlist.total"], priority: -1) {
      box, ctx in
      do throws(OrdoError) { try ctx.set("playlist.total", .int64(-5)) } catch { box.value = error }
    }
    try bus.transaction { () throws(OrdoError) in try bus.set("playlist.tracks.a.duration", .int64(3)) }
    #expect(refusal.value?.code == .schema)
    #expect(try bus.isStored("playlist.total") == false)
  }

  @Test func replacingTheSchema() throws {
    let bus = try Self.makeBus()
    try bus.transaction { () throws(OrdoError) in try bus.set("playlist.total", .int64(7)) }
    try bus.register(name: "mode", reads: ["playlist.mode"]) { _ in }
    let narrow = try Schema(json: #"{"ordo-schema": 1, "keys": {"playlist.total": {"type": "int64", "max": 5}}}"#)
    _ = expectError(.schema, ["2 thing(s)", "7 is above max 5", "contract \"mode\""]) { try bus.replaceSchema(narrow) }
    #expect(bus.schema == (try Self.makeBus()).schema)
    let wider = try Schema(json: #"{"ordo-schema": 1, "keys": {"playlist.total": {"type": "int64"}, "playlist.mode": {"type": "string"}}}"#)
    try bus.replaceSchema(wider)
    bus.begin()
    _ = expectError(.schema, ["playlist.title"]) { try bus.set("playlist.title", .string("x")) }
    try bus.set("playlist.mode", .string("tile"))
    try bus.commit()
    try bus.replaceSchema(nil)
    try bus.transaction { () throws(OrdoError) in try bus.set("anything", .bool(true)) }
    // Handles and properties keep the rules they were made with.
    _ = try bus.resolve("anything")
    _ = expectError(.invalidArgument, ["handles or properties"]) { try bus.replaceSchema(wider) }
  }
}
