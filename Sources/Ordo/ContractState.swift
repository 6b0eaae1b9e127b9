/// Internal state of a registered contract. Fields are laid out hot first
/// (those a pass touches), and kept few: 120 bytes with the object header,
/// one 128-byte block.
final class ContractState {
  // The fields a pass touches come first, in the 72 bytes after the object
  // header, ordered so that the scheduling at the start of a pass touches
  // every cache line of them: its loop takes no lock, so the memory
  // fetches of the 10 contracts a commit reaches out of cache overlap
  // there, and their calls then find them in cache. A call's own fields
  // (callback, statistics) lie between the fields scheduling reads and
  // writes: `id`, `rank`, the flags, `triggers` and `scheduledSerial` at
  // the start, `calledSerial` at the end, 68 bytes apart: whatever the
  // block's alignment, each of its two lines holds one of them. (Called
  // after the lock is taken back, with the statistics in a line of their
  // own, the fetch waited in every call: `ordo-bench --only scale`,
  // scale-100000-handles.)
  /// Also the registration order (ids only grow).
  let id: ContractID
  /// The priority of a priority contract, the level of a data contract.
  private var rank: Int32
  let kind: ContractKind
  var registered = true
  var initialPending = false
  /// Its callback runs now (a contract's calls never nest).
  var running = false
  /// The written keypaths that scheduled it in this pass. Nine bytes (a
  /// trigger names a node's state, a pointer without spare bits, so the
  /// enum needs a tag byte): ``scheduledSerial`` fills the rest of its 16.
  var triggers = Triggers.none
  // Per-pass bookkeeping; `serial` identifies the pass.
  var scheduledSerial: UInt32 = 0
  // Statistics.
  var calls: UInt64 = 0
  /// A constant, so that a pass calls it borrowed, without a retain and a
  /// release per call (`ordo-bench --profile delivery-handles`: 56
  /// instructions of 700 per change). It goes with the contract: the
  /// registry lets an unregistered contract go at once, or when the pass
  /// or its own call that names it ends (see ``Registry``); nothing else
  /// retains a contract.
  let callback: ContractCallback
  var lastTransaction: UInt64 = 0
  var calledSerial: UInt32 = 0

  // Statistics, cold.
  var failures: UInt32 = 0
  /// Bit i: read pattern i was read through (patterns beyond 32 are not tracked).
  var usedReads: UInt32 = 0
  /// Bit i: write pattern i was written through.
  var usedWrites: UInt32 = 0

  // Cold.
  let name: String
  private let patterns: PatternStore

  init(id: ContractID, name: String, reads: [CPattern], writes: [CPattern], priority: Int32?, callback: @escaping ContractCallback) {
    self.id = id
    self.name = name
    patterns = PatternStore(reads: reads, writes: writes)
    let kind: ContractKind = reads.isEmpty ? .everyTransaction : (priority == nil ? .data : .priority)
    self.kind = kind
    self.callback = callback
    rank = kind == .priority ? priority! : 0
  }

  /// The position in the pass: phase, then priority or level, then
  /// registration order.
  var key: OrderKey {
    @inline(__always) get {
      let phase: UInt64 = kind == .priority ? 0 : (kind == .data ? 1 : 2)
      return OrderKey(high: phase << 32 | UInt64(UInt32(bitPattern: rank) ^ 0x8000_0000), seq: id)
    }
  }

  var isData: Bool { kind == .data }

  /// Read patterns, in declaration order.
  var reads: PatternList { patterns.reads }

  /// Write patterns, in declaration order.
  var writes: PatternList { patterns.writes }

  /// The priority of a priority contract.
  var priority: Int32? { kind == .priority ? rank : nil }

  /// The dependency level of a data contract (0 for the others).
  var level: Int {
    get { kind == .data ? Int(rank) : 0 }
    set { if kind == .data { rank = Int32(clamping: newValue) } }
  }

  static func bit(_ i: Int) -> UInt32 { i < 32 ? 1 << UInt32(i) : 0 }

  @inline(__always)
  func clearTriggers() {
    // The branch tells the compiler that only a list needs destroying (an
    // outlined destroy call per clear otherwise).
    switch triggers {
    case .none: return
    case .one: triggers = .none
    case .many: triggers = .none
    }
  }

  @inline(__always)
  func addTrigger(_ n: NodeRef) {
    if case .none = triggers {
      triggers = .one(n)
      return
    }
    addAnotherTrigger(n)
  }

  private func addAnotherTrigger(_ r: NodeRef) {
    switch triggers {
    case .none: triggers = .one(r)
    case .one(let first): if !NodeRef.same(first, r) { triggers = .many([first.node, r.node]) }
    case .many(var list):
      let n = r.node
      guard list.last !== n else { return }
      triggers = .none  // keep `list` unique while it grows
      list.append(n)
      triggers = .many(list)
    }
  }
}

/// The written keypaths that scheduled a contract in a pass: most often one,
/// held without an array and without retaining it (the store keeps its
/// nodes through the pass, and a contract's triggers are cleared before it
/// is scheduled again, unread).
enum Triggers {
  case none
  case one(NodeRef)
  case many([KeyNode])
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

