import Testing

@testable import Ordo

/// HostedProperty: a host-owned value that takes part in the bus like a
/// stored one.
@Suite struct HostedPropertyTests {
  @Test func invalidKeypath() {
    let bus = Bus()
    expectError(.invalidKeypath) { _ = try HostedProperty(bus: bus, keypath: "doc..title", initial: 0) }
  }

  @Test func setTouchesItsKeypath() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "title", reads: ["doc.title"])
    try bus.watch(calls, "tree", reads: ["doc.**"])
    let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "")
    #expect(try title.get() == "")
    #expect(try bus.transaction { try title.set("Songs") } == 1)
    #expect(try title.get() == "Songs")
    #expect(calls.take() == [Call(name: "title", changed: ["doc.title"], txn: 1), Call(name: "tree", changed: ["doc.title"], txn: 1)])
    #expect(try bus.counter("doc.title") == 1)
    // No value is stored in the bus.
    #expect(try bus.value("doc.title") == nil)
    // Several sets in one transaction: one change.
    try bus.transaction {
      try title.set("A")
      try title.set("B")
    }
    #expect(try bus.counter("doc.title") == 2)
    #expect(calls.take().count == 2)
  }

  @Test func equalSetIsNoChange() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "title", reads: ["doc.title"])
    let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "same")
    #expect(try bus.transaction { try title.set("same") } == 0)
    #expect(calls.all.isEmpty)
    #expect(try bus.counter("doc.title") == 0)
  }

  /// Decision: a → x → a on a hosted property is a change (each set touches;
  /// the host value has no committed copy to compare with).
  @Test func roundTripIsAChange() throws {
    let bus = Bus()
    let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "a")
    #expect(try bus.transaction {
      try title.set("x")
      try title.set("a")
    } == 1)
  }

  @Test func setFollowsTheWriteRulesEvenForAnEqualValue() throws {
    let bus = Bus()
    let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "same")
    expectError(.noTransaction) { try title.set("other") }
    expectError(.noTransaction) { try title.set("same") }
    #expect(try title.get() == "same")
    let results = Box<[OrdoError.Code?]>([])
    try bus.register(name: "early", reads: ["doc.title"], priority: 1) { _ in }
    try bus.register(name: "reader", reads: ["go"], writes: ["doc.*"], priority: 2) { _ in
      results.value = [codeOf { try title.set("same") }, codeOf { try title.set("new") }]
    }
    try bus.register(name: "other", reads: ["go", "doc.title"], writes: ["elsewhere"], priority: 3) { _ in
      results.mutate { $0 += [codeOf { try title.set("same") }, codeOf { try title.set("new") }] }
    }
    try bus.transaction { try bus.set("go", .bool(true)) }
    #expect(results.value == [.stability, .stability, .contractViolation, .contractViolation])
    #expect(try title.get() == "same")
    #expect(try bus.counter("doc.title") == 0)
  }

  @Test func readsAreCheckedInCallbacks() throws {
    let bus = Bus()
    let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "t")
    let count = try HostedProperty(bus: bus, keypath: "doc.count", initial: 3)
    let results = Box<[String]>([])
    let h = try bus.register(name: "c", reads: ["doc.title", "go"]) { _ in
      results.value = [
        (try? title.get()) ?? "refused", (try? count.get()).map(String.init) ?? "refused",
      ]
    }
    try bus.transaction { try bus.set("go", .bool(true)) }
    #expect(results.value == ["t", "refused"])
    #expect(bus.contract(h.id)?.unusedReads == ["go"])
  }

  @Test func writesInACallbackScheduleLaterContracts() throws {
    let bus = Bus()
    let calls = Calls()
    let count = try HostedProperty(bus: bus, keypath: "doc.count", initial: 0)
    try bus.watch(calls, "compute", reads: ["doc.items"], writes: ["doc.count"], priority: -1) { _ in try count.set(2) }
    try bus.watch(calls, "show", reads: ["doc.count"])
    try bus.transaction { try bus.set("doc.items", .string("a,b")) }
    #expect(calls.take() == [Call(name: "compute", changed: ["doc.items"], txn: 1), Call(name: "show", changed: ["doc.count"], txn: 1)])
    #expect(try count.get() == 2)
  }

  @Test func rollbackRestores() throws {
    let bus = Bus()
    let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "old")
    bus.begin()
    try title.set("new")
    try title.set("newer")
    #expect(try title.get() == "newer")
    try bus.rollback()
    #expect(try title.get() == "old")
    #expect(try bus.counter("doc.title") == 0)
    #expect(throws: Boom.self) {
      try bus.transaction {
        try title.set("again")
        throw Boom()
      }
    }
    #expect(try title.get() == "old")
  }

  /// Decision: host values have no committed copy; other threads see the
  /// host's current value.
  @Test func otherThreadsSeeTheHostValue() throws {
    let bus = Bus()
    let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "old")
    bus.begin()
    try title.set("new")
    let seen = Box<String>("")
    runThreads(1) { _ in seen.value = (try? title.get()) ?? "error" }
    #expect(seen.value == "new")
    try bus.commit()
  }
}
