import Foundation
import Testing

@testable import Ordo

/// The Swift-only introspection API: contracts(), graph(), statistics,
/// snapshot, values(of:), transactionID, and reads from other threads.
@Suite struct IntrospectionTests {
  @Test func contractInfo() throws {
    let bus = Bus()
    let h = try bus.register(name: "c", reads: ["a", "b", "list.*"], writes: ["x", "y.**"], priority: 2) { ctx in
      _ = try ctx.value("a")
      _ = try ctx.counter("list.3")
      _ = try ctx.value("x")  // a read within the write set is not a use of a read pattern
      try ctx.set("y.z", .int64(1))
    }
    try bus.register(name: "d", reads: ["y.z"]) { _ in }
    var info = try #require(bus.contract(h.id))
    #expect(info.name == "c")
    #expect(info.kind == .priority)
    #expect(info.reads == ["a", "b", "list.*"])
    #expect(info.writes == ["x", "y.**"])
    #expect(info.priority == 2)
    #expect(info.level == 0)
    #expect(info.position == 0)
    #expect(info.calls == 0)
    #expect(info.lastTransaction == 0)
    #expect(info.unusedReads == ["a", "b", "list.*"])
    #expect(info.unusedWrites == ["x", "y.**"])
    try bus.commitWith { try bus.set("a", .int64(1)) }
    try bus.commitWith { try bus.set("unrelated", .int64(1)) }
    info = try #require(bus.contract(h.id))
    #expect(info.calls == 1)
    #expect(info.lastTransaction == 1)
    #expect(info.failures == 0)
    #expect(info.unusedReads == ["b"])
    #expect(info.unusedWrites == ["x"])
    let d = try #require(bus.contracts().last)
    #expect(d.name == "d")
    #expect(d.kind == .data)
    #expect(d.priority == nil)
    #expect(d.position == 1)
    #expect(d.calls == 1)
  }

  /// Reads through a scope's values and a snapshot count as reads of the
  /// patterns they cover or fall under.
  @Test func readsThroughScopesAndSnapshotsCount() throws {
    let bus = Bus()
    let items = try bus.scope("doc.items")
    let h = try bus.register(name: "list", reads: ["doc.items.**", "doc.title", "doc.count", "doc.other"]) { (ctx: ContractContext) in
      _ = try items.values()
      _ = try ctx.snapshot(["doc.title"])
      _ = try ctx.bus().changes(since: 0, ["doc.count"])
    }
    try bus.transaction { try bus.set("doc.items.1", .int64(1)) }
    #expect(try #require(bus.contract(h.id)).unusedReads == ["doc.other"])
  }

  /// Order conflicts that only wildcard writes make, listed before any
  /// pass runs into them.
  @Test func lintListsWritesThatMayBreakStability() throws {
    let bus = Bus()
    try bus.register(name: "header", reads: ["ui.title", "doc.name"], priority: 1) { _ in }
    try bus.register(name: "list", reads: ["ui.list.*"], priority: 2) { _ in }
    try bus.register(name: "layout", reads: ["doc.layout"], writes: ["ui.**"], priority: 3) { _ in }
    try bus.register(name: "rows", reads: ["doc.rows"], writes: ["ui.*"], priority: 4) { _ in }
    try bus.register(name: "count", reads: ["doc.rows"], writes: ["doc.count"]) { _ in }
    let findings = bus.lint()
    #expect(findings.map { "\($0.earlier) \($0.reads) \($0.later) \($0.writes) \($0.keypath)" } == [
      "header ui.title layout ui.** ui.title",
      "header ui.title rows ui.* ui.title",
      "list ui.list.* layout ui.** ui.list.x",
      "list ui.list.* rows ui.* ui.list",
    ])
    for f in findings {
      #expect(try Pattern(f.writes).matches(f.keypath) && Pattern(f.reads).isAffected(byWriteTo: f.keypath))
    }
    #expect(findings[0].description == "contract \"layout\" may write \"ui.title\" (its write pattern \"ui.**\"), which contract \"header\", placed before it in the pass, reads (its read pattern \"ui.title\"): that write would fail with STABILITY")
    // What lint finds is what a pass refuses.
    try bus.register(name: "writer", reads: ["go"], writes: ["ui.**"], priority: 5) { (ctx: ContractContext) in try ctx.set("ui.title", .int64(1)) }
    let failed = Box<[String]>([])
    bus.onFailure { failed.value.append($0.message) }
    try bus.transaction { try bus.set("go", .bool(true)) }
    #expect(failed.value.count == 1 && failed.value[0].contains("STABILITY"))
    #expect(bus.lint().contains { $0.later == "writer" && $0.earlier == "header" && $0.keypath == "ui.title" })
    #expect(Bus().lint().isEmpty)
  }

  @Test func graphIsDOT() throws {
    let bus = Bus()
    try bus.register(name: "view", reads: ["doc"], writes: ["ui.**"], priority: 1) { _ in }
    try bus.register(name: "calc", reads: ["in"], writes: ["doc.count"]) { _ in }
    try bus.register(name: "show", reads: ["doc.count"]) { _ in }
    try bus.register(name: "log", reads: []) { _ in }
    try bus.register(name: "say \"hi\"\\", reads: ["q"]) { _ in }
    let dot = bus.graph()
    #expect(dot.hasPrefix("digraph ordo {\n"))
    #expect(dot.hasSuffix("}\n"))
    #expect(dot.contains("\"c:view\" [shape=box, label=\"#0 view\\npriority 1\"];"))
    #expect(dot.contains("\"c:calc\" [shape=box, label=\"#1 calc\\nlevel 0\"];"))
    #expect(dot.contains("\"c:show\" [shape=box, label=\"#3 show\\nlevel 1\"];"))
    #expect(dot.contains("\"c:log\" [shape=box, label=\"#4 log\\nevery transaction\"];"))
    #expect(dot.contains("\"k:doc\" -> \"c:view\";"))
    #expect(dot.contains("\"c:view\" -> \"k:ui.**\" [style=bold];"))
    #expect(dot.contains("\"c:calc\" -> \"k:doc.count\" [style=bold];"))
    #expect(dot.contains("\"k:doc.count\" -> \"c:show\";"))
    #expect(dot.contains("\"c:say \\\"hi\\\"\\\\\""))
    #expect(dot.components(separatedBy: "[shape=ellipse").count - 1 == 5)
  }

  @Test func statistics() throws {
    let bus = Bus()
    try bus.register(name: "a", reads: ["k"]) { _ in }
    try bus.register(name: "b", reads: []) { _ in throw Boom() }
    try bus.commitWith {
      try bus.set("k", .int64(1))
      try bus.set("j", .int64(1))
    }
    bus.begin()
    try bus.set("k", .int64(2))
    try bus.rollback()
    try bus.commitWith { try bus.set("j", .int64(2)) }
    #expect(bus.statistics == BusStatistics(contracts: 2, transactions: 2, notifications: 3, failures: 2, rollbacks: 1, conflicts: 0, values: 2, ownedValues: 0))
  }

  /// Each contract counts its own failed calls; a contract registered
  /// again under the name of one that failed starts from none.
  @Test func failuresPerContract() throws {
    let bus = Bus()
    let a = try bus.register(name: "a", reads: ["k"]) { _ in }
    let b = try bus.register(name: "b", reads: ["k"]) { _ in throw Boom() }
    for i in 1...3 { try bus.commitWith { try bus.set("k", .int64(Int64(i))) } }
    #expect(bus.contract(a.id)?.failures == 0 && bus.contract(a.id)?.calls == 3)
    #expect(bus.contract(b.id)?.failures == 3 && bus.contract(b.id)?.calls == 3)
    try bus.unregister(b.id)
    let again = try bus.register(name: "b", reads: ["k"]) { _ in }
    try bus.commitWith { try bus.set("k", .int64(4)) }
    #expect(bus.contract(again.id)?.failures == 0 && bus.contract(again.id)?.calls == 1)
    #expect(bus.contractGraph.failures.isEmpty, "an unregistered contract's count goes with it")
  }

  @Test func snapshotReadsOneMoment() throws {
    let bus = Bus()
    try bus.commitWith {
      try bus.set("doc.a", .int64(1))
      try bus.set("doc.b.c", .int64(2))
      try bus.touch("doc.t")
      try bus.set("other", .int64(3))
    }
    let s = try bus.snapshot(["doc.**"])
    #expect(s.values == ["doc.a": .int64(1), "doc.b.c": .int64(2)])
    #expect(s.counters == ["doc.a": 1, "doc.b.c": 1, "doc.t": 1])
    #expect(s.transaction == 1)
    #expect(try bus.snapshot(["doc.*", "other"]).values == ["doc.a": .int64(1), "other": .int64(3)])
    #expect(try bus.snapshot(["**"]).values.count == 3)
    expectError(.invalidKeypath) { _ = try bus.snapshot(["doc.**.x"]) }
  }

  @Test func valuesOfANotification() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("doc.gone", .int64(0)) }
    let got = Box<[String: Value]>([:])
    try bus.register(name: "c", reads: ["doc.**"]) { ctx in got.value = try ctx.changedValues() }
    try bus.commitWith {
      try bus.set("doc.a", .string("x"))
      try bus.touch("doc.t")
      try bus.remove("doc.gone")
    }
    #expect(got.value == ["doc.a": .string("x")])
  }

  /// Decision: a thread that does not own the running transaction reads the
  /// committed state.
  @Test func otherThreadsSeeCommittedValuesDuringATransaction() throws {
    let bus = Bus()
    try bus.commitWith {
      try bus.set("k", .int64(1))
      try bus.set("gone", .int64(1))
    }
    bus.begin()
    try bus.set("k", .int64(2))
    try bus.set("new", .int64(2))
    try bus.remove("gone")
    #expect(try bus.value("k") == .int64(2))
    let seen = Box<[String]>([])
    runThreads(1) { _ in
      let s = try? bus.snapshot(["**"])
      seen.value = [
        "\(String(describing: try? bus.value("k")))", "\(String(describing: try? bus.value("new")))",
        "\(String(describing: try? bus.value("gone")))", "\(s.map { $0.values.count } ?? -1)",
        "\(s.map { $0.transaction } ?? 99)", "\(bus.transactionID)",
      ]
    }
    #expect(seen.value == [
      "Optional(int64 1)", "nil", "Optional(int64 1)", "2", "1", "1",
    ])
    #expect(try bus.commit() == 2)
    runThreads(1) { _ in seen.value = ["\(String(describing: try? bus.value("k")))"] }
    #expect(seen.value == ["Optional(int64 2)"])
  }

  /// Decision: during a pass, other threads see the committed state and the
  /// last committed id, not the id of the pass that is running.
  @Test func otherThreadsSeeTheLastCommittedIdDuringAPass() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("k", .int64(1)) }
    let inside = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let inPassID = Box<UInt64>(0)
    try bus.register(name: "slow", reads: ["k"]) { ctx in
      let bus = try ctx.bus()
      inPassID.value = bus.transactionID
      inside.signal()
      release.wait()
    }
    let seen = Box<[String]>([])
    let reader = Thread {
      inside.wait()
      let s = try? bus.snapshot(["k"])
      seen.value = [
        "\(bus.transactionID)", "\(s?.transaction ?? 99)", "\(s?.values["k"].map(\.description) ?? "-")",
        "\(s?.counters["k"] ?? 99)", "\((try? bus.counter("k")) ?? 99)", "\(bus.statistics.transactions)",
      ]
      release.signal()
    }
    reader.start()
    #expect(try bus.commitWith { try bus.set("k", .int64(2)) } == 2)
    #expect(seen.value == ["1", "1", "int64 1", "1", "1", "1"])
    #expect(inPassID.value == 2)
    #expect(bus.transactionID == 2)
  }
}
