import Testing

@testable import Ordo

/// The dense table of contract pass states (``ContractSlab``): one cache
/// line a contract, found from its object and finding its object back,
/// reused once released.
@Suite struct ContractSlabTests {
  /// What the hot paths touch is one cache line per contract and per key
  /// node, and a reader cache is one word (it is a field of a node's line).
  @Test func statesTakeOneLineEach() {
    #expect(MemoryLayout<ContractPassState>.stride == 64)
    #expect(MemoryLayout<NodeState>.stride == 64)
    #expect(MemoryLayout<Readers>.size == 8)
    #expect(MemoryLayout<TriggerWord>.size == 8)
  }

  /// States are handed out in registration order, side by side within a
  /// page, each on a line of its own; each names its contract back.
  @Test func statesAreConsecutiveAndNameTheirContracts() throws {
    let bus = Bus()
    for i in 0..<200 { try bus.register(name: "c\(i)", reads: ["m.k\(i)"]) { _ in } }
    let contracts = bus.contractGraph.registry.live
    #expect(contracts.count == 200)
    var sideBySide = 0
    for (i, c) in contracts.enumerated() {
      let address = UInt(bitPattern: c.passState.state)
      #expect(address % 64 == 0, "contract \(i)'s state starts a cache line")
      let header = UInt(bitPattern: StatePages.header(of: c.passState.state, headerSize: ContractSlab.headerSize))
      #expect(address + 64 <= header || address >= header + UInt(ContractSlab.headerSize), "contract \(i)'s state is outside its page's header")
      #expect(c.passState.contract === c, "contract \(i)'s state names it")
      #expect(c.passState.pointee.id == c.id && c.name == "c\(i)")
      if i > 0 && c.passState.state == contracts[i - 1].passState.state + 1 { sideBySide += 1 }
    }
    // ``ContractSlab/perPage`` states a page: only the first of each page,
    // and the first after the page's header, do not follow their
    // predecessor.
    #expect(sideBySide >= 199 - 2 * (199 / ContractSlab.perPage + 1), "\(sideBySide) of 199 states follow the previous one")
  }

  /// An unregistered contract's state is reused by the next registration,
  /// and holds nothing of the old contract.
  @Test func releasedStatesAreReused() throws {
    let bus = Bus()
    let slab = bus.contractGraph.slab
    for i in 0..<100 { try bus.register(name: "keep\(i)", reads: ["keep.k\(i)"]) { _ in } }
    var rooms: [Int] = []
    for round in 0..<5 {
      let ids = try (0..<100).map { i in try bus.register(name: "tmp\(round).\(i)", reads: ["tmp.k\(i)"], priority: 5) { _ in }.id }
      for id in ids { try bus.unregister(id) }
      rooms.append(slab.rooms)
    }
    // The first round makes 100 states; the later ones reuse them.
    #expect(rooms.first == 200 && rooms.allSatisfy { $0 == rooms[0] }, "states made after each round: \(rooms)")
    let calls = Calls()
    let fresh = try bus.watch(calls, "fresh", reads: ["tmp.k1"])
    let c = try #require(bus.contractGraph.contract(fresh.id))
    #expect(c.passState.pointee.calls == 0 && c.passState.pointee.kind == .data && c.priority == nil && c.passState.pointee.triggers.isEmpty)
    try bus.transaction { try bus.set("tmp.k1", .int64(1)) }
    #expect(calls.names == ["fresh"] && c.passState.pointee.calls == 1)
  }

  /// A contract scheduled by several written keypaths keeps the first in
  /// its state and the others in the slab; it is told of each once, in
  /// the order they were written, and the next pass starts afresh.
  @Test func severalTriggers() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "r", reads: ["a", "b", "c"])
    try bus.transaction {
      try bus.set("c", .int64(1))
      try bus.set("a", .int64(1))
      try bus.set("c", .int64(2))
      try bus.set("b", .int64(1))
    }
    #expect(calls.all.map(\.changed) == [["c", "a", "b"]])
    let c = try #require(bus.contractGraph.contract(named: "r"))
    #expect(c.passState.pointee.triggers.isEmpty && bus.contractGraph.slab.moreTriggers.isEmpty, "the pass left no trigger behind")
    try bus.transaction { try bus.set("b", .int64(2)) }
    #expect(calls.all.map(\.changed).last == ["b"])
  }

  /// A prefetch hint names the line of its bytes, and the next when they
  /// run onto it.
  @Test func prefetchHintNamesOneLineOrTwo() {
    let line = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 64)
    defer { line.deallocate() }
    func hint(_ offset: Int, _ count: Int) -> PrefetchHint { PrefetchHint(UnsafeRawBufferPointer(start: line + offset, count: count)) }
    #expect(hint(16, 32) == hint(0, 64), "within one line")
    #expect(hint(48, 32) == hint(32, 64), "across two lines")
    #expect(hint(48, 32) != hint(0, 64) && hint(64, 32) == hint(64, 64))
    #expect(hint(0, 1) != .none)
  }

  /// A contract registered with a prefetch hint keeps it in its page's
  /// header; a state released and reused by a contract without one holds
  /// none; a bus of contracts without hints asks for none.
  @Test func prefetchHintsGoWithTheirStates() throws {
    let bus = Bus()
    let slab = bus.contractGraph.slab
    try bus.register(name: "plain", reads: ["m.a"]) { _ in }
    #expect(!slab.hasPrefetchHints)
    let fields = UnsafeMutableRawPointer.allocate(byteCount: 32, alignment: 16)
    defer { fields.deallocate() }
    let bytes = UnsafeRawBufferPointer(start: fields, count: 32)
    let calls = Calls()
    let hinted = try bus.register(ContractSpec(name: "hinted", reads: ["m.b"]) { calls.add("hinted", $0) }, prefetching: bytes)
    // Not kept: the state is released with the contract.
    let state = try #require(bus.contractGraph.contract(hinted.id)).passState.state
    #expect(slab.hasPrefetchHints && ContractSlab.prefetchHint(of: state) == PrefetchHint(bytes))
    try bus.transaction { try bus.set("m.b", .int64(1)) }
    #expect(calls.all.count == 1, "a hinted contract is called as any other")
    try bus.unregister(hinted.id)
    let next = try bus.register(name: "next", reads: ["m.c"]) { _ in }
    let reused = try #require(bus.contractGraph.contract(next.id))
    #expect(reused.passState.state == state && ContractSlab.prefetchHint(of: state) == .none)
  }
}
