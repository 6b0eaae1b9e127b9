import Foundation
import Testing

@testable import Ordo

/// SPEC §5: the notification pass and its runtime rules.
@Suite struct PassTests {
  @Test func layersRunInOrder() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "log", reads: [])
    try bus.watch(calls, "content", reads: ["k"])
    try bus.watch(calls, "view-2", reads: ["k"], priority: 2)
    try bus.watch(calls, "view-1", reads: ["k"], priority: 1)
    try bus.watch(calls, "computed", reads: ["k"], priority: -1)
    try bus.watch(calls, "coordinate", reads: ["k"], priority: -2)
    try bus.watch(calls, "normalize", reads: ["k"], priority: -3)
    try bus.watch(calls, "content-2", reads: ["k"])
    try bus.commitWith { try bus.set("k", .int64(1)) }
    #expect(calls.takeNames() == ["normalize", "coordinate", "computed", "view-1", "view-2", "content", "content-2", "log"])
  }

  @Test func notificationCarriesIdsAndChangedKeypathsAsWritten() throws {
    let bus = Bus()
    let seen = Box<[ContractNotification]>([])
    let h = try bus.register(name: "c", reads: ["doc.items.*.name", "doc.title"]) { n in seen.mutate { $0.append(n) } }
    try bus.commitWith {
      try bus.set("doc.items.3.name", .string("x"))
      try bus.set("doc.items.3.size", .int64(1))
      try bus.set("doc.other", .int64(1))
    }
    try bus.commitWith { try bus.touch("doc") }
    #expect(seen.value == [
      ContractNotification(transaction: 1, contract: h.id, changed: ["doc.items.3.name"]),
      ContractNotification(transaction: 2, contract: h.id, changed: ["doc"]),
    ])
  }

  @Test func callbackWritesScheduleLaterContractsOnce() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "first", reads: ["a"], writes: ["b", "c"], priority: 1) { ctx in
      try ctx.set("b", .int64(1))
      try ctx.set("c", .int64(1))
    }
    try bus.watch(calls, "second", reads: ["a", "b"], writes: ["c"], priority: 2) { ctx in try ctx.set("c", .int64(2)) }
    try bus.watch(calls, "self-loop", reads: ["c"], writes: ["c"]) { ctx in try ctx.set("c", .int64(3)) }
    try bus.watch(calls, "content", reads: ["a", "b", "c"])
    #expect(try bus.commitWith { try bus.set("a", .int64(1)) } == 1)
    #expect(calls.take() == [
      Call(name: "first", changed: ["a"], txn: 1), Call(name: "second", changed: ["a", "b"], txn: 1),
      Call(name: "self-loop", changed: ["c"], txn: 1), Call(name: "content", changed: ["a", "b", "c"], txn: 1),
    ])
    #expect(try bus.value("c") == .int64(3))
    #expect(try bus.counter("c") == 1)
  }

  @Test func writeRulesAndTheirMessages() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("ui.a", .int64(1)) }
    let errors = Box<[OrdoError]>([])
    @Sendable func record(_ body: () throws -> Void) {
      do { try body() } catch let e as OrdoError { errors.mutate { $0.append(e) } } catch {}
    }
    try bus.register(name: "early", reads: ["ui.a"], priority: 1) { _ in }
    try bus.register(name: "layout", reads: ["go"], writes: ["ui.**", "t.*"], priority: 2) { ctx in
      record { try ctx.set("doc", .int64(1)) }
      record { try ctx.set("ui.a", .int64(1)) }  // equal value: still STABILITY
      record { try ctx.removeTree("t.x") }
      record { _ = try ctx.value("secret") }
      record { _ = try ctx.value("ui.b") }  // in the write set: allowed
    }
    try bus.commitWith { try bus.set("go", .bool(true)) }
    let e = errors.value
    #expect(e.map(\.code) == [.contractViolation, .stability, .contractViolation, .contractViolation])
    guard e.count == 4 else { return }
    #expect(e[0].message == "contract \"layout\" may not set \"doc\": its write set is [ui.**, t.*]")
    #expect(e[1].message == "contract \"layout\" may not set \"ui.a\": contract \"early\", placed before it in the pass, reads it")
    #expect(e[2].message.contains("removeTree \"t.x\"") && e[2].message.contains("\"t.x.**\""))
    #expect(e[3].message.contains("\"layout\"") && e[3].message.contains("\"secret\"") && e[3].message.contains("[go]"))
  }

  @Test func exactReaderMayNotReadChildren() throws {
    let bus = Bus()
    try bus.commitWith {
      try bus.set("doc", .int64(1))
      try bus.set("doc.title", .int64(2))
    }
    let results = Box<[OrdoError.Code?]>([])
    try bus.register(name: "r", reads: ["doc"]) { ctx in
      let bus = try ctx.bus()
      results.value = [
        codeOf { _ = try ctx.value("doc") }, codeOf { _ = try ctx.value("doc.title") },
        codeOf { _ = try ctx.counter("doc.title") }, codeOf { try bus.access("doc.title") },
        codeOf { _ = try ctx.snapshot(["doc.**"]) }, codeOf { _ = try ctx.snapshot(["doc"]) },
      ]
    }
    try bus.commitWith { try bus.touch("doc") }
    #expect(results.value == [nil, .contractViolation, .contractViolation, .contractViolation, .contractViolation, nil])
  }

  @Test func failingCallbackIsReportedAndThePassGoesOn() throws {
    let bus = Bus()
    let calls = Calls()
    let failures = Box<[ContractFailure]>([])
    let handlerThread = Box<Bool>(false)
    let testThread = pthread_self()
    bus.onFailure { [unowned bus] f in
      failures.mutate { $0.append(f) }
      handlerThread.value = pthread_equal(pthread_self(), testThread) != 0
      // The handler runs without the bus's lock: it may read.
      _ = try? bus.value("out")
    }
    let h = try bus.watch(calls, "fails", reads: ["in"], writes: ["out"], priority: 1) { ctx in
      try ctx.set("out", .int64(1))
      throw Boom()
    }
    try bus.watch(calls, "content", reads: ["out"])
    #expect(try bus.commitWith { try bus.set("in", .int64(1)) } == 1)
    #expect(calls.takeNames() == ["fails", "content"])
    let f = try #require(failures.value.first)
    #expect(failures.value.count == 1)
    #expect(f.name == "fails")
    #expect(f.contract == h.id)
    #expect(f.transaction == 1)
    #expect(f.message == "boom")
    #expect(handlerThread.value)
    // The failed callback's earlier writes stay.
    #expect(try bus.value("out") == .int64(1))
    #expect(try bus.counter("out") == 1)
    #expect(bus.statistics.failures == 1)
    #expect(bus.contract(h.id)?.failures == 1)
    #expect(bus.contract(h.id)?.calls == 1)
    // Without a handler the failure is still counted.
    bus.onFailure(nil)
    try bus.commitWith { try bus.set("in", .int64(2)) }
    #expect(bus.statistics.failures == 2)
    #expect(failures.value.count == 1)
  }

  @Test func notifyInitialOutsideAPass() throws {
    let bus = Bus()
    let calls = Calls()
    let idSeen = Box<ContractID>(0)
    let h = try bus.register(name: "first", reads: ["a"], flags: .notifyInitial) { ctx in
      let bus = try ctx.bus()
      calls.add("first", ctx.notification)
      idSeen.value = ctx.contract
      #expect(bus.currentContract == ctx.contract)
    }
    #expect(idSeen.value == h.id)
    #expect(calls.take() == [Call(name: "first", changed: [], txn: 0)])
    try bus.commitWith { try bus.set("a", .int64(1)) }
    _ = calls.take()
    try bus.watch(calls, "show-b", reads: ["b"])
    try bus.watch(calls, "derive", reads: ["a"], writes: ["b"], flags: .notifyInitial) { ctx in
      if ctx.changed.isEmpty { try ctx.set("b", .int64(2)) }
    }
    #expect(calls.take() == [Call(name: "derive", changed: [], txn: 1), Call(name: "show-b", changed: ["b"], txn: 2)])
    #expect(bus.transactionID == 2)
    #expect(try bus.counter("b") == 1)
    #expect(bus.currentContract == nil)
  }

  @Test func notifyInitialInsideAnInitialCallJoinsIt() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "show", reads: ["x", "y"])
    try bus.watch(calls, "outer", reads: ["a"], writes: ["x"], flags: .notifyInitial) { ctx in
      let bus = try ctx.bus()
      guard ctx.changed.isEmpty else { return }
      try ctx.set("x", .int64(1))
      try bus.watch(calls, "inner", reads: ["a"], writes: ["y"], flags: .notifyInitial) { ctx in
        if ctx.changed.isEmpty { try ctx.set("y", .int64(1)) }
      }
    }
    #expect(calls.take() == [
      Call(name: "outer", changed: [], txn: 0), Call(name: "inner", changed: [], txn: 0),
      Call(name: "show", changed: ["x", "y"], txn: 1),
    ])
    #expect(bus.transactionID == 1)
  }

  @Test func notifyInitialDuringAPass() throws {
    let bus = Bus()
    let calls = Calls()
    let refused = Box<OrdoError?>(nil)
    try bus.watch(calls, "root", reads: ["ui.mode"], priority: 1) { ctx in
      let bus = try ctx.bus()
      guard ctx.transaction == 1 else { return }
      try bus.watch(calls, "child", reads: ["ui.child"], priority: 2, flags: .notifyInitial)
      do {
        try bus.watch(calls, "past", reads: ["ui.child"], priority: 0, flags: .notifyInitial)
      } catch let e as OrdoError { refused.value = e }
    }
    try bus.watch(calls, "content", reads: ["ui.mode"])
    try bus.commitWith { try bus.set("ui.mode", .int64(1)) }
    #expect(calls.take() == [
      Call(name: "root", changed: ["ui.mode"], txn: 1), Call(name: "child", changed: [], txn: 1),
      Call(name: "content", changed: ["ui.mode"], txn: 1),
    ])
    #expect(refused.value?.code == .orderConflict)
    #expect(refused.value?.message.contains("\"past\"") == true)
    #expect(refused.value?.message.contains("\"root\"") == true)
    #expect(bus.contracts().map(\.name) == ["root", "child", "content"])
  }

  @Test func unregisterDuringAPass() throws {
    let bus = Bus()
    let calls = Calls()
    let ids = Box<[String: ContractID]>([:])
    let once = try bus.watch(calls, "once", reads: ["k"], priority: 1) { ctx in
      let bus = try ctx.bus()
      try bus.unregister(ctx.contract)
      if let v = ids.value["victim"] { try bus.unregister(v) }
    }
    ids.value["victim"] = try bus.watch(calls, "victim", reads: ["k"], priority: 2).id
    try bus.watch(calls, "content", reads: ["k"])
    try bus.commitWith { try bus.set("k", .int64(1)) }
    #expect(calls.takeNames() == ["once", "content"])
    try bus.commitWith { try bus.set("k", .int64(2)) }
    #expect(calls.takeNames() == ["content"])
    #expect(bus.contract(once.id) == nil)
  }

  /// A contract that unregisters itself keeps what its callback captures
  /// until the call returns, and lets it go when the pass ends (not with
  /// the bus), without the bus's lock: the captured object's deinit may use
  /// the bus.
  @Test func aContractUnregisteredInItsOwnCallKeepsItsCaptureUntilThePassEnds() throws {
    final class Captured: @unchecked Sendable {
      let gone: Box<[String]>
      let bus: Bus
      init(_ gone: Box<[String]>, _ bus: Bus) { self.gone = gone; self.bus = bus }
      deinit {
        // The bus is usable here: its lock is not held (the contract goes
        // when the pass has ended: the counter is the committed one, 1).
        let counter = (try? bus.counter("k")) ?? 0
        gone.mutate { $0.append("deinit, counter \(counter)") }
      }
    }
    let bus = Bus()
    let log = Box<[String]>([])
    var captured: Captured? = Captured(log, bus)
    try bus.register(name: "self-removing", reads: ["k"]) { [captured] ctx in
      try ctx.bus().unregister(ctx.contract)
      // Still alive after the unregistration, until the call returns.
      captured!.gone.mutate { $0.append("called") }
    }
    captured = nil
    try bus.commitWith { try bus.set("k", .int64(1)) }
    #expect(log.value == ["called", "deinit, counter 1"])
    try bus.commitWith { try bus.set("k", .int64(2)) }
    #expect(log.value == ["called", "deinit, counter 1"])
  }

  /// A pass reuses one notification for its calls and names a single
  /// keypath by its node: a copy kept by a callback is its own (later calls
  /// do not change it) and still names its keypaths after the bus is gone.
  @Test func aKeptNotificationOutlivesItsPassAndItsBus() throws {
    let kept = Box<[ContractNotification]>([])
    weak var gone: Bus?
    do {
      let bus = Bus()
      gone = bus
      try bus.register(name: "a", reads: ["doc.a"]) { n in kept.mutate { $0.append(n) } }
      try bus.register(name: "b", reads: ["doc.b"]) { n in kept.mutate { $0.append(n) } }
      try bus.register(name: "both", reads: ["doc.*"]) { n in kept.mutate { $0.append(n) } }
      try bus.register(name: "log", reads: []) { n in kept.mutate { $0.append(n) } }
      try bus.commitWith {
        try bus.set("doc.a", .int64(1))
        try bus.set("doc.b", .string("x"))
      }
      try bus.commitWith { try bus.set("doc.a", .int64(2)) }
    }
    #expect(gone == nil)
    let notes = kept.value
    #expect(notes.map(\.transaction) == [1, 1, 1, 1, 2, 2, 2])
    #expect(notes.map { Array($0.changed) } == [
      ["doc.a"], ["doc.b"], ["doc.a", "doc.b"], ["doc.a", "doc.b"], ["doc.a"], ["doc.a"], ["doc.a"],
    ])
    #expect(Set(notes[0..<4].map(\.contract)).count == 4)
    let changed = notes[4].changed
    #expect(changed == ["doc.a"] && changed.count == 1 && changed.description == "[\"doc.a\"]")
  }

  /// A keypath a transaction creates and a notification names stays named
  /// when the transaction is then refused by storage (which discards the
  /// keypaths it created): the kept notification still reads it, and the
  /// model is as before the transaction.
  @Test func aNotificationOfARefusedTransactionStillNamesItsNewKeypath() throws {
    let bus = Bus()
    let kept = Box<[ContractNotification]>([])
    try bus.register(name: "w", reads: ["fresh.*"]) { n in kept.mutate { $0.append(n) } }
    bus.setCommitHook { _, _ in throw OrdoError(.internal, "disk full") }
    expectError(.storage, ["transaction 1", "disk full"]) {
      try bus.commitWith { try bus.set("fresh.k", .int64(1)) }
    }
    bus.setCommitHook(nil)
    #expect(kept.value.count == 1)
    #expect(Array(kept.value[0].changed) == ["fresh.k"])
    #expect(try bus.value("fresh.k") == nil)
    #expect(try bus.counter("fresh.k") == 0)
    #expect(bus.transactionID == 0)
    #expect(try bus.snapshot(["**"]).values.isEmpty)
    #expect(try bus.changes(since: 0, ["**"]).removed.isEmpty)
    #expect(try bus.commitWith { try bus.set("fresh.k", .int64(2)) } == 1)
    #expect(kept.value.map { Array($0.changed) } == [["fresh.k"], ["fresh.k"]])
  }

  /// What an unregistered contract's callback captures goes at once outside
  /// a pass, and when the pass ends for a contract another one unregisters
  /// during it (it may still be scheduled); in both cases without the
  /// bus's lock, and not kept by the reader caches that still name it.
  @Test func anUnregisteredContractsCaptureGoesWithoutTheLock() throws {
    final class Captured: @unchecked Sendable {
      let log: Box<[String]>
      let bus: Bus
      let name: String
      init(_ log: Box<[String]>, _ bus: Bus, _ name: String) { self.log = log; self.bus = bus; self.name = name }
      deinit {
        let counter = (try? bus.counter("k")) ?? 0
        log.mutate { $0.append("\(name) gone, counter \(counter)") }
      }
    }
    let bus = Bus()
    let log = Box<[String]>([])
    var first: Captured? = Captured(log, bus, "first")
    var second: Captured? = Captured(log, bus, "second")
    // Two readers of "k": the node's reader cache lists both.
    let a = try bus.register(name: "a", reads: ["k"]) { [first] _ in first!.log.mutate { $0.append("a called") } }
    let b = try bus.register(name: "b", reads: ["k", "j"]) { [second] _ in second!.log.mutate { $0.append("b called") } }
    first = nil
    second = nil
    try bus.commitWith { try bus.set("k", .int64(1)) }
    #expect(log.value == ["a called", "b called"])
    // Outside a pass: at once.
    try bus.unregister(a.id)
    #expect(log.value == ["a called", "b called", "first gone, counter 1"])
    // During a pass, by another contract: when the pass has ended.
    let bID = b.id  // (a handle names its bus: captured, it would make a cycle)
    try bus.register(name: "remover", reads: ["k"], priority: -1) { ctx in try ctx.bus().unregister(bID) }
    try bus.commitWith { try bus.set("k", .int64(2)) }
    #expect(log.value == ["a called", "b called", "first gone, counter 1", "second gone, counter 2"])
  }

  @Test func everyTransactionContracts() throws {
    let bus = Bus()
    let calls = Calls()
    let reads = Box<[Value?]>([])
    let writeRefused = Box<OrdoError.Code?>(nil)
    try bus.commitWith { try bus.set("private", .int64(7)) }
    try bus.watch(calls, "autosave", reads: []) { ctx in
      reads.value = [try ctx.value("private"), try ctx.value("doc")]
      writeRefused.value = codeOf { try ctx.set("saved", .bool(true)) }
    }
    try bus.watch(calls, "view", reads: ["doc"], writes: ["ui.x"], priority: 1) { ctx in try ctx.set("ui.x", .int64(1)) }
    try bus.watch(calls, "undo", reads: [])
    try bus.commitWith {
      try bus.set("doc", .int64(1))
      try bus.set("other", .int64(1))
    }
    #expect(calls.take() == [
      Call(name: "view", changed: ["doc"], txn: 2), Call(name: "autosave", changed: ["doc", "other", "ui.x"], txn: 2),
      Call(name: "undo", changed: ["doc", "other", "ui.x"], txn: 2),
    ])
    #expect(reads.value == [.int64(7), .int64(1)])
    #expect(writeRefused.value == .contractViolation)
    #expect(try bus.commitWith {} == 0)
    #expect(calls.all.isEmpty)
  }

  @Test func callbacksMayCallBackIntoTheBus() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "busy", reads: ["k"], writes: ["out"]) { ctx in
      let bus = try ctx.bus()
      _ = bus.contracts()
      _ = bus.graph()
      _ = bus.statistics
      _ = bus.transactionID
      let h = try bus.register(name: "temp", reads: ["zzz"]) { _ in }
      try h.unregister()
      try ctx.set("out", .int64(1))
    }
    try bus.commitWith { try bus.set("k", .int64(1)) }
    #expect(calls.takeNames() == ["busy"])
    #expect(try bus.value("out") == .int64(1))
  }
}
