import Testing

@testable import Ordo

/// SPEC §4: registration checks, their messages, levels.
@Suite struct RegistrationTests {
  @Test func cycleMessageNamesTheContracts() throws {
    let bus = Bus()
    try bus.register(name: "x", reads: ["p"], writes: ["q"]) { _ in }
    try bus.register(name: "y", reads: ["q"], writes: ["r"]) { _ in }
    let e = expectError(.cycle, ["\"z\"", "z → x → y → z"]) {
      try bus.register(name: "z", reads: ["r"], writes: ["p"]) { _ in }
    }
    #expect(e != nil)
    #expect(bus.contracts().map(\.name) == ["x", "y"])
  }

  @Test func cycleThroughPatterns() throws {
    let bus = Bus()
    try bus.register(name: "reads-g-a", reads: ["g.a.*"], writes: ["h"]) { _ in }
    expectError(.cycle, ["writes-g → reads-g-a → writes-g"]) {
      try bus.register(name: "writes-g", reads: ["h"], writes: ["g"]) { _ in }
    }
    // A self-loop is not a cycle.
    try bus.register(name: "self", reads: ["s.**"], writes: ["s.x"]) { _ in }
    #expect(bus.contract(try #require(bus.contracts().last?.id))?.level == 0)
  }

  @Test func orderConflictMessages() throws {
    let bus = Bus()
    try bus.register(name: "data-q", reads: ["in"], writes: ["q.**"]) { _ in }
    expectError(.orderConflict, ["\"prio\"", "\"q.x\"", "\"data-q\""]) {
      try bus.register(name: "prio", reads: ["q.x"], priority: 1) { _ in }
    }
    try bus.register(name: "early", reads: ["u"], priority: -2) { _ in }
    expectError(.orderConflict, ["\"late\"", "\"u\"", "\"early\""]) {
      try bus.register(name: "late", reads: ["v"], writes: ["u"], priority: 3) { _ in }
    }
    expectError(.orderConflict, ["\"data-u\"", "\"u\"", "\"early\""]) {
      try bus.register(name: "data-u", reads: ["v"], writes: ["u"]) { _ in }
    }
    try bus.register(name: "late-writer", reads: ["v"], writes: ["w"], priority: 3) { _ in }
    expectError(.orderConflict, ["\"early-reader\"", "\"w\"", "\"late-writer\""]) {
      try bus.register(name: "early-reader", reads: ["w"], priority: 1) { _ in }
    }
    // Wildcard writes are left to the stability rule.
    try bus.register(name: "late-wild", reads: ["v"], writes: ["u.**"], priority: 3) { _ in }
    #expect(bus.contracts().map(\.name) == ["early", "late-writer", "late-wild", "data-q"])
  }

  @Test func duplicateNames() throws {
    let bus = Bus()
    let h = try bus.register(name: "view", reads: ["a"]) { _ in }
    expectError(.duplicateName, ["\"view\""]) { try bus.register(name: "view", reads: ["b"], priority: 1) { _ in } }
    try h.unregister()
    expectError(.notFound) { try h.unregister() }
    let again = try bus.register(name: "view", reads: ["b"]) { _ in }
    #expect(again.id != h.id)
    try bus.unregister(named: "view")
    expectError(.notFound, ["\"view\""]) { try bus.unregister(named: "view") }
    expectError(.notFound, ["id 999"]) { try bus.unregister(999) }
  }

  @Test func nameLimits() throws {
    let bus = Bus()
    expectError(.invalidArgument, ["non-empty name"]) { try bus.register(name: "", reads: ["a"]) { _ in } }
    expectError(.invalidArgument, ["255 bytes"]) {
      try bus.register(name: String(repeating: "n", count: 256), reads: ["a"]) { _ in }
    }
    // Any other string is a valid name.
    try bus.register(name: String(repeating: "n", count: 255), reads: ["a"]) { _ in }
    try bus.register(name: "with spaces, \"quotes\" and ünïcode", reads: ["a"]) { _ in }
    #expect(bus.contracts().count == 2)
  }

  @Test func everyTransactionContractsMayNotWrite() throws {
    let bus = Bus()
    expectError(.invalidArgument, ["\"autosave\"", "empty read set", "saved"]) {
      try bus.register(name: "autosave", reads: [], writes: ["saved"]) { _ in }
    }
    let h = try bus.register(name: "autosave", reads: [], priority: 7) { _ in }
    let info = try #require(bus.contract(h.id))
    #expect(info.kind == .everyTransaction)
    #expect(info.priority == nil)
  }

  @Test func invalidPatterns() throws {
    let bus = Bus()
    expectError(.invalidKeypath, ["\"a..b\""]) { try bus.register(name: "c", reads: ["ok", "a..b"]) { _ in } }
    expectError(.invalidKeypath, ["\"x.**.y\""]) { try bus.register(name: "c", reads: ["ok"], writes: ["x.**.y"]) { _ in } }
    #expect(bus.contracts().isEmpty)
  }

  @Test func failedRegistrationChangesNothing() throws {
    let bus = Bus()
    let called = Box(0)
    try bus.register(name: "first", reads: ["x"]) { _ in }
    try bus.register(name: "second", reads: ["y"]) { _ in }
    try bus.register(name: "a", reads: ["p"], writes: ["q"]) { _ in }
    try bus.register(name: "prio", reads: ["pz"], priority: 1) { _ in }
    let before = bus.contracts()
    expectError(.cycle) {
      try bus.register(name: "bad", reads: ["q"], writes: ["x", "p"], flags: .notifyInitial) { _ in called.value += 1 }
    }
    expectError(.orderConflict) {
      try bus.register(name: "bad", reads: ["y"], writes: ["x", "pz"], flags: .notifyInitial) { _ in called.value += 1 }
    }
    #expect(bus.contracts() == before)
    #expect(called.value == 0)
    #expect(bus.statistics.contracts == 4)
    try bus.register(name: "bad", reads: ["q"], writes: ["z"]) { _ in }
  }

  /// SPEC §4: levels, including wildcard writers, own writes excluded.
  @Test func levels() throws {
    let bus = Bus()
    try bus.register(name: "show", reads: ["doc.a.count"]) { _ in }
    try bus.register(name: "exact", reads: ["doc"]) { _ in }
    try bus.register(name: "sum", reads: ["doc.*.count"], writes: ["total"]) { _ in }
    try bus.register(name: "total", reads: ["total", "s"]) { _ in }
    try bus.register(name: "loop", reads: ["s"], writes: ["s"]) { _ in }
    let fill = try bus.register(name: "fill", reads: ["src"], writes: ["doc.*.count"]) { _ in }
    func levels() -> [String: Int] { Dictionary(uniqueKeysWithValues: bus.contracts().map { ($0.name, $0.level) }) }
    #expect(levels() == ["show": 1, "exact": 0, "sum": 1, "total": 2, "loop": 0, "fill": 0])
    #expect(bus.contracts().map(\.name) == ["exact", "loop", "fill", "show", "sum", "total"])
    #expect(bus.contracts().map(\.position) == [0, 1, 2, 3, 4, 5])
    try fill.unregister()
    #expect(levels() == ["show": 0, "exact": 0, "sum": 0, "total": 1, "loop": 0])
  }

  /// A view registered while its model is being built renders once, with
  /// the finished model: in the transaction's pass, or after a transaction
  /// that changes nothing or is rolled back.
  @Test func anInitialCallInsideAnOpenTransactionHappensOnceForIt() throws {
    let bus = Bus()
    let calls = Calls()
    let seen = Box<[Value?]>([])
    bus.begin()
    try bus.set("doc.title", .string("draft"))
    try bus.watch(calls, "header", reads: ["doc.title"], flags: .notifyInitial) { ctx in
      seen.value.append(try ctx.value("doc.title"))
    }
    #expect(calls.all.isEmpty, "not called during registration")
    try bus.set("doc.title", .string("Songs"))
    let txn = try bus.commit()
    #expect(calls.take() == [Call(name: "header", changed: [], txn: txn)])
    #expect(seen.value == [.string("Songs")])

    bus.begin()
    try bus.watch(calls, "footer", reads: ["doc.title"], flags: .notifyInitial)
    #expect(try bus.commit() == 0)
    #expect(calls.take() == [Call(name: "footer", changed: [], txn: txn)])

    bus.begin()
    try bus.set("doc.title", .string("gone"))
    try bus.watch(calls, "sidebar", reads: ["doc.title"], flags: .notifyInitial) { ctx in
      seen.value.append(try ctx.value("doc.title"))
    }
    try bus.rollback()
    #expect(calls.take() == [Call(name: "sidebar", changed: [], txn: txn)])
    #expect(seen.value.last == .string("Songs"))
  }

  /// A contract registered with an initial call in an open transaction and
  /// unregistered before its commit is released at once, never called.
  @Test func anAwaitedInitialCallUnregisteredBeforeTheCommitIsReleasedAtOnce() throws {
    let bus = Bus()
    final class Captured: Sendable {}
    var captured: Captured? = Captured()
    weak let gone = captured
    let calls = Box<Int>(0)
    bus.begin()
    let h = try bus.register(name: "view", reads: ["doc.title"], flags: .notifyInitial) { [captured] _ in
      withExtendedLifetime(captured) { calls.value += 1 }
    }
    captured = nil
    try h.unregister()
    #expect(gone == nil, "released by unregister")
    try bus.set("doc.title", .string("a"))
    try bus.commit()
    #expect(calls.value == 0)
  }
}
