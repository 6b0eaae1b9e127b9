/// Internal state of a registered contract. What a pass touches is in its
/// ``ContractPassState``, a line of the graph's ``ContractSlab`` that this
/// object owns (``hot``); the object keeps the cold rest: 72 bytes with
/// its header, one 80-byte block of malloc's.
final class ContractState {
  /// Its pass state (see ``ContractRef``).
  let hot: ContractRef
  // Statistics, cold.
  var failures: UInt32 = 0
  /// Bit i: read pattern i was read through (patterns beyond 32 are not tracked).
  var usedReads: UInt32 = 0
  /// Bit i: write pattern i was written through.
  var usedWrites: UInt32 = 0
  let name: String
  private let patterns: PatternStore
  /// The triggers after the first, when a pass has more than one for it
  /// (see ``TriggerWord``).
  var moreTriggers: [KeyNode] = []

  init(
    id: ContractID, name: String, reads: [CPattern], writes: [CPattern], priority: Int32?, slab: ContractSlab,
    callback: @escaping ContractCallback
  ) {
    self.name = name
    patterns = PatternStore(reads: reads, writes: writes)
    let kind: ContractKind = reads.isEmpty ? .everyTransaction : (priority == nil ? .data : .priority)
    // The owner entry is written once `self` exists, below.
    hot = ContractRef(slab.allocate(ContractPassState(id: id, kind: kind, rank: kind == .priority ? priority! : 0, callback: callback)))
    slab.adopt(hot, owner: Unmanaged.passUnretained(self))
  }

  deinit { ContractSlab.release(hot.state) }

  var id: ContractID { hot.pointee.id }
  var kind: ContractKind { hot.pointee.kind }
  var key: OrderKey { hot.key }

  var registered: Bool {
    get { hot.pointee.registered }
    set { hot.pointee.registered = newValue }
  }

  var isData: Bool { kind == .data }

  /// Read patterns, in declaration order.
  var reads: PatternList { patterns.reads }

  /// Write patterns, in declaration order.
  var writes: PatternList { patterns.writes }

  /// The priority of a priority contract.
  var priority: Int32? { kind == .priority ? hot.pointee.rank : nil }

  /// The dependency level of a data contract (0 for the others).
  var level: Int {
    get { kind == .data ? Int(hot.pointee.rank) : 0 }
    set { if kind == .data { hot.pointee.rank = Int32(clamping: newValue) } }
  }

  static func bit(_ i: Int) -> UInt32 { i < 32 ? 1 << UInt32(i) : 0 }

  /// Forgets the pass's triggers.
  @inline(__always)
  func clearTriggers() { hot.clearTriggers() }

  /// The triggers after the first (``TriggerWord/hasMore``), unique in a
  /// row: out of line, rare.
  @inline(never)
  func addAnotherTrigger(_ r: NodeRef) {
    let first = hot.pointee.triggers.first!
    if !hot.pointee.triggers.hasMore {
      guard !NodeRef.same(first, r) else { return }
      moreTriggers = [r.node]
      hot.pointee.triggers.markMore()
      return
    }
    let n = r.node
    guard moreTriggers.last !== n else { return }
    moreTriggers.append(n)
  }

  /// Every trigger, in the order they scheduled (first included).
  var allTriggers: [KeyNode] {
    guard let first = hot.pointee.triggers.first else { return [] }
    return [first.node] + (hot.pointee.triggers.hasMore ? moreTriggers : [])
  }
}

extension ContractRef {
  /// Forgets the pass's triggers (the object's list only when there is one).
  @inline(__always)
  func clearTriggers() {
    if pointee.triggers.hasMore { withContract { $0.moreTriggers = [] } }
    pointee.triggers.clear()
  }

  /// Adds a written keypath that scheduled the contract.
  @inline(__always)
  func addTrigger(_ n: NodeRef) {
    if pointee.triggers.isEmpty {
      pointee.triggers.setFirst(n)
      return
    }
    withContract { $0.addAnotherTrigger(n) }
  }
}

/// A contract's place in the pass order: phase and rank (priority or level,
/// biased to compare unsigned) packed in one word, then registration order.
struct OrderKey: Comparable {
  var high: UInt64
  var seq: UInt64

  @inline(__always)
  static func < (a: OrderKey, b: OrderKey) -> Bool {
    a.high != b.high ? a.high < b.high : a.seq < b.seq
  }
}

