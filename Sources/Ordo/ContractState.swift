/// Internal state of a registered contract. What a pass touches is in its
/// ``ContractPassState``, a line of the graph's ``ContractSlab`` that this
/// object owns (``passState``); the object keeps the cold rest: 56 bytes with
/// its header, one 64-byte block of malloc's. (Rarer still: a failing
/// contract's count of failures is in the graph, ``ContractGraph/failures``,
/// and the triggers after the first of a pass in the slab, beside the
/// states.)
final class ContractState {
  /// Its pass state (see ``ContractRef``).
  let passState: ContractRef
  // Statistics, cold.
  /// Bit i: read pattern i was read through (patterns beyond 32 are not tracked).
  var usedReads: UInt32 = 0
  /// Bit i: write pattern i was written through.
  var usedWrites: UInt32 = 0
  let name: String
  private let patterns: PatternStore

  init(
    id: ContractID, name: String, reads: [CPattern], writes: [CPattern], priority: Int32?, slab: ContractSlab,
    callback: @escaping ContractCallback
  ) {
    self.name = name
    patterns = PatternStore(reads: reads, writes: writes)
    let kind: ContractKind = reads.isEmpty ? .everyTransaction : (priority == nil ? .data : .priority)
    // The owner entry is written once `self` exists, below.
    passState = ContractRef(slab.allocate(ContractPassState(id: id, kind: kind, rank: kind == .priority ? priority! : 0, callback: callback)))
    slab.adopt(passState, owner: Unmanaged.passUnretained(self))
  }

  deinit { ContractSlab.release(passState.state) }

  var id: ContractID { passState.pointee.id }
  var kind: ContractKind { passState.pointee.kind }
  var key: OrderKey { passState.key }

  var registered: Bool {
    get { passState.pointee.registered }
    set { passState.pointee.registered = newValue }
  }

  var isData: Bool { kind == .data }

  /// Read patterns, in declaration order.
  var reads: PatternList { patterns.reads }

  /// Write patterns, in declaration order.
  var writes: PatternList { patterns.writes }

  /// The priority of a priority contract.
  var priority: Int32? { kind == .priority ? passState.pointee.rank : nil }

  /// The dependency level of a data contract (0 for the others).
  var level: Int {
    get { kind == .data ? Int(passState.pointee.rank) : 0 }
    set { if kind == .data { passState.pointee.rank = Int32(clamping: newValue) } }
  }

  static func bit(_ i: Int) -> UInt32 { i < 32 ? 1 << UInt32(i) : 0 }

  /// Forgets the pass's triggers.
  @inline(__always)
  func clearTriggers() { passState.clearTriggers() }
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

