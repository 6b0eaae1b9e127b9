/// One keypath of the store: its place in the tree of keypaths (for
/// `removeTree`, snapshots and changes), its key and a string or bytes
/// value. What a write and a pass touch — the value's bits, counter,
/// changed-at, journal stamp, reader cache — is its ``NodeState``, in a
/// dense table of its own (see ``NodeSlab``). Transaction state lives in the
/// ``Journal``; the node keeps only the stamp that finds its record.
final class KeyNode {
  /// Its state, in the slab; valid while the node lives.
  let ref: NodeRef
  /// The hash of ``key`` (see ``UnretainedTable``).
  let hash: UInt64
  /// The full keypath ("" for the root).
  let key: String
  /// The string or bytes when ``packed`` is boxed, else nil.
  var boxed: Value?
  /// Its interned segment ids.
  let ids: [UInt32]
  /// What the store's schema asks of a write to it, set when the node is
  /// made (a string write reads it beside ``key``, which its lookup just
  /// compared; handles and properties copy it when they are made).
  var schemaRule = SchemaRule.none
  var children: [UInt32: KeyNode] = [:]
  /// The slab its state lives in (retained: a node may outlive its store).
  private let slab: NodeSlab

  init(key: String, ids: [UInt32], hash: UInt64, slab: NodeSlab) {
    self.key = key
    self.ids = ids
    self.hash = hash
    self.slab = slab
    ref = NodeRef(slab.allocate())
    ref.state.initialize(to: NodeState(node: Unmanaged.passUnretained(self)))
  }

  deinit { slab.release(ref.state) }

  // The state's fields that the cold paths (reads, restore, snapshots,
  // changes) name often; the hot paths, and the rest, use ``ref`` directly.
  /// Its value packed: a scalar inline, a string or bytes in ``boxed``.
  var packed: PackedValue {
    @inline(__always) get { ref.state.pointee.packed }
    @inline(__always) set { ref.state.pointee.packed = newValue }
  }
  /// Committed transactions that changed this keypath (SPEC §2).
  var counter: UInt64 {
    @inline(__always) get { ref.state.pointee.counter }
    @inline(__always) set { ref.state.pointee.counter = newValue }
  }
  /// The last committed transaction that changed it (SPEC §10).
  var changedAt: UInt64 {
    @inline(__always) get { ref.state.pointee.changedAt }
    @inline(__always) set { ref.state.pointee.changedAt = newValue }
  }

  /// The value (nil when it holds none).
  var value: Value? {
    @inline(__always) get { packed.kind == .boxed ? boxed : packed.scalar }
    set {
      guard let v = newValue else {
        packed = .absent
        boxed = nil
        return
      }
      packed = PackedValue(v)
      boxed = packed.kind == .boxed ? v : nil
    }
  }

  /// Whether it holds a value.
  var hasValue: Bool { @inline(__always) get { packed.kind != .absent } }

  /// Whether the node is worth keeping: it holds a value, has a history
  /// (a tombstone keeps its counter and changed-at), has descendants or is
  /// named by a handle or a notification.
  var isKept: Bool {
    let s = ref.state
    return hasValue || counter > 0 || !children.isEmpty || s.pointee.pinned || s.pointee.named
  }

  func forEachInSubtree(_ body: (KeyNode) -> Void) {
    body(self)
    for child in children.values { child.forEachInSubtree(body) }
  }
}

/// What a keypath string or a handle resolved to: a node of the store, or a
/// valid keypath the store does not have yet (created by the write that
/// needs it).
enum Target {
  /// Not retained: the store keeps its nodes while the bus's lock is held.
  /// Unretained: docs/reliability.md, "Unretained references", row "a resolved write target".
  case node(NodeRef)
  /// The keypath, its segments, and their ids where the segment table knows
  /// them (``SegmentTable/unknown`` otherwise).
  case new(String, segments: [String], ids: [UInt32])

  var keypath: String {
    switch self {
    case .node(let n): n.with { $0.key }
    case .new(let k, _, _): k
    }
  }

  var ids: [UInt32] {
    switch self {
    case .node(let n): n.with { $0.ids }
    case .new(_, _, let ids): ids
    }
  }
}

/// A write to one keypath.
enum WriteOp {
  case set(Value)
  case touch
  case remove
  case removeTree

  var name: String {
    switch self {
    case .set: "set"
    case .touch: "touch"
    case .remove: "remove"
    case .removeTree: "removeTree"
    }
  }
}

/// The model (SPEC §2, §10): keypath nodes in a tree and a table, their
/// values, counters and changed-at, the last committed transaction id and
/// the epoch, and the running transaction's journal. It knows nothing of
/// contracts or threads; the bus calls it with its lock held.
///
/// Guarded by the bus's lock, so exclusivity is unchecked: its
/// `@exclusivity(unchecked)` fields skip the dynamic check (the cost of
/// each is measured beside it).
final class Store {
  /// The states of its nodes, in creation order.
  let slab = NodeSlab()
  let root: KeyNode
  /// ``hashSeed``, kept here for the lookups of every write by keypath.
  private let seed = hashSeed
  // Probed by every write through a keypath string. Without
  // @exclusivity(unchecked) the delivery workload (`ordo-bench --profile
  // delivery`, callgrind) runs 8 % more instructions, a commit at 100 000
  // contracts 7 % more.
  @exclusivity(unchecked) var nodes = UnretainedTable<KeyNode>()
  let journal = Journal()
  /// Which values belong to an owner (SPEC §15).
  let ownership = Ownership()
  /// Scalar sets of the owner's open transaction not yet applied
  /// (``WriteBehind``); ``settle()`` applies them.
  let heldWrites = WriteBehind.make()
  var segments = SegmentTable()
  /// Keypaths holding a value.
  private(set) var valueCount = 0
  /// The last committed transaction id.
  var lastTransaction: UInt64 = 0
  /// Identifies this store's history (SPEC §10): ids, counters and
  /// changed-at compare only within one epoch.
  var epoch: String
  /// The schema every write is checked against (SPEC §14), if any. Set
  /// when the bus is made; replaced only by a bridge's reload
  /// (``Bus/replaceSchema(_:)``), with the lock held and no other thread
  /// using the bus.
  var schema: Schema?

  init() {
    root = KeyNode(key: "", ids: [], hash: hashString(""), slab: slab)
    epoch = makeEpoch()
  }

  deinit { heldWrites.destroy() }

  // MARK: - Resolving keypaths

  /// The node of a keypath the store has. One hash and one probe.
  @inline(__always)
  func existing(_ k: String) -> KeyNode? {
    nodes.find(hashString(k, seed: seed)) { $0.key == k }?.takeUnretainedValue()
  }

  /// The node of a keypath given as UTF-8 bytes, if the store has it.
  /// Out of line, like ``target(_:)``: so that the one write path inlines
  /// into ``Bus/setExisting(utf8:_:)`` instead (28 instructions less per
  /// write from C; `Benchmarks/profile.sh c-abi`).
  @inline(never)
  func existing(utf8 bytes: UnsafeRawBufferPointer) -> Unmanaged<KeyNode>? {
    nodes.find(hashBytes(bytes, seed: seed)) { equalBytes($0.key, bytes) }
  }

  /// Resolves a keypath: one lookup; for a keypath the store does not have,
  /// one parse (which validates it).
  func target(_ k: String) throws(OrdoError) -> Target {
    if let u = nodes.find(hashString(k, seed: seed), { $0.key == k }) { return .node(u._withUnsafeGuaranteedRef { $0.ref }) }
    let parts = try Keypath.parse(k, allowWildcards: false).segments
    return .new(k, segments: parts, ids: parts.map { segments.lookup($0) })
  }

  /// Resolves a keypath for a write: ``target(_:)``, and with a schema the
  /// write checked where the keypath is resolved (SPEC §14).
  @inline(__always)
  func writeTarget(_ k: String, _ op: WriteOp) throws(OrdoError) -> Target {
    guard schema != nil else { return try target(k) }
    return try checkedTarget(k, op)
  }

  /// ``writeTarget(_:_:)`` with a schema: a node the store has is decided
  /// by its rule, read beside the key its lookup compared; anything else by
  /// the schema.
  @inline(never)
  private func checkedTarget(_ k: String, _ op: WriteOp) throws(OrdoError) -> Target {
    if let u = nodes.find(hashString(k, seed: seed), { $0.key == k }) {
      if !u._withUnsafeGuaranteedRef({ $0.schemaRule.admits(op) }) { try schema!.checkWrite(k, op) }
      return .node(u._withUnsafeGuaranteedRef { $0.ref })
    }
    let parts = try Keypath.parse(k, allowWildcards: false).segments
    try schema!.checkWrite(k, op, segments: parts)
    return .new(k, segments: parts, ids: parts.map { segments.lookup($0) })
  }

  /// The node of a target, creating it and its ancestors for a new keypath
  /// (recorded in the journal, so that a rollback or a pass that leaves them
  /// empty prunes them again).
  @inline(__always)
  func node(_ t: Target) -> NodeRef {
    switch t {
    case .node(let n): return n
    case .new(let k, let parts, _): return create(k, parts).ref
    }
  }

  private func create(_ k: String, _ parts: [String]) -> KeyNode {
    var node = root
    var ids: [UInt32] = []
    ids.reserveCapacity(parts.count)
    var prefix = ""
    for (i, part) in parts.enumerated() {
      let id = segments.intern(part)
      ids.append(id)
      prefix = i == 0 ? part : prefix + "." + part
      if let next = node.children[id] {
        node = next
        continue
      }
      let key = i == parts.count - 1 ? k : prefix
      let next = KeyNode(key: key, ids: ids, hash: hashString(key), slab: slab)
      if let schema { next.schemaRule = SchemaRule(schema, Array(parts[...i])) }
      node.children[id] = next
      nodes.insert(next)
      journal.created.append(next)
      node = next
    }
    return node
  }

  /// The node of a keypath, created outside any transaction and pinned (for
  /// handles): it stays for the store's life.
  func pin(_ k: String) throws(OrdoError) -> KeyNode {
    let n: KeyNode
    switch try target(k) {
    case .node(let found): n = found.node
    case .new(let k, let parts, _):
      // Pinned, so never pruned (it stays in `created` until the next reset).
      n = create(k, parts)
    }
    n.ref.state.pointee.pinned = true
    return n
  }

  /// Compiles a pattern against the segment table, interning its segments.
  func compile(_ p: Pattern) -> CPattern {
    CPattern(ids: p.fixed.map { if case .literal(let l) = $0 { segments.intern(l) } else { SegmentTable.any } }, isTree: p.isTree)
  }

  /// Compiles a pattern without interning (for queries).
  func compileQuery(_ p: Pattern) -> CPattern {
    CPattern(ids: p.fixed.map { if case .literal(let l) = $0 { segments.lookup(l) } else { SegmentTable.any } }, isTree: p.isTree)
  }

  /// A compiled pattern as text.
  func text(_ p: CPattern) -> String { p.text(segments) }

  // MARK: - Writes (SPEC §2)

  /// Applies a write to a node and records it in the journal. Returns
  /// whether it altered the current state.
  @inline(__always)
  func apply(_ r: NodeRef, _ op: WriteOp) -> Bool {
    let altered: Bool
    let i: Int
    // A scalar write touches only the node's state (its cache line in the
    // slab), never the node's object.
    let st = r.state
    switch op {
    case .set(let v):
      let p = PackedValue(v)
      // Two branches on purpose: merged into one (a `boxed` flag tested at
      // each step) the scalar write costs 7 instructions more per change
      // (`Benchmarks/profile.sh delivery-handles`, 509 against 516).
      if p.kind != .boxed {
        (altered, i) = applyScalar(r, p)
      } else {
        altered = r.with { !Value.same($0.value, v) }
        i = journal.write(r, ownValue: true, touched: false)
        if altered {
          journal.altering(i, from: r)
          if st.pointee.packed.kind == .absent { valueCount += 1 }
          st.pointee.packed = p
          r.with { $0.boxed = v }
          journal.altered(i, to: v)
        }
      }
    case .remove:
      altered = st.pointee.packed.kind != .absent
      i = journal.write(r, ownValue: true, touched: false)
      if altered {
        journal.altering(i, from: r)
        r.with { setValue($0, nil) }
        journal.altered(i, to: nil)
      }
    case .touch:
      // Every touch is news to the readers after the writer (the value
      // lives in the host), even when the keypath was touched before.
      altered = true
      i = journal.write(r, ownValue: false, touched: true)
    case .removeTree:
      var removedAny = false
      i = journal.write(r, ownValue: false, touched: false)
      r.with { n in
        n.forEachInSubtree { d in
          guard d.hasValue else { return }
          let j = journal.write(d.ref, ownValue: false, touched: false, asKeypath: false)
          journal.altering(j, from: d.ref)
          setValue(d, nil)
          journal.altered(j, to: nil)
          removedAny = true
          journal.addRemoved(i, j)
        }
      }
      altered = removedAny
    }
    return altered
  }

  /// A scalar set: plain bits compared, saved and stored. Returns whether
  /// it altered the current state, and the node's journal record.
  @inline(__always)
  private func applyScalar(_ r: NodeRef, _ p: PackedValue) -> (Bool, Int) {
    let st = r.state
    let altered = st.pointee.packed != p
    let i = journal.write(r, ownValue: true, touched: false)
    if altered {
      journal.altering(i, from: r)
      let old = st.pointee.packed.kind
      if old == .absent { valueCount += 1 } else if old == .boxed { r.with { $0.boxed = nil } }
      st.pointee.packed = p
      journal.altered(i, to: p)
    }
    return (altered, i)
  }

  /// Holds back a scalar set of the owner's open transaction outside
  /// callbacks (``WriteBehind``): `p` is a bool, int64 or double, `r` a
  /// node the store has. Settles first when the buffer is full.
  @inline(__always)
  func holdBack(_ r: NodeRef, _ p: PackedValue) {
    if heldWrites.isFull { settle() }
    heldWrites.append(r, p)
  }

  /// Applies the held-back sets, in the order they were made, as
  /// ``apply(_:_:)`` would have, and notes them for ownership as the one
  /// write path does (``Ownership/isNoting``: they are plain). Every use of
  /// the store but a held-back write comes after it (``Bus/withGate(_:)``).
  @inline(never)
  func settle() {
    let noting = ownership.isNoting
    heldWrites.drain { r, p in
      _ = applyScalar(r, p)
      if noting { ownership.wrote(r.node, Ownership.plain) }
    }
  }

  private func setValue(_ n: KeyNode, _ v: Value?) {
    if !n.hasValue && v != nil { valueCount += 1 } else if n.hasValue && v == nil { valueCount -= 1 }
    n.value = v
  }

  // MARK: - End of a transaction

  /// The keypaths whose counters rise if the transaction commits as
  /// transaction `txn`, with their state after it (for a commit hook).
  /// Also the keypaths whose ownership changes without a change of their
  /// value (their counter and changed-at as they are).
  func pendingChanges(_ txn: UInt64) -> [KeyState] {
    var out: [KeyState] = []
    guard !ownership.isEmpty else {
      for i in 0..<journal.count where journal.counts(i) {
        journal[i].node.with { n in out.append(KeyState(keypath: n.key, value: n.value, counter: n.counter + 1, changedAt: txn)) }
      }
      return out
    }
    let after = ownership.after(journal)
    for i in 0..<journal.count {
      journal[i].node.with { n in
        let owned = after(i)
        if journal.counts(i) {
          out.append(KeyState(keypath: n.key, value: n.value, counter: n.counter + 1, changedAt: txn, owned: owned))
        } else if owned != ownership.owns(n) {
          out.append(KeyState(keypath: n.key, value: n.value, counter: n.counter, changedAt: n.changedAt, owned: owned))
        }
      }
    }
    return out
  }

  /// Commits the journal as transaction `txn`: counters rise once, and
  /// changed-at is set, for every keypath that was touched or whose value
  /// differs from the start (SPEC §2).
  func commit(_ txn: UInt64) {
    for i in 0..<journal.count where journal.counts(i) {
      let st = journal[i].node.state
      st.pointee.counter += 1
      st.pointee.changedAt = txn
    }
    lastTransaction = txn
    settleOwnership()
    reset()
  }

  /// Settles who owns what at the end of a transaction that stays
  /// (committed, or changing nothing).
  @inline(__always)
  func settleOwnership() {
    if !ownership.isEmpty { ownership.settle(journal) }
  }

  /// Restores every value of the transaction and forgets it. Returns the
  /// rollback actions to run (last first) without the lock.
  func rollback() -> [@Sendable () -> Void] {
    for i in 0..<journal.count where journal.netChanged(i) {
      let original = journal.original(i)
      journal[i].node.with { setValue($0, original) }
    }
    let undo = journal.undo
    reset()
    return undo
  }

  /// Forgets the transaction, pruning the nodes it created that hold
  /// nothing at its end: a rolled-back or cancelled transaction leaves the
  /// store as it found it.
  func reset() {
    assert(heldWrites.isEmpty, "a transaction ends with writes held back")
    heldWrites.discard()
    ownership.forget()
    for n in journal.created.reversed() where !n.isKept {
      var parent = root
      for id in n.ids.dropLast() {
        guard let next = parent.children[id] else { break }
        parent = next
      }
      if let last = n.ids.last, parent.children[last] === n {
        parent.children[last] = nil
        nodes.remove(n)
      }
    }
    journal.reset()
    if journal.wrapped {
      root.forEachInSubtree { $0.ref.state.pointee.journalStamp = 0 }
      journal.clearedStamps()
    }
  }

  // MARK: - Reads

  /// The value a thread sees: the live one for the transaction's owner, the
  /// committed one for the others.
  @inline(__always)
  func value(_ n: KeyNode, own: Bool) -> Value? { own ? n.value : journal.committedValue(n) }

  /// Visits the nodes a pattern matches.
  func forEachNode(matching p: CPattern, _ body: (KeyNode) -> Void) {
    func walk(_ node: KeyNode, _ i: Int) {
      if i == p.count {
        if p.isTree {
          node.forEachInSubtree { if $0 !== root { body($0) } }
        } else {
          body(node)
        }
        return
      }
      let id = p[i]
      if id == SegmentTable.any {
        for child in node.children.values { walk(child, i + 1) }
      } else if let child = node.children[id] {
        walk(child, i + 1)
      }
    }
    walk(root, 0)
  }

  // MARK: - Restoring a model (persistence)

  /// Replaces the model with `keypaths` (values, counters, changed-at), the
  /// last transaction id and the epoch. No transaction may be open. Nodes
  /// named by handles stay (emptied when the model does not hold them).
  func restore(epoch: String, lastTransaction: UInt64, keypaths: [KeyState]) throws(OrdoError) {
    var targets: [(Target, KeyState)] = []
    targets.reserveCapacity(keypaths.count)
    for s in keypaths {
      guard s.changedAt <= lastTransaction else {
        throw OrdoError(.invalidArgument, "keypath \"\(s.keypath)\" changed at transaction \(s.changedAt), after the last transaction \(lastTransaction)")
      }
      targets.append((try target(s.keypath), s))
    }
    root.forEachInSubtree { n in
      setValue(n, nil)
      n.counter = 0
      n.changedAt = 0
    }
    var owned: [KeyNode] = []
    for (t, s) in targets {
      let n = node(t).node
      setValue(n, s.value)
      n.counter = s.counter
      n.changedAt = s.changedAt
      if s.owned && s.value != nil { owned.append(n) }
    }
    ownership.restored(owned)
    // The nodes created here are the model's: nothing to prune.
    journal.created.removeAll(keepingCapacity: true)
    self.epoch = epoch
    self.lastTransaction = lastTransaction
  }
}

/// A keypath's state, as a persistence layer stores and restores it.
package struct KeyState: Sendable, Hashable {
  /// The keypath.
  package var keypath: String
  /// Its value; nil for a keypath that holds none (a tombstone).
  package var value: Value?
  /// Committed transactions that changed it.
  package var counter: UInt64
  /// The last committed transaction that changed it.
  package var changedAt: UInt64
  /// Its value belongs to an owner (SPEC §15): restored, it is removed by
  /// ``Bus/releaseRestoredOwnedValues()`` — its owner did not survive.
  package var owned: Bool

  /// Makes a keypath state.
  package init(keypath: String, value: Value?, counter: UInt64, changedAt: UInt64, owned: Bool = false) {
    self.keypath = keypath
    self.value = value
    self.counter = counter
    self.changedAt = changedAt
    self.owned = owned
  }
}

/// A random version-4 UUID, as text: the epoch of a new store.
func makeEpoch() -> String {
  var g = SystemRandomNumberGenerator()
  var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &g) }
  bytes[6] = bytes[6] & 0x0F | 0x40
  bytes[8] = bytes[8] & 0x3F | 0x80
  let hex = bytes.map { b in String(b, radix: 16).count == 1 ? "0" + String(b, radix: 16) : String(b, radix: 16) }
  return [hex[0..<4], hex[4..<6], hex[6..<8], hex[8..<10], hex[10..<16]].map { $0.joined() }.joined(separator: "-")
}
