/// A contract's identifier, unique on its bus and never reused.
public typealias ContractID = UInt64

/// One write of a batch (see ``Bus/write(_:)``).
public enum Write: Sendable, Hashable {
  /// Set the value of a keypath.
  case set(String, Value)
  /// Mark a keypath changed without a value.
  case touch(String)
  /// Remove a keypath's value.
  case remove(String)
  /// Remove the values of a keypath and all its descendants.
  case removeTree(String)
}

/// Options of a contract.
public struct ContractFlags: OptionSet, Hashable, Sendable {
  /// The raw bits, the same as the C `ORDO_*` flag values.
  public let rawValue: UInt32
  /// Makes flags from their raw bits.
  public init(rawValue: UInt32) { self.rawValue = rawValue }
  /// Call the contract once right away (SPEC §5): during registration outside
  /// a pass, or at its position in the running pass.
  public static let notifyInitial = ContractFlags(rawValue: 1 << 0)
}

/// What a contract's callback receives.
public struct Notification: Sendable, Hashable {
  /// The transaction id (the last committed id for an initial call outside
  /// a pass).
  public let transaction: UInt64
  /// The contract being called.
  public let contract: ContractID
  /// The keypaths written in this transaction, as written, that affect the
  /// contract's read set and still count as changed; every changed keypath for
  /// an every-transaction contract; empty for an initial call.
  public let changed: ChangedKeypaths

  init(transaction: UInt64, contract: ContractID, changed: ChangedKeypaths) {
    self.transaction = transaction
    self.contract = contract
    self.changed = changed
  }
}

/// The changed keypaths of a ``Notification``: a collection of strings that
/// holds the common single keypath without allocating. Compares equal to an
/// array literal (`note.changed == ["a.b"]`); `Array(note.changed)` copies it.
public struct ChangedKeypaths: RandomAccessCollection, Hashable, Sendable, ExpressibleByArrayLiteral, CustomStringConvertible {
  private let single: String?
  private let list: [String]?

  /// Makes the collection from keypaths.
  public init(_ keypaths: [String]) {
    if keypaths.count == 1 {
      single = keypaths[0]
      list = nil
    } else {
      single = nil
      list = keypaths.isEmpty ? nil : keypaths
    }
  }

  /// One keypath.
  init(single: String) {
    self.single = single
    list = nil
  }

  /// Makes the collection from keypaths.
  public init(arrayLiteral keypaths: String...) { self.init(keypaths) }

  /// 0.
  public var startIndex: Int { 0 }
  /// The number of keypaths.
  public var endIndex: Int { single != nil ? 1 : list?.count ?? 0 }
  /// Printed as an array: `["a.b"]`.
  public var description: String { Array(self).description }

  /// The keypath at `i`.
  public subscript(i: Int) -> String {
    if let single {
      precondition(i == 0, "index out of range")
      return single
    }
    guard let list else { preconditionFailure("index out of range") }
    return list[i]
  }
}

/// A contract's callback. It runs synchronously on the committing thread and
/// may call back into the bus (read, write within its contract, register,
/// unregister). A thrown error is reported to the bus's failure handler and
/// does not stop the pass.
public typealias ContractCallback = @Sendable (Notification) throws -> Void

/// The declaration of a contract (SPEC §4).
public struct ContractSpec: Sendable {
  /// Unique on the bus; used in diagnostics.
  public var name: String
  /// Read patterns. Empty: an every-transaction contract.
  public var reads: [String]
  /// Write patterns (permissions).
  public var writes: [String]
  /// `nil` for a data contract; otherwise the priority (normalization -3,
  /// coordination -2, computed data -1, view hierarchy 1, 2, 3 …).
  public var priority: Int32?
  /// Options.
  public var flags: ContractFlags
  /// Called once per pass in which the contract's reads changed.
  public var callback: ContractCallback

  /// Makes a contract declaration.
  public init(
    name: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], callback: @escaping ContractCallback
  ) {
    self.name = name
    self.reads = reads
    self.writes = writes
    self.priority = priority
    self.flags = flags
    self.callback = callback
  }
}

/// A registered contract: keeps its id and name and can unregister it.
/// The handle keeps its bus alive.
public struct ContractHandle: Sendable, Hashable {
  /// The contract's id.
  public let id: ContractID
  /// The contract's name.
  public let name: String
  /// The bus it is registered on.
  public let bus: Bus

  /// Unregisters the contract. Throws ``OrdoError/Code/notFound`` when it is
  /// already gone.
  public func unregister() throws(OrdoError) { try bus.unregister(id) }

  /// Handles are equal when they name the same contract on the same bus.
  public static func == (a: ContractHandle, b: ContractHandle) -> Bool { a.id == b.id && a.bus === b.bus }
  /// Hashes the id and the bus's identity.
  public func hash(into h: inout Hasher) {
    h.combine(id)
    h.combine(ObjectIdentifier(bus))
  }
}

/// The kind of a contract, which decides its phase in the pass.
public enum ContractKind: String, Sendable, Hashable {
  /// Has a priority: runs first, by ascending priority.
  case priority
  /// No priority: runs after the priority contracts, by level.
  case data
  /// Empty read set: runs at the end of every pass that changed something.
  case everyTransaction = "every-transaction"
}

/// A description of a registered contract, for introspection.
public struct ContractInfo: Sendable, Hashable {
  /// The contract's id.
  public let id: ContractID
  /// Its name.
  public let name: String
  /// Its kind.
  public let kind: ContractKind
  /// Read patterns as declared.
  public let reads: [String]
  /// Write patterns as declared.
  public let writes: [String]
  /// Its priority (`nil` for data and every-transaction contracts).
  public let priority: Int32?
  /// Its dependency level (0 for priority and every-transaction contracts).
  public let level: Int
  /// Its 0-based position in the pass order among all contracts.
  public let position: Int
  /// Calls made so far.
  public let calls: UInt64
  /// The transaction of its last call (0 if never called).
  public let lastTransaction: UInt64
  /// Calls whose callback failed.
  public let failures: UInt64
  /// Declared read patterns its callbacks never read through the bus.
  public let unusedReads: [String]
  /// Declared write patterns its callbacks never wrote through.
  public let unusedWrites: [String]
}

/// A callback's failure, reported to the bus's failure handler.
public struct ContractFailure: Error, Sendable {
  /// The failing contract's id.
  public let contract: ContractID
  /// Its name.
  public let name: String
  /// The transaction in which it failed.
  public let transaction: UInt64
  /// What the callback threw, described.
  public let message: String
}

/// Counts kept by a bus since it was made.
public struct BusStatistics: Sendable, Hashable {
  /// Contracts registered now.
  public var contracts: Int
  /// Committed transactions that changed something (the last id).
  public var transactions: UInt64
  /// Contract calls made.
  public var notifications: UInt64
  /// Callbacks that failed.
  public var failures: UInt64
  /// Transactions rolled back.
  public var rollbacks: UInt64
  /// Keypaths holding a value.
  public var values: Int
}

/// Internal state of a registered contract. Fields are laid out hot first
/// (those a pass touches), and kept few: 120 bytes with the object header,
/// one 128-byte block.
final class ContractState {
  // The fields a pass touches come first, so that they share few cache
  // lines (the first 64 bytes after the object header).
  /// Also the registration order (ids only grow).
  let id: ContractID
  // Per-pass bookkeeping; `serial` identifies the pass.
  @exclusivity(unchecked) var scheduledSerial: UInt32 = 0
  @exclusivity(unchecked) var calledSerial: UInt32 = 0
  /// The written keypaths that scheduled it in this pass.
  @exclusivity(unchecked) var triggers = Triggers.none
  let kind: ContractKind
  @exclusivity(unchecked) var registered = true
  @exclusivity(unchecked) var initialPending = false
  /// The priority of a priority contract, the level of a data contract.
  @exclusivity(unchecked) private var rank: Int32
  /// Released (set to nil) when the contract is unregistered, so that what
  /// it captures goes at once even while stale caches still name the contract.
  @exclusivity(unchecked) var callback: ContractCallback?

  // Statistics.
  @exclusivity(unchecked) var calls: UInt64 = 0
  @exclusivity(unchecked) var lastTransaction: UInt64 = 0
  @exclusivity(unchecked) var failures: UInt32 = 0
  /// Bit i: read pattern i was read through (patterns beyond 32 are not tracked).
  @exclusivity(unchecked) var usedReads: UInt32 = 0
  /// Bit i: write pattern i was written through.
  @exclusivity(unchecked) var usedWrites: UInt32 = 0

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

  func clearTriggers() { triggers = .none }

  func addTrigger(_ n: KeyNode) {
    switch triggers {
    case .none: triggers = .one(Unmanaged.passUnretained(n))
    case .one(let first): if first.toOpaque() != Unmanaged.passUnretained(n).toOpaque() { triggers = .many([first.takeUnretainedValue(), n]) }
    case .many(var list):
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
  case one(Unmanaged<KeyNode>)
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

/// The contracts scheduled in a pass, popped in order key order. The bulk
/// scheduled at the start of a pass is sorted once; contracts scheduled
/// while the pass runs go to a binary heap (keys and references in separate
/// arrays, so that sifting compares plain keys).
///
/// Contracts are not retained: a scheduled contract stays in the bus's
/// registry at least until the pass ends (the registry sweeps out
/// unregistered contracts only between passes).
struct Schedule {
  private typealias Ref = Unmanaged<ContractState>
  private var added: [Ref] = []
  private var run: [Ref] = []
  private var next = 0
  private var keys: [OrderKey] = []
  private var refs: [Ref] = []

  mutating func push(_ c: ContractState) { added.append(Ref.passUnretained(c)) }

  @inline(__always) private static func key(_ r: Ref) -> OrderKey { r._withUnsafeGuaranteedRef { $0.key } }

  private mutating func heapPush(_ c: Ref) {
    keys.append(Schedule.key(c))
    refs.append(c)
    var i = keys.count - 1
    while i > 0 {
      let parent = (i - 1) / 2
      guard keys[i] < keys[parent] else { break }
      keys.swapAt(i, parent)
      refs.swapAt(i, parent)
      i = parent
    }
  }

  private mutating func heapPop() -> Ref {
    let last = keys.count - 1
    keys.swapAt(0, last)
    refs.swapAt(0, last)
    keys.removeLast()
    let top = refs.removeLast()
    var i = 0
    let n = keys.count
    while true {
      let l = 2 * i + 1, r = l + 1
      var m = i
      if l < n && keys[l] < keys[m] { m = l }
      if r < n && keys[r] < keys[m] { m = r }
      if m == i { break }
      keys.swapAt(i, m)
      refs.swapAt(i, m)
      i = m
    }
    return top
  }

  /// The next contract in pass order, unretained.
  mutating func pop() -> Unmanaged<ContractState>? {
    if !added.isEmpty {
      if next == run.count && keys.isEmpty {
        // Swap the buffers (no copy): `run` is empty and keeps its capacity.
        run.removeAll(keepingCapacity: true)
        swap(&run, &added)
        run.sort { Schedule.key($0) < Schedule.key($1) }
        next = 0
      } else {
        for c in added { heapPush(c) }
        added.removeAll(keepingCapacity: true)
      }
    }
    let haveRun = next < run.count
    if !keys.isEmpty && (!haveRun || keys[0] < Schedule.key(run[next])) { return heapPop() }
    guard haveRun else {
      run.removeAll(keepingCapacity: true)
      next = 0
      return nil
    }
    next += 1
    return run[next - 1]
  }
}
