import Testing

@testable import Ordo

/// SPEC §2: values, net change, counters.
@Suite struct StoreTests {
  @Test func valuesOfEveryTypeRoundTrip() throws {
    let bus = Bus()
    let values: [String: Value] = [
      "v.bool": .bool(false), "v.int": .int64(.min), "v.double": .double(-0.0), "v.string": .string("ünï"),
      "v.bytes": .bytes([0, 255]), "v.empty": .bytes([]),
    ]
    let txn = try bus.commitWith { for (k, v) in values { try bus.set(k, v) } }
    #expect(txn == 1)
    for (k, v) in values {
      #expect(try bus.value(k) == v)
      #expect(try bus.value(k) == v)
      #expect(try bus.counter(k) == 1)
    }
    #expect(try bus.value("v.none") == nil)
    #expect(try bus.value("v.none") == nil)
    #expect(try bus.counter("v.none") == 0)
  }

  @Test func aKeypathHoldsAValueAndHasDescendants() throws {
    let bus = Bus()
    try bus.commitWith {
      try bus.set("doc", .string("root"))
      try bus.set("doc.title", .string("t"))
    }
    #expect(try bus.value("doc") == .string("root"))
    #expect(try bus.value("doc.title") == .string("t"))
    try bus.commitWith { try bus.remove("doc") }
    #expect(try bus.value("doc") == nil)
    #expect(try bus.value("doc.title") == .string("t"))
  }

  @Test func netChange() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "w", reads: ["**"])
    #expect(try bus.commitWith { try bus.set("k", .int64(1)) } == 1)
    #expect(try bus.commitWith { try bus.set("k", .int64(1)) } == 0)
    #expect(try bus.commitWith {
      try bus.set("k", .int64(2))
      try bus.set("k", .int64(1))
    } == 0)
    #expect(try bus.commitWith {
      try bus.set("new", .int64(2))
      try bus.remove("new")
    } == 0)
    #expect(try bus.commitWith {
      try bus.remove("absent")
      try bus.removeTree("absent")
    } == 0)
    #expect(try bus.commitWith { try bus.set("d", .double(0.0)) } == 2)
    #expect(try bus.commitWith { try bus.set("d", .double(-0.0)) } == 3)
    #expect(try bus.commitWith { try bus.set("d", .double(-0.0)) } == 0)
    #expect(try bus.commitWith { try bus.set("k", .double(1.0)) } == 4)
    #expect(calls.take() == [
      Call(name: "w", changed: ["k"], txn: 1), Call(name: "w", changed: ["d"], txn: 2),
      Call(name: "w", changed: ["d"], txn: 3), Call(name: "w", changed: ["k"], txn: 4),
    ])
    #expect(try bus.counter("k") == 2)
    #expect(try bus.counter("new") == 0)
  }

  @Test func countersRiseOncePerTransaction() throws {
    let bus = Bus()
    try bus.commitWith {
      try bus.set("c", .int64(1))
      try bus.touch("c")
      try bus.set("c", .int64(2))
      try bus.remove("c")
      try bus.set("c", .int64(3))
    }
    #expect(try bus.counter("c") == 1)
    try bus.commitWith { try bus.set("t.a", .int64(1)) }
    try bus.commitWith {
      try bus.touch("t.a")
      try bus.set("t.a", .int64(5))
      try bus.removeTree("t")
    }
    #expect(try bus.counter("t.a") == 2)
    #expect(try bus.counter("t") == 0)
  }

  @Test func removeTreeCountsEachRemovedDescendant() throws {
    let bus = Bus()
    try bus.commitWith {
      try bus.set("t.a", .int64(1))
      try bus.set("t.b.c", .int64(2))
      try bus.touch("t.b.d")
      try bus.set("tx", .int64(3))
    }
    let calls = Calls()
    try bus.watch(calls, "deep", reads: ["t.b.c"])
    #expect(try bus.commitWith { try bus.removeTree("t") } == 2)
    #expect(calls.take() == [Call(name: "deep", changed: ["t"], txn: 2)])
    #expect(try bus.counter("t.a") == 2)
    #expect(try bus.counter("t.b.c") == 2)
    #expect(try bus.counter("t.b.d") == 1)
    #expect(try bus.counter("t") == 0)
    #expect(try bus.counter("tx") == 1)
    #expect(try bus.value("t.a") == nil)
    #expect(try bus.value("tx") == .int64(3))
  }

  @Test func touchCountsOnlyItsKeypath() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("n.child", .int64(1)) }
    let calls = Calls()
    try bus.watch(calls, "child", reads: ["n.child"])
    #expect(try bus.commitWith { try bus.touch("n") } == 2)
    #expect(calls.take() == [Call(name: "child", changed: ["n"], txn: 2)])
    #expect(try bus.counter("n") == 1)
    #expect(try bus.counter("n.child") == 1)
    #expect(try bus.value("n") == nil)
  }

  @Test func normalizerCancellingEverythingKeepsTheId() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("k", .int64(1)) }
    let calls = Calls()
    try bus.watch(calls, "normalize", reads: ["k"], writes: ["k"], priority: -3) { ctx in try ctx.set("k", .int64(1)) }
    try bus.watch(calls, "content", reads: ["k"])
    try bus.watch(calls, "log", reads: [])
    #expect(try bus.commitWith { try bus.set("k", .int64(2)) } == 2)
    #expect(calls.takeNames() == ["normalize"])
    #expect(try bus.counter("k") == 1)
    #expect(bus.transactionID == 2)
    #expect(try bus.commitWith { try bus.set("j", .int64(2)) } == 3)
  }

  @Test func transactionsThatLeaveNothingLeaveNoNodes() throws {
    let bus = Bus()
    try bus.transaction { try bus.set("kept.a", .int64(1)) }
    let before = bus.nodeCount
    bus.begin()
    for i in 0..<1000 { try bus.set("tmp.k\(i).v", .int64(Int64(i))) }
    try bus.rollback()
    #expect(bus.nodeCount == before)
    // Set and removed again in one transaction: no change, no node.
    try bus.transaction {
      try bus.set("gone.x", .string("a"))
      try bus.remove("gone.x")
    }
    #expect(bus.nodeCount == before)
    #expect(try bus.snapshot(["**"]).values == ["kept.a": .int64(1)])
    // A committed change keeps its node (its counter must not go back).
    try bus.transaction {
      try bus.set("c.y", .int64(1))
      try bus.remove("c.y")
      try bus.touch("c.z")
    }
    #expect(try bus.counter("c.z") == 1)
    #expect(bus.nodeCount == before + 2)  // "c" and "c.z"
  }

  @Test func batchWritesAreAllOrNothing() throws {
    let bus = Bus()
    bus.begin()
    #expect(throws: OrdoError.self) {
      try bus.write([.set("a.x", .int64(1)), .touch("b..y"), .remove("c")])
    }
    #expect(try bus.commit() == 0)
    #expect(try bus.value("a.x") == nil)
    // The same new keypath twice in one batch: the second write sees the first.
    bus.begin()
    try bus.write([.set("n.k", .int64(1)), .set("n.k", .int64(2)), .set("t.a", .bool(true)), .removeTree("t")])
    #expect(try bus.commit() == 1)
    #expect(try bus.value("n.k") == .int64(2))
    #expect(try bus.value("t.a") == nil)
    // In a callback, one write outside the write set refuses the whole batch.
    let outcome = Flag()
    try bus.register(name: "w", reads: ["in"], writes: ["out.*"]) { ctx in
      let bus = try ctx.bus()
      do {
        try bus.write([.set("out.a", .int64(1)), .set("elsewhere", .int64(2))])
        outcome.set(true)
      } catch {
        outcome.set((error as? OrdoError)?.code == .contractViolation)
      }
    }
    try bus.transaction { try bus.set("in", .int64(1)) }
    #expect(outcome.value == true)
    #expect(try bus.value("out.a") == nil)
    #expect(try bus.counter("out.a") == 0)
  }
}
