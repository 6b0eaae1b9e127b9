/// The record of the running transaction (SPEC §2, §3): for every keypath
/// node it touched, what it was at the start and how it was written. The
/// journal owns these records; a node carries only the index of its record,
/// stamped with the journal's serial (``KeyNode/journalStamp``), so a
/// lookup needs no hashing and a new transaction invalidates every stamp
/// by bumping the serial.
///
/// Guarded by the bus's lock, so exclusivity is unchecked: its
/// `@exclusivity(unchecked)` fields skip the dynamic check (the cost of
/// each is measured beside it).
final class Journal {
  /// One node's part in the transaction. Plain data (no reference-counted
  /// field), so that appending, copying and dropping records costs no
  /// reference counting: a scalar start value is kept inline, a string or
  /// bytes in ``Journal/originals``.
  struct Record {
    /// Not retained: the node is in the store's tree, or in ``created``,
    /// until ``reset()`` drops the records.
    /// Unretained: docs/reliability.md, "Unretained references", row "a journal record's node".
    let node: NodeRef
    /// The node's value at the start of the transaction, once saved (it is
    /// saved by the first write that alters it).
    var original = PackedValue(kind: .none)
    var hasOriginal: Bool { original.kind != .none }
    /// Its value differs from the start (presence, type or content, doubles
    /// bit for bit): kept up to date by every write, so that the pass and
    /// the commit read a flag instead of comparing values (SPEC §2).
    var changed = false
    /// Written as a keypath (set, touch, remove, removeTree's target), not
    /// only reached by a removeTree of an ancestor.
    var written = false
    /// Its own value was set or removed.
    var ownValue = false
    /// Touched: news to its readers whatever its value.
    var touched = false
    /// It has lists in ``Journal/lists`` (rare: removeTree).
    var hasLists = false
    /// Marks the record once per changed list being built.
    var mark: UInt32 = 0

    init(node: NodeRef) { self.node = node }
  }

  /// The rare parts of a record, kept apart so that a record holds no
  /// reference-counted field but its original value.
  struct Lists {
    /// The records of the nodes whose values a removeTree of this keypath
    /// removed (this node's own included when it held one).
    var removed: [Int32] = []
  }

  /// Lists by record index.
  // `lists`, `undo` and `created` are exclusivity-unchecked: every reset
  // empties them, and each dynamic check there cost about 75 instructions
  // a pass, three of the seven that made 7 % of a commit of 10 changes
  // (`ordo-bench --profile commit-handles:100000`, callgrind; the other
  // four are in ``ContractGraph`` and ``PassRunner``).
  @exclusivity(unchecked) private var lists: [Int32: Lists] = [:]

  /// Identifies the running transaction in node stamps.
  private(set) var serial: UInt32 = 1
  /// The saved start values that are strings or bytes, for records whose
  /// ``Record/original`` is ``PackedValue/Kind/boxed`` (unchecked: every write and pass step may touch it).
  @exclusivity(unchecked) private var originals = ContiguousArray<Value>()
  /// In first-touch order (a ``Buffer``: every write appends or updates a
  /// record and every pass step reads one). Exclusivity-unchecked: checked,
  /// each append and update is a dynamic access check, which took the
  /// delivery workload from 432 to 725 instructions per change
  /// (`Benchmarks/profile.sh delivery-handles`).
  @exclusivity(unchecked) private var records = Buffer<Record>()
  /// The number of records.
  var count: Int { records.count }
  /// Run, last first, when the transaction is rolled back.
  @exclusivity(unchecked) var undo: [@Sendable () -> Void] = []
  /// The first condition of the transaction that does not hold (SPEC §15):
  /// its outermost commit then applies nothing and throws it.
  /// (Exclusivity-unchecked: every commit and reset reads it under the
  /// bus's lock; see ``Ownership``.)
  @exclusivity(unchecked) var conflict: OrdoError?
  /// Nodes created by this transaction, in creation order (parents first),
  /// retained until ``reset()``.
  @exclusivity(unchecked) var created: [KeyNode] = []
  /// The serial wrapped: every node's stamp must be cleared before it is
  /// compared again (see ``Store/reset()``).
  private(set) var wrapped = false

  deinit { records.free() }

  /// The index of the node's record in this transaction, if it has one.
  @inline(__always)
  func index(_ r: NodeRef) -> Int? {
    let stamp = r.state.pointee.journalStamp
    return stamp >> 32 == UInt64(serial) ? Int(truncatingIfNeeded: stamp & 0xFFFF_FFFF) : nil
  }

  /// The start value of record `i`'s node (nil when it held none, or when
  /// it was not saved: its value did not change).
  @inline(__always)
  func original(_ i: Int) -> Value? { value(of: records[i].original) }

  /// A saved value as a value (nil for an absent or unsaved one).
  @inline(__always)
  private func value(of s: PackedValue) -> Value? { s.kind == .boxed ? originals[Int(s.bits)] : s.scalar }

  /// Saves a node's value: a scalar as it is packed, a string or bytes in
  /// ``originals``.
  @inline(__always)
  private func save(_ r: NodeRef) -> PackedValue {
    let p = r.state.pointee.packed
    guard p.kind == .boxed, let boxed = r.with({ $0.boxed }) else { return p }
    originals.append(boxed)
    return PackedValue(kind: .boxed, bits: UInt64(originals.count - 1))
  }

  /// Whether `v` equals a saved value (SPEC §2: presence, type, content;
  /// doubles bit for bit).
  @inline(__always)
  private func same(_ s: PackedValue, _ v: Value?) -> Bool {
    switch (s.kind, v) {
    case (.absent, nil): true
    case (.bool, .bool(let x)?): (s.bits != 0) == x
    case (.int64, .int64(let x)?): s.bits == UInt64(bitPattern: x)
    case (.double, .double(let x)?): s.bits == x.bitPattern
    case (.boxed, let v?): Value.same(originals[Int(s.bits)], v)
    default: false
    }
  }

  /// Accesses a record.
  @inline(__always)
  subscript(i: Int) -> Record {
    get { records[i] }
    _modify { yield &records[i] }
  }

  /// The records whose values a removeTree of record `i`'s keypath removed.
  @inline(__always)
  func removed(_ i: Int) -> [Int32] { records[i].hasLists ? lists[Int32(i)]?.removed ?? [] : [] }

  /// Notes that a removeTree of record `i`'s keypath removed record `j`'s value.
  func addRemoved(_ i: Int, _ j: Int) {
    records[i].hasLists = true
    if !lists[Int32(i), default: Lists()].removed.contains(Int32(j)) { lists[Int32(i), default: Lists()].removed.append(Int32(j)) }
  }

  /// Records a write to `n` (or, not `asKeypath`, a value a removeTree of
  /// an ancestor removes) in one access to its record. Returns the record's
  /// index. A write that alters the node's value calls ``altering(_:to:)``
  /// first and ``altered(_:to:)`` after.
  @inline(__always)
  func write(_ n: NodeRef, ownValue: Bool, touched: Bool, asKeypath: Bool = true) -> Int {
    if let i = index(n) {
      if asKeypath { records[i].written = true }
      if ownValue { records[i].ownValue = true }
      if touched { records[i].touched = true }
      return i
    }
    var r = Record(node: n)
    r.written = asKeypath
    r.ownValue = ownValue
    r.touched = touched
    let i = records.append(r)
    n.state.pointee.journalStamp = UInt64(serial) << 32 | UInt64(i)
    n.state.pointee.readers.fetchSingleEarly()
    return i
  }

  /// Before a write alters the value of record `i`'s node: saves that value
  /// as the start value when it is not saved yet.
  @inline(__always)
  func altering(_ i: Int, from n: NodeRef) {
    if !records[i].hasOriginal { records[i].original = save(n) }
  }

  /// After a write altered the value of record `i`'s node to `v`: whether it
  /// now differs from the start.
  @inline(__always)
  func altered(_ i: Int, to v: Value?) {
    records[i].changed = !same(records[i].original, v)
  }

  /// The same for a scalar, packed: a comparison of plain bits (a boxed
  /// start value is another value).
  @inline(__always)
  func altered(_ i: Int, to p: PackedValue) {
    records[i].changed = records[i].original != p
  }

  /// Whether the node of record `i` holds another value than at the start.
  @inline(__always)
  func netChanged(_ i: Int) -> Bool { records[i].changed }

  /// Whether its own value changed (not counting a removeTree's descendants).
  @inline(__always)
  func ownChange(_ i: Int) -> Bool {
    records[i].touched || (netChanged(i) && (records[i].ownValue || removed(i).contains(Int32(i))))
  }

  /// Whether a written keypath still counts as changed (SPEC §2): touched,
  /// its value differs from the start, or a removeTree of it removed a
  /// value that is still gone.
  @inline(__always)
  func isChanged(_ i: Int) -> Bool {
    if records[i].touched { return true }
    if records[i].ownValue && netChanged(i) { return true }
    guard records[i].hasLists else { return false }
    for j in removed(i) where netChanged(Int(j)) { return true }
    return false
  }

  /// Whether the node's counter rises at commit: touched, or its value
  /// differs from the start.
  @inline(__always)
  func counts(_ i: Int) -> Bool { records[i].touched || netChanged(i) }

  /// The value as at the start of the transaction.
  @inline(__always)
  func committedValue(_ n: KeyNode) -> Value? {
    if let i = index(n.ref), records[i].hasOriginal { return value(of: records[i].original) }
    return n.value
  }

  /// Forgets the transaction. The records go before ``created``, which may
  /// free nodes they name.
  func reset() {
    records.removeAll()
    originals.removeAll(keepingCapacity: true)
    if !lists.isEmpty { lists.removeAll() }
    if serial == UInt32.max {
      serial = 1
      wrapped = true
    } else {
      serial += 1
    }
    created.removeAll(keepingCapacity: true)
    if !undo.isEmpty { undo.removeAll() }
    if conflict != nil { conflict = nil }
  }

  /// Acknowledges that every stamp was cleared after a wrap.
  func clearedStamps() { wrapped = false }
}
