import Testing

@testable import Ordo

/// Handles (SPEC §13) through the Swift API: resolution, every operation,
/// the rules they obey like strings, and their lifetime.
@Suite struct HandleTests {
  @Test func resolveValidatesAndWritesNothing() throws {
    let bus = Bus()
    expectError(.invalidKeypath, ["a..b"]) { _ = try bus.resolve("a..b") }
    expectError(.invalidKeypath) { _ = try bus.resolve("doc.*") }
    let h = try bus.resolve("doc.title")
    #expect(h.keypath == "doc.title")
    #expect(try bus.resolve("doc.title") == h)
    #expect(try bus.resolve("doc.other") != h)
    #expect(try bus.value("doc.title") == nil)
    #expect(try bus.counter(h) == 0)
    #expect(bus.transactionID == 0)
    #expect(try bus.snapshot(["**"]).values.isEmpty)
    expectError(.noTransaction) { try bus.set(h, .int64(1)) }
  }

  @Test func everyOperationMatchesTheStringAPI() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "doc", reads: ["doc.**"])
    let title = try bus.resolve("doc.title")
    let count = try bus.resolve("doc.count")
    let tree = try bus.resolve("doc.items")
    #expect(try bus.commitWith {
      try bus.set(title, .string("Songs"))
      try bus.set(count, .int64(3))
      try bus.set("doc.items.1", .bool(true))
    } == 1)
    #expect(try bus.value(title) == .string("Songs"))
    #expect(try bus.value("doc.count") == .int64(3))
    #expect(calls.take() == [Call(name: "doc", changed: ["doc.title", "doc.count", "doc.items.1"], txn: 1)])
    // Net change through a handle: equal value and round trip change nothing.
    #expect(try bus.commitWith {
      try bus.set(count, .int64(3))
      try bus.set(title, .string("x"))
      try bus.set(title, .string("Songs"))
    } == 0)
    #expect(calls.take().isEmpty)
    #expect(try bus.commitWith {
      try bus.touch(title)
      try bus.remove(count)
      try bus.removeTree(tree)
    } == 2)
    #expect(calls.take() == [Call(name: "doc", changed: ["doc.title", "doc.count", "doc.items"], txn: 2)])
    #expect(try bus.value(count) == nil)
    #expect(try bus.value(count) == nil)
    #expect(try bus.counter(count) == 2)
    #expect(try bus.counter("doc.items.1") == 2)
    #expect(try bus.changedAt("doc.count") == 2)
  }

  @Test func aHandleOfAnotherBusIsRefused() throws {
    let a = Bus()
    let b = Bus()
    let h = try a.resolve("k")
    b.begin()
    expectError(.invalidArgument, ["another bus"]) { try b.set(h, .int64(1)) }
    expectError(.invalidArgument) { _ = try b.value(h) }
    #expect(try b.commit() == 0)
  }

  @Test func aHandleOutlivesItsBusWithoutKeepingItAlive() throws {
    var a: Bus? = Bus()
    weak let gone = a
    let h = try a!.resolve("doc.items.3.title")
    let same = try a!.resolve("doc.items.3.title")
    let other = try a!.resolve("doc.items.3")
    #expect(h == same && Set([h, same, other]).count == 2)
    a = nil
    #expect(gone == nil)
    // The handle still names its keypath (the bus's link keeps its node),
    // and another bus refuses it by that name.
    #expect(h.keypath == "doc.items.3.title" && "\(other)" == "doc.items.3")
    let b = Bus()
    b.begin()
    expectError(.invalidArgument, ["\"doc.items.3.title\"", "another bus"]) { try b.set(h, .int64(1)) }
    expectError(.invalidArgument, ["another bus"]) { _ = try b.counter(h) }
    #expect(try b.commit() == 0)
    #expect(try b.value("doc.items.3.title") == nil)
  }

  @Test func callbacksObeyTheirContractThroughHandles() throws {
    let bus = Bus()
    let stable = try bus.resolve("st.able")
    let out = try bus.resolve("out.x")
    let secret = try bus.resolve("secret")
    let codes = Box<[OrdoError.Code?]>([])
    try bus.register(name: "early", reads: ["in", "st.able"], priority: -3) { _ in }
    try bus.register(name: "writer", reads: ["in"], writes: ["out.*", "st.*"], priority: 1) { [unowned bus] _ in
      codes.value.append(codeOf { try bus.set(out, .int64(42)) })
      codes.value.append(codeOf { try bus.set(secret, .int64(1)) })
      codes.value.append(codeOf { try bus.set(stable, .int64(1)) })
      codes.value.append(codeOf { _ = try bus.value(secret) })
      codes.value.append(codeOf { _ = try bus.counter(out) })
    }
    try bus.commitWith { try bus.set("in", .bool(true)) }
    #expect(codes.value == [nil, .contractViolation, .stability, .contractViolation, nil])
    #expect(try bus.value(out) == .int64(42))
    #expect(try bus.counter(stable) == 0)
  }

  @Test func aHandleKeepsItsKeypathThroughRollbacksAndPrunes() throws {
    let bus = Bus()
    let before = bus.nodeCount
    let h = try bus.resolve("a.b.c")
    bus.begin()
    try bus.set(h, .int64(1))
    try bus.rollback()
    // The node stays (a handle names it), its ancestors with it.
    #expect(bus.nodeCount == before + 3)
    try bus.commitWith { try bus.set(h, .int64(2)) }
    #expect(try bus.value("a.b.c") == .int64(2))
  }

  @Test func aCallbackCapturingAHandleDoesNotKeepTheBusAlive() throws {
    weak var weakBus: Bus?
    do {
      let bus = Bus()
      weakBus = bus
      let h = try bus.resolve("k")
      let seen = Box<Int>(0)
      try bus.register(name: "c", reads: ["k"]) { _ in seen.value += 1 }
      try bus.register(name: "d", reads: ["k"]) { _ in _ = h.keypath }
      try bus.commitWith { try bus.set(h, .int64(1)) }
      #expect(seen.value == 1)
    }
    #expect(weakBus == nil)
  }
}

/// Resynchronization in the core (SPEC §10): changed-at, tombstones, the
/// epoch, changes(since:), and the persistence hooks.
@Suite struct ResyncTests {
  @Test func epochIsAUUIDPerBus() {
    let a = Bus().epoch
    let b = Bus().epoch
    #expect(a != b)
    #expect(a.count == 36)
    #expect(a.split(separator: "-").map(\.count) == [8, 4, 4, 4, 12])
    #expect(a[a.index(a.startIndex, offsetBy: 14)] == "4")
  }

  @Test func changesSinceReportsValuesTombstonesAndCounters() throws {
    let bus = Bus()
    try bus.commitWith {
      try bus.set("doc.a", .int64(1))
      try bus.set("doc.b", .int64(2))
      try bus.set("other", .int64(3))
    }
    try bus.commitWith {
      try bus.set("doc.a", .int64(10))
      try bus.remove("doc.b")
      try bus.touch("doc.t")
    }
    #expect(try bus.changedAt("doc.a") == 2)
    #expect(try bus.changedAt("other") == 1)
    #expect(try bus.changedAt("never") == 0)
    let all = try bus.changes(since: 0, ["**"])
    #expect(all.values == ["doc.a": .int64(10), "other": .int64(3)])
    #expect(all.removed == ["doc.b", "doc.t"])
    #expect(all.counters == ["doc.a": 2, "doc.b": 2, "doc.t": 1, "other": 1])
    #expect(all.transaction == 2)
    let since1 = try bus.changes(since: 1, ["doc.*"])
    #expect(since1.values == ["doc.a": .int64(10)])
    #expect(since1.removed == ["doc.b", "doc.t"])
    #expect(try bus.changes(since: 2, ["**"]) == Changes(transaction: 2))
    expectError(.invalidArgument, ["transaction 3", "another epoch"]) { _ = try bus.changes(since: 3, ["**"]) }
    expectError(.invalidKeypath) { _ = try bus.changes(since: 0, ["a..b"]) }
  }

  @Test func changesSeeOnlyWhatIsCommitted() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("k", .int64(1)) }
    bus.begin()
    try bus.set("k", .int64(2))
    try bus.set("n", .int64(1))
    let c = try bus.changes(since: 0, ["**"])
    #expect(c.values == ["k": .int64(1)])
    #expect(c.transaction == 1)
    try bus.rollback()
  }

  @Test func changesInACallbackObeyTheReadSet() throws {
    let bus = Bus()
    let codes = Box<[OrdoError.Code?]>([])
    try bus.register(name: "c", reads: ["doc.**"]) { [unowned bus] _ in
      codes.value.append(codeOf { _ = try bus.changes(since: 0, ["doc.a"]) })
      codes.value.append(codeOf { _ = try bus.changes(since: 0, ["**"]) })
    }
    try bus.commitWith { try bus.set("doc.a", .int64(1)) }
    #expect(codes.value == [nil, .contractViolation])
  }

  @Test func theCommitHookSeesEachTransactionAndMayRefuseIt() throws {
    let bus = Bus()
    let seen = Box<[(UInt64, [KeyState])]>([])
    let refuse = Box(false)
    let calls = Calls()
    try bus.watch(calls, "w", reads: ["k"])
    bus.setCommitHook { txn, changes in
      if refuse.value { throw OrdoError(.internal, "disk full") }
      seen.value.append((txn, changes))
    }
    try bus.commitWith {
      try bus.set("k", .int64(1))
      try bus.touch("t")
    }
    #expect(seen.value.count == 1)
    #expect(seen.value[0].0 == 1)
    #expect(Set(seen.value[0].1) == [
      KeyState(keypath: "k", value: .int64(1), counter: 1, changedAt: 1), KeyState(keypath: "t", value: nil, counter: 1, changedAt: 1),
    ])
    refuse.value = true
    let undone = Box(false)
    expectError(.storage, ["transaction 2", "disk full"]) {
      try bus.commitWith {
        try bus.set("k", .int64(2))
        try bus.onRollback { undone.value = true }
      }
    }
    // Nothing of it was applied; the pass ran (its callbacks were called).
    #expect(try bus.value("k") == .int64(1))
    #expect(try bus.counter("k") == 1)
    #expect(bus.transactionID == 1)
    #expect(undone.value)
    #expect(calls.take().map(\.txn) == [1, 2])
    refuse.value = false
    #expect(try bus.commitWith { try bus.set("k", .int64(3)) } == 2)
    bus.setCommitHook(nil)
  }

  @Test func restoreReplacesTheModel() throws {
    let bus = Bus()
    let h = try bus.resolve("kept")
    try bus.commitWith { try bus.set("old", .int64(1)) }
    try bus.restore(
      epoch: "e-1", lastTransaction: 7,
      keypaths: [
        KeyState(keypath: "a.b", value: .string("x"), counter: 3, changedAt: 7),
        KeyState(keypath: "gone", value: nil, counter: 2, changedAt: 5),
      ])
    #expect(bus.epoch == "e-1")
    #expect(bus.transactionID == 7)
    #expect(try bus.value("old") == nil)
    #expect(try bus.counter("old") == 0)
    #expect(try bus.value("a.b") == .string("x"))
    #expect(try bus.counter("a.b") == 3)
    #expect(try bus.changes(since: 4, ["**"]).removed == ["gone"])
    #expect(try bus.value(h) == nil)
    #expect(try bus.commitWith { try bus.set(h, .int64(1)) } == 8)
    expectError(.invalidArgument, ["after the last transaction"]) {
      try bus.restore(epoch: "e", lastTransaction: 1, keypaths: [KeyState(keypath: "x", value: nil, counter: 1, changedAt: 2)])
    }
    expectError(.invalidKeypath) {
      try bus.restore(epoch: "e", lastTransaction: 1, keypaths: [KeyState(keypath: "x..y", value: nil, counter: 1, changedAt: 1)])
    }
    #expect(bus.epoch == "e-1")
    bus.begin()
    expectError(.invalidArgument) { try bus.restore(epoch: "e", lastTransaction: 0, keypaths: []) }
    try bus.rollback()
  }
}
