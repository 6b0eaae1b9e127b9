import Testing

@testable import Ordo

/// Pass traces (devtools, `docs/devtools.md`): what each step records.
@Suite struct TraceTests {
  @Test func aTraceShowsCallsSkipsWritesRefusalsAndFailures() throws {
    let bus = Bus()
    let traces = Box<[PassTrace]>([])
    bus.onTrace { t in traces.mutate { $0.append(t) } }
    struct Boom: Error {}
    try bus.register(name: "norm", reads: ["doc.title"], writes: ["doc.title", "doc.*"], priority: -3) { [unowned bus] _ in
      try bus.set("doc.title", .string("old"))  // writes it back: "view" has nothing left
      _ = try? bus.set("elsewhere", .int64(1))  // refused
    }
    try bus.register(name: "view", reads: ["doc.title"]) { _ in }
    try bus.register(name: "bad", reads: ["doc.count"]) { _ in throw Boom() }
    let gone = try bus.register(name: "gone", reads: ["doc.count"]) { _ in }.id
    try bus.register(name: "remover", reads: ["doc.count"], priority: -1) { [unowned bus] _ in try bus.unregister(gone) }
    try bus.register(name: "log", reads: []) { _ in }
    try bus.commitWith { try bus.set("doc.title", .string("old")) }
    traces.value = []
    try bus.commitWith {
      try bus.set("doc.title", .string("new"))
      try bus.set("doc.count", .int64(2))
    }
    let t = try #require(traces.value.first)
    #expect(traces.value.count == 1)
    #expect(t.transaction == 2)
    #expect(t.committed)
    #expect(t.changed == ["doc.count"])
    #expect(t.steps.map(\.name) == ["norm", "remover", "view", "bad", "gone", "log"])
    #expect(t.steps.map(\.outcome) == [.called, .called, .unchanged, .failed, .unregistered, .called])
    #expect(t.steps[0].because == ["doc.title"])
    #expect(t.steps[0].writes == ["doc.title"])
    #expect(t.steps[0].refused.count == 1)
    #expect(t.steps[0].refused[0].hasPrefix("elsewhere: CONTRACT_VIOLATION"))
    #expect(t.steps[2].because == ["doc.title"])
    #expect(t.steps[3].failure?.contains("Boom") == true)
    #expect(t.steps[5].because == ["doc.count"])
    #expect(t.steps.allSatisfy { $0.transaction == 2 })
    #expect(t.durationNS >= t.steps.map(\.durationNS).reduce(0, +))
  }

  @Test func withoutAHandlerNothingIsRecorded() throws {
    let bus = Bus()
    try bus.register(name: "v", reads: ["k"]) { _ in }
    try bus.commitWith { try bus.set("k", .int64(1)) }
    #expect(bus.passes.recorder == nil)
    let traces = Box<Int>(0)
    bus.onTrace { _ in traces.value += 1 }
    try bus.commitWith { try bus.set("k", .int64(2)) }
    bus.onTrace(nil)
    try bus.commitWith { try bus.set("k", .int64(3)) }
    #expect(traces.value == 1)
  }

  @Test func aBridgeListenerDoesNotDisplaceTheHostHandler() throws {
    let bus = Bus()
    try bus.register(name: "v", reads: ["k"]) { _ in }
    let host = Box<Int>(0)
    let bridge = Box<Int>(0)
    bus.onTrace { _ in host.value += 1 }
    let key = bus.addTraceListener { _ in bridge.value += 1 }
    try bus.commitWith { try bus.set("k", .int64(1)) }
    bus.removeTraceListener(key)
    try bus.commitWith { try bus.set("k", .int64(2)) }
    #expect((host.value, bridge.value) == (2, 1))
  }

  /// A transaction whose own pass cancels every change out keeps its id
  /// (SPEC §2) and commits: `committed` is true with nothing `changed`.
  @Test func aPassThatCancelsEveryChangeCommitsWithItsId() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("v", .int64(1)) }
    let traces = Box<[PassTrace]>([])
    bus.onTrace { t in traces.mutate { $0.append(t) } }
    try bus.register(name: "norm", reads: ["v"], writes: ["v"], priority: -3) { [unowned bus] _ in try bus.set("v", .int64(1)) }
    try bus.register(name: "view", reads: ["v"]) { _ in }
    bus.begin()
    try bus.set("v", .int64(2))
    #expect(try bus.commit() == 2)
    #expect(try bus.counter("v") == 1)
    let t = try #require(traces.value.first)
    #expect(traces.value.count == 1)
    #expect(t.transaction == 2 && t.committed && t.changed.isEmpty)
    #expect(t.steps.map(\.outcome) == [.called, .unchanged])
  }

  @Test func theInitialCallThatOpensAPassIsTraced() throws {
    let bus = Bus()
    let traces = Box<[PassTrace]>([])
    bus.onTrace { t in traces.mutate { $0.append(t) } }
    try bus.register(name: "reader", reads: ["k"]) { _ in }
    try bus.register(name: "init", reads: ["x"], writes: ["k"], flags: .notifyInitial) { [unowned bus] _ in try bus.set("k", .int64(1)) }
    try bus.register(name: "quiet", reads: ["y"], flags: .notifyInitial) { _ in }
    #expect(traces.value.count == 2)
    #expect(traces.value[0].steps.map(\.name) == ["init", "reader"])
    #expect(traces.value[0].steps[0].initial && traces.value[0].steps[0].transaction == 0)
    #expect(traces.value[0].transaction == 1 && traces.value[0].committed)
    #expect(traces.value[1].steps.map(\.name) == ["quiet"])
    #expect(!traces.value[1].committed)
  }
}
