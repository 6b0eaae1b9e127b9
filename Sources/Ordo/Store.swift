#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutex with a condition variable, used to serialize transactions and to
/// guard the bus's state for short, non-blocking sections.
final class MonitorLock: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

  init() {
    pthread_mutex_init(mutex, nil)
    pthread_cond_init(cond, nil)
  }

  deinit {
    pthread_cond_destroy(cond)
    pthread_mutex_destroy(mutex)
    cond.deallocate()
    mutex.deallocate()
  }

  func lock() { pthread_mutex_lock(mutex) }
  func unlock() { pthread_mutex_unlock(mutex) }
  /// Waits for a broadcast; the mutex must be held.
  func wait() { pthread_cond_wait(cond, mutex) }
  func broadcast() { pthread_cond_broadcast(cond) }
}

/// Identifies the calling thread.
@inline(__always) func currentThread() -> pthread_t { pthread_self() }

/// One keypath of the store: its value and counter, its place in the tree of
/// keypaths (for `removeTree` and snapshots), its part in the running
/// transaction's journal, and a cache of the contracts a write to it affects.
final class KeyNode {
  // Fields a write and its pass touch come first, so that they share few
  // cache lines (a write touches the first 100 bytes or so).
  /// The hash of ``key`` (see ``UnretainedTable``).
  let hash: UInt64
  /// The full keypath ("" for the root).
  let key: String
  @exclusivity(unchecked) var value: Value?
  // Journal: valid when the serial equals the journal's.
  @exclusivity(unchecked) var ownValue = false
  @exclusivity(unchecked) var touched = false
  @exclusivity(unchecked) var external = false
  /// ``removed`` or ``writtenBy`` may be non-empty.
  @exclusivity(unchecked) var hasLists = false
  /// The node was written as a keypath in this transaction.
  @exclusivity(unchecked) var recordSerial: UInt64 = 0
  /// The node's value at the start of the transaction is recorded.
  @exclusivity(unchecked) var originalSerial: UInt64 = 0
  @exclusivity(unchecked) var original: Value?

  // Cache of affected readers, valid for one generation of the contract index.
  @exclusivity(unchecked) var readersGeneration: UInt64 = .max
  @exclusivity(unchecked) var readers = Readers.none
  @exclusivity(unchecked) var counter: UInt64 = 0
  /// Counter raised in the pass with this serial.
  @exclusivity(unchecked) var bumpSerial: UInt64 = 0

  // Rare: set ``hasLists`` when adding to them.
  /// Nodes whose values a `removeTree` of this keypath removed.
  @exclusivity(unchecked) var removed: [KeyNode] = []
  /// Contracts whose initial calls wrote it (it does not schedule them).
  @exclusivity(unchecked) var writtenBy: [ContractID] = []

  // Cold.
  /// Its interned segment ids.
  let ids: [UInt32]
  @exclusivity(unchecked) var children: [UInt32: KeyNode] = [:]

  init(key: String, ids: [UInt32], hash: UInt64) {
    self.key = key
    self.ids = ids
    self.hash = hash
  }

  /// Whether the keypath is worth listing: it holds a value or has changed.
  var isStored: Bool { value != nil || counter > 0 }

  func forEachInSubtree(_ body: (KeyNode) -> Void) {
    body(self)
    for child in children.values { child.forEachInSubtree(body) }
  }
}

/// The contracts a write to a keypath affects: most keypaths have one
/// reader or none, held without an array. The single reader is not
/// retained: a contract leaves the bus only after it is unregistered, which
/// makes every reader cache stale (see `Bus.readers(_:)`), and a stale cache
/// is rebuilt before it is read.
enum Readers {
  case none
  case one(Unmanaged<ContractState>)
  case many([ContractState])

  init(_ list: [ContractState]) {
    switch list.count {
    case 0: self = .none
    case 1: self = .one(.passUnretained(list[0]))
    default: self = .many(list)
    }
  }

  @inline(__always)
  func forEach(_ body: (ContractState) -> Void) {
    switch self {
    case .none: break
    case .one(let r): r._withUnsafeGuaranteedRef(body)
    case .many(let list): for r in list { body(r) }
    }
  }
}

/// Keypath nodes named without being retained: the journal's lists. The
/// store keeps its nodes through a transaction, and the nodes a transaction
/// creates stay in ``Journal/created`` until ``Journal/reset()`` has emptied
/// these lists.
struct NodeList {
  private var refs: [Unmanaged<KeyNode>] = []

  @inline(__always) mutating func append(_ n: KeyNode) { refs.append(.passUnretained(n)) }

  /// Calls `body` with each node, in order, borrowed.
  @inline(__always) func forEach(_ body: (KeyNode) -> Void) {
    for r in refs { r._withUnsafeGuaranteedRef(body) }
  }

  /// Empties the list, keeping its capacity.
  mutating func removeAll() { refs.removeAll(keepingCapacity: true) }
}

/// The undo log and change record of the running transaction. Most of it
/// lives on the nodes, stamped with ``serial``.
struct Journal {
  /// Identifies the running transaction on the nodes; bumped by ``reset()``.
  private(set) var serial: UInt64 = 1
  /// Keypaths as written, in first-write order (not retained, nor in
  /// ``originals``: see ``NodeList``).
  var records = NodeList()
  /// Nodes whose original value is recorded.
  var originals = NodeList()
  /// Run, last first, when the transaction is rolled back.
  var undo: [@Sendable () -> Void] = []
  /// Nodes created by this transaction, in creation order (parents first).
  var created: [KeyNode] = []

  /// Records `node` as written, resetting its record fields on first write.
  mutating func record(_ node: KeyNode) {
    if node.recordSerial == serial { return }
    node.recordSerial = serial
    node.ownValue = false
    node.touched = false
    node.external = false
    if node.hasLists {
      node.removed.removeAll()
      node.writtenBy.removeAll()
      node.hasLists = false
    }
    records.append(node)
  }

  /// Records the node's value at the start of the transaction.
  mutating func saveOriginal(_ node: KeyNode) {
    if node.originalSerial == serial { return }
    node.originalSerial = serial
    node.original = node.value
    originals.append(node)
  }

  /// Whether the node's value differs from its value at the start of the
  /// transaction with this serial. Static, with the serial passed in, so
  /// that the pass's closures read no copy of the journal (a copy retains
  /// and releases its four lists).
  static func netChanged(_ node: KeyNode, _ serial: UInt64) -> Bool {
    node.originalSerial == serial && !Value.same(node.original, node.value)
  }

  /// Whether a keypath written in the transaction with this serial still
  /// counts as changed (SPEC §2).
  static func isChanged(_ node: KeyNode, _ serial: UInt64) -> Bool {
    if node.touched { return true }
    if node.ownValue && netChanged(node, serial) { return true }
    if !node.hasLists || node.removed.isEmpty { return false }
    for r in node.removed where netChanged(r, serial) { return true }
    return false
  }

  /// The value as at the start of the transaction.
  func committedValue(_ node: KeyNode) -> Value? {
    node.originalSerial == serial ? node.original : node.value
  }

  mutating func reset() {
    originals.forEach { $0.original = nil }
    // A node's `removed` list may hold the node itself (removeTree of a
    // keypath with a value): drop it with the transaction, or the node and
    // the contracts in its reader cache leak with the bus.
    records.forEach { n in if n.hasLists && !n.removed.isEmpty { n.removed.removeAll() } }
    serial += 1
    records.removeAll()
    originals.removeAll()
    // Last: this may free nodes the transaction created and the pass pruned,
    // which the lists above name without retaining them.
    created.removeAll(keepingCapacity: true)
    if !undo.isEmpty { undo.removeAll() }
  }
}
