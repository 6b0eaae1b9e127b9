/// The record of the running transaction (SPEC §2, §3): for every keypath
/// node it touched, what it was at the start and how it was written. The
/// journal owns these records; a node carries only the index of its record,
/// stamped with the journal's serial (``KeyNode/journalStamp``), so a
/// lookup needs no hashing and a new transaction invalidates every stamp
/// by bumping the serial.
final class Journal {
  /// One node's part in the transaction.
  struct Record {
    /// Not retained: the node is in the store's tree, or in ``created``,
    /// until ``reset()`` drops the records.
    let node: Unretained<KeyNode>
    /// The node's value at the start of the transaction, when ``hasOriginal``.
    var original: Value?
    var hasOriginal = false
    /// Written as a keypath (set, touch, remove, removeTree's target), not
    /// only reached by a removeTree of an ancestor.
    var written = false
    /// Its own value was set or removed.
    var ownValue = false
    /// Touched: news to its readers whatever its value.
    var touched = false
    /// Written outside callbacks (by the transaction's owner).
    var external = false
    /// Marks the record once per changed list being built.
    var mark: UInt32 = 0
    /// The records of the nodes whose values a removeTree of this keypath
    /// removed (this node's own included when it held one).
    var removed: [Int32] = []
    /// The contracts whose initial calls wrote it: their own writes do not
    /// schedule them (SPEC §5.4).
    var writers: [ContractID] = []

    init(node: KeyNode) { self.node = Unretained(node) }
  }

  /// Identifies the running transaction in node stamps.
  private(set) var serial: UInt32 = 1
  /// In first-touch order.
  // Read and written by every write and every pass step; exclusivity
  // checks on it are measured in `docs/performance.md`.
  @exclusivity(unchecked) private(set) var records = ContiguousArray<Record>()
  /// Run, last first, when the transaction is rolled back.
  var undo: [@Sendable () -> Void] = []
  /// Nodes created by this transaction, in creation order (parents first),
  /// retained until ``reset()``.
  var created: [KeyNode] = []
  /// The serial wrapped: every node's stamp must be cleared before it is
  /// compared again (see ``Store/reset()``).
  private(set) var wrapped = false

  var isEmpty: Bool { records.isEmpty }

  /// The index of the node's record in this transaction, if it has one.
  @inline(__always)
  func index(_ n: KeyNode) -> Int? {
    n.journalStamp >> 32 == UInt64(serial) ? Int(truncatingIfNeeded: n.journalStamp & 0xFFFF_FFFF) : nil
  }

  /// The node's record index, making the record on first touch.
  @inline(__always)
  func slot(_ n: KeyNode) -> Int {
    if let i = index(n) { return i }
    records.append(Record(node: n))
    let i = records.count - 1
    n.journalStamp = UInt64(serial) << 32 | UInt64(i)
    return i
  }

  /// Accesses a record.
  @inline(__always)
  subscript(i: Int) -> Record {
    get { records[i] }
    _modify { yield &records[i] }
  }

  /// Records the node's value before its first change.
  @inline(__always)
  func saveOriginal(_ i: Int) {
    if records[i].hasOriginal { return }
    records[i].hasOriginal = true
    records[i].original = records[i].node.with { $0.value }
  }

  /// Whether the node of record `i` holds another value than at the start.
  @inline(__always)
  func netChanged(_ i: Int) -> Bool {
    let r = records[i]
    return r.hasOriginal && !Value.same(r.original, r.node.with { $0.value })
  }

  /// Whether its own value changed (not counting a removeTree's descendants).
  @inline(__always)
  func ownChange(_ i: Int) -> Bool {
    let r = records[i]
    return r.touched || (netChanged(i) && (r.ownValue || r.removed.contains(Int32(i))))
  }

  /// Whether a written keypath still counts as changed (SPEC §2): touched,
  /// its value differs from the start, or a removeTree of it removed a
  /// value that is still gone.
  @inline(__always)
  func isChanged(_ i: Int) -> Bool {
    let r = records[i]
    if r.touched { return true }
    if r.ownValue && netChanged(i) { return true }
    for j in r.removed where netChanged(Int(j)) { return true }
    return false
  }

  /// Whether the node's counter rises at commit: touched, or its value
  /// differs from the start.
  @inline(__always)
  func counts(_ i: Int) -> Bool { records[i].touched || netChanged(i) }

  /// The value as at the start of the transaction.
  @inline(__always)
  func committedValue(_ n: KeyNode) -> Value? {
    if let i = index(n), records[i].hasOriginal { return records[i].original }
    return n.value
  }

  /// Forgets the transaction. The records go before ``created``, which may
  /// free nodes they name.
  func reset() {
    records.removeAll(keepingCapacity: true)
    if serial == UInt32.max {
      serial = 1
      wrapped = true
    } else {
      serial += 1
    }
    created.removeAll(keepingCapacity: true)
    if !undo.isEmpty { undo.removeAll() }
  }

  /// Acknowledges that every stamp was cleared after a wrap.
  func clearedStamps() { wrapped = false }
}
