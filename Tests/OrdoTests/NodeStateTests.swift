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
    // 63 states a page: only the first of a page, and the first after its
    // header, do not follow their predecessor.
    var sideBySide = 0
    for i in 1..<100 where nodes[i].ref.state == nodes[i - 1].ref.state + 1 { sideBySide += 1 }
    #expect(sideBySide >= 99 - 2 * (99 / 63 + 1), "\(sideBySide) of 99 states follow the previous one")
    let released = nodes[10].ref.state
    nodes.remove(at: 10)
    let next = KeyNode(key: "new", ids: [], hash: 0, slab: slab)
    #expect(next.ref.state == released)
    #expect(next.counter == 0 && next.changedAt == 0 && !next.hasValue)
    #expect(!next.ref.state.pointee.pinned && !next.ref.state.pointee.named)
    #expect(next.ref.node === next)
  }

  /// Each page of a dense table has a header, which no state overlaps, at
  /// a place that depends on the page: the headers of consecutive pages
  /// fall in different cache sets (a 4 KiB stride would put them all in
  /// one set of the first-level cache).
  @Test func pageHeadersAreStaggeredAndApart() throws {
    for headerSize in [NodeSlab.headerSize, ContractSlab.headerSize] {
      let places = StatePages.pageSize / headerSize
      var offsets = Set<Int>()
      for page in 0..<places {
        let p = try #require(UnsafeRawPointer(bitPattern: (page + 1) * StatePages.pageSize))
        offsets.insert(StatePages.headerOffset(ofPage: p, headerSize: headerSize))
      }
      #expect(offsets.count == places, "\(places) consecutive pages put their \(headerSize)-byte headers in \(offsets.count) places")
    }
    let slab = NodeSlab()
    let nodes = (0..<300).map { KeyNode(key: "k\($0)", ids: [], hash: UInt64($0), slab: slab) }
    var byPage: [UInt: [Int]] = [:]
    for n in nodes {
      let s = UnsafeRawPointer(n.ref.state)
      let anchor = StatePages.anchor(of: s, headerSize: NodeSlab.headerSize)
      #expect(UnsafeRawPointer(anchor) != s, "a state is not its block's anchor")
      #expect(NodeSlab.slab(of: s).toOpaque() == Unmanaged.passUnretained(slab).toOpaque(), "a state finds its slab from its block's anchor")
      let page = StatePages.page(of: s)
      byPage[UInt(bitPattern: page), default: []].append(UnsafeRawPointer(page).distance(to: s) / StatePages.lineSize)
    }
    // Within a page, states lie in the order made; a page other than its
    // block's anchor's holds no header, so its states fill it from line 0.
    for (page, lines) in byPage {
      #expect(lines == lines.sorted(), "lines in a page: \(lines)")
      let anchorPage = StatePages.page(of: StatePages.anchor(of: UnsafeRawPointer(bitPattern: page)!, headerSize: NodeSlab.headerSize))
      if UInt(bitPattern: anchorPage) != page { #expect(lines == Array(lines.indices), "lines in a page without a header: \(lines)") }
    }
    #expect(byPage.count >= 300 / 64)
  }

  /// A node table's blocks are anchored: each is 64 pages aligned to its
  /// size, and every state finds its slab through its block's anchor, one
  /// line for 4 095 states, the anchors of consecutive blocks in different
  /// cache sets.
  @Test func statesFindTheirSlabThroughFewAnchors() throws {
    let slab = NodeSlab(), other = NodeSlab()
    let count = 3 * 4_095 + 100
    let nodes = (0..<count).map { KeyNode(key: "k\($0)", ids: [], hash: UInt64($0), slab: slab) }
    let stranger = KeyNode(key: "x", ids: [], hash: 0, slab: other)
    var anchors = Set<UInt>()
    for n in nodes {
      let s = UnsafeRawPointer(n.ref.state)
      #expect(NodeSlab.slab(of: s).toOpaque() == Unmanaged.passUnretained(slab).toOpaque())
      anchors.insert(UInt(bitPattern: StatePages.anchor(of: s, headerSize: NodeSlab.headerSize)))
    }
    #expect(anchors.count == 4, "\(count) states, \(anchors.count) anchors")
    for a in anchors {
      // Its cache set (of 64) is its block's number modulo 64: blocks
      // less than 16 MiB apart never share one.
      let block = a & ~UInt(StatePages.blockSize - 1)
      #expect((a / UInt(StatePages.lineSize)) % 64 == (block / UInt(StatePages.blockSize)) % 64)
    }
    #expect(NodeSlab.slab(of: UnsafeRawPointer(stranger.ref.state)).toOpaque() == Unmanaged.passUnretained(other).toOpaque())
  }

  /// A handle's one-word form (the C shim's `ordo_handle *`) leads back to
  /// its bus and obeys the rules as the handle does.
  @Test func handleAddressLeadsToItsBus() throws {
    let bus = Bus(), other = Bus()
    let a = try bus.resolveAddress("doc.title"), b = try other.resolveAddress("doc.title")
    let again = try bus.resolveAddress("doc.title")
    #expect(a != b && a == again)
    #expect(String(cString: a.keypathCString) == "doc.title" && a.keypath == "doc.title")
    #expect(throws: OrdoError.self) { try a.set(.int64(1)) }  // no transaction
    try bus.transaction { try a.set(.int64(7)) }
    let (value, counter) = (try a.value(), try a.counter())
    #expect(value == .int64(7) && counter == 1)
    let (otherValue, otherByString) = (try b.value(), try other.value("doc.title"))
    #expect(otherValue == nil && otherByString == nil)
    try bus.transaction { try a.touch() }
    try bus.transaction { try a.remove() }
    let (removed, counted, byString) = (try a.value(), try a.counter(), try bus.counter("doc.title"))
    #expect(removed == nil && counted == 3 && byString == 3)
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
