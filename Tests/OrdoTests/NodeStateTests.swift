import Testing

@testable import Ordo

/// The dense table of key node states (``NodeSlab``) and the 32-bit reader
/// cache generation that a state holds.
@Suite struct NodeStateTests {
  /// States are handed out in creation order, side by side, and a
  /// released state is reused by the next node.
  @Test func statesAreConsecutiveAndReused() throws {
    let slab = NodeSlab()
    var nodes = (0..<100).map { KeyNode(key: "k\($0)", ids: [], hash: UInt64($0), slab: slab) }
    for i in 1..<64 {
      #expect(nodes[i].ref.state == nodes[i - 1].ref.state + 1, "node \(i) follows node \(i - 1) in its block")
    }
    let released = nodes[10].ref.state
    nodes.remove(at: 10)
    let next = KeyNode(key: "new", ids: [], hash: 0, slab: slab)
    #expect(next.ref.state == released)
    #expect(next.counter == 0 && next.changedAt == 0 && !next.hasValue)
    #expect(!next.ref.state.pointee.pinned && !next.ref.state.pointee.named)
    #expect(next.ref.node === next)
  }

  /// Values, counters and changed-at of many keypaths survive nodes being
  /// created and pruned around them (a rolled-back transaction prunes the
  /// nodes it made, whose states are then reused).
  @Test func prunedNodesGiveBackTheirStates() throws {
    let bus = Bus()
    try bus.transaction { for i in 0..<200 { try bus.set("a.k\(i)", .int64(Int64(i))) } }
    var rooms: [Int] = []
    for round in 0..<5 {
      bus.begin()
      for i in 0..<300 { try bus.set("tmp.r\(round).k\(i)", .int64(-1)) }
      try bus.rollback()
      try bus.transaction { try bus.set("b.r\(round)", .string("round \(round)")) }
      rooms.append(bus.store.slab.rooms)
    }
    // Each round's 302 pruned nodes (tmp, tmp.r<n>, its 300 keys) give
    // their rooms to the next round's, but for the two or so the kept
    // nodes (b, b.r<n>) took: without reuse the table would grow by 303
    // rooms a round.
    #expect(zip(rooms, rooms.dropFirst()).allSatisfy { $1 - $0 <= 2 }, "rooms per round: \(rooms)")
    for i in 0..<200 {
      #expect(try bus.value("a.k\(i)") == .int64(Int64(i)))
      #expect(try bus.counter("a.k\(i)") == 1)
    }
    for round in 0..<5 {
      #expect(try bus.value("b.r\(round)") == .string("round \(round)"))
      #expect(try bus.value("tmp.r\(round).k0") == nil)
    }
    #expect(bus.store.nodes.count == 1 + 200 + 1 + 5, "a, a.k*, b, b.r* (the root is not in the table): no pruned node left")
  }

  /// When the contract graph's generation wraps, every node's reader cache
  /// is made stale first: a cache made just before the wrap (at generation
  /// 1) does not pass for current once the generation is 1 again.
  @Test func aReaderCacheDoesNotSurviveTheGenerationWrap() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.register(name: "a", reads: ["doc.k"]) { calls.add("a", $0) }
    let g = bus.contractGraph.generation
    try bus.transaction { try bus.set("doc.k", .int64(1)) }  // caches {a} at generation g
    #expect(calls.takeNames() == ["a"])
    bus.contractGraph.skipGenerations(to: NodeSlab.released - 1)
    try bus.register(name: "b", reads: ["doc.k"]) { calls.add("b", $0) }  // wraps to 0
    #expect(bus.contractGraph.generation == 0)
    while bus.contractGraph.generation < g {
      try bus.register(name: "filler\(bus.contractGraph.generation)", reads: ["other"]) { _ in }
    }
    #expect(bus.contractGraph.generation == g)
    try bus.transaction { try bus.set("doc.k", .int64(2)) }
    #expect(calls.takeNames() == ["a", "b"])
  }
}
