#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A change-notification bus: a store of values addressed by keypaths, with
/// change counters, write transactions and contracts that are called once per
/// transaction in a deterministic order (SPEC §1–§5).
///
/// Any thread may use a bus. Transactions are serialized: `begin` on one
/// thread waits while another thread's transaction (or its notification
/// pass) runs. Reads never wait for a transaction: from a thread that does not
/// own the running transaction they see the last committed state. The pass
/// runs on the committing thread, and callbacks may call back into the bus
/// from it.
public final class Bus: @unchecked Sendable {
  private let lock = MonitorLock()

  // Transaction ownership.
  @exclusivity(unchecked) private var owner: pthread_t?
  /// Ownership tickets: the next to hand out, and the one whose turn it is.
  @exclusivity(unchecked) private var nextTicket: UInt64 = 0
  @exclusivity(unchecked) private var serving: UInt64 = 0
  @exclusivity(unchecked) private var depth = 0
  @exclusivity(unchecked) private var inPass = false
  /// The contract whose callback runs. Not retained: the running pass's
  /// schedule (or `register`, for an initial call) holds it.
  @exclusivity(unchecked) private var runningRef: Unmanaged<ContractState>?
  private var running: ContractState? {
    @inline(__always) get { runningRef?.takeUnretainedValue() }
    @inline(__always) set { runningRef = newValue.map(Unmanaged.passUnretained) }
  }
  /// Contract checks of the running callback are suspended (owner thread).
  @exclusivity(unchecked) private var suspended = false
  /// Identifies the running pass on the contracts (32 bits, to keep them
  /// small; see ``nextPassSerial()``).
  @exclusivity(unchecked) private var passSerial: UInt32 = 0
  @exclusivity(unchecked) private var schedule = Schedule()
  @exclusivity(unchecked) private var deferredLevelSeeds: [ContractState] = []

  // Store: a tree of keypath nodes, also reachable by full keypath.
  private let root = KeyNode(key: "", ids: [], hash: hashString(""))
  @exclusivity(unchecked) private var nodes = UnretainedTable<KeyNode>()
  @exclusivity(unchecked) private var segments = SegmentTable()
  @exclusivity(unchecked) private var valueCount = 0
  @exclusivity(unchecked) private var journal = Journal()
  @exclusivity(unchecked) private var lastTransaction: UInt64 = 0

  // Contracts.
  @exclusivity(unchecked) private var registry = Registry()
  @exclusivity(unchecked) private var byName = UnretainedTable<ContractState>()
  @exclusivity(unchecked) private var readIndex = PatternIndex()
  @exclusivity(unchecked) private var writeIndex = PatternIndex()
  @exclusivity(unchecked) private var everyTxn: [ContractState] = []
  @exclusivity(unchecked) private var nextID: ContractID = 1
  /// Bumped by every registration and unregistration; node reader caches
  /// of older generations are stale.
  @exclusivity(unchecked) private var indexGeneration: UInt64 = 0
  @exclusivity(unchecked) private var markSerial: UInt64 = 0

  // Statistics and failures.
  @exclusivity(unchecked) private var notifications: UInt64 = 0
  @exclusivity(unchecked) private var failures: UInt64 = 0
  @exclusivity(unchecked) private var rollbacks: UInt64 = 0
  @exclusivity(unchecked) private var failureHandler: (@Sendable (ContractFailure) -> Void)?

  /// Makes an empty bus.
  public init() {}

  deinit {
    // An open transaction's journal holds keypath nodes in cycles (removeTree
    // lists a node in its own `removed`): drop them, or a bus freed with a
    // transaction open leaks its nodes and the contracts they cache.
    journal.reset()
  }

  // MARK: - Ownership

  private func isOwner() -> Bool {
    guard let o = owner else { return false }
    return pthread_equal(o, currentThread()) != 0
  }

  /// Waits until no other thread owns a transaction and takes ownership,
  /// in the order the threads asked (a ticket each), so that a thread that
  /// commits back to back cannot starve others waiting to begin, register or
  /// unregister. Returns false when the calling thread already owned it.
  /// Lock held.
  private func acquire() -> Bool {
    if isOwner() { return false }
    let ticket = nextTicket
    nextTicket &+= 1
    while owner != nil || serving != ticket { lock.wait() }
    owner = currentThread()
    return true
  }

  /// Gives up ownership to the next ticket. Lock held.
  private func release() {
    owner = nil
    serving &+= 1
    lock.broadcast()
  }

  // MARK: - Transactions

  /// Begins a write transaction, or joins the one this thread has open (or
  /// the running pass, from a callback). Waits while another thread's
  /// transaction runs.
  public func begin() {
    lock.lock()
    _ = acquire()
    depth += 1
    lock.unlock()
  }

  /// Commits. The outermost commit runs the notification pass and returns
  /// after it with the transaction id (0 when nothing changed); an inner
  /// commit returns 0.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` without a matching `begin`.
  @discardableResult
  public func commit() throws(OrdoError) -> UInt64 {
    lock.lock()
    guard isOwner(), depth > 0 else {
      lock.unlock()
      throw OrdoError(.noTransaction, "commit without a transaction: call begin first")
    }
    depth -= 1
    if depth > 0 || inPass || runningRef != nil {
      lock.unlock()
      return 0
    }
    let txn = runPass()
    lock.unlock()
    return txn
  }

  /// Discards every write of the whole (outermost) transaction; nothing is
  /// notified and no counter changes.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` without a transaction;
  ///   ``OrdoError/Code/invalidArgument`` inside a callback (a pass cannot be
  ///   undone).
  public func rollback() throws(OrdoError) {
    lock.lock()
    if isOwner() && (inPass || runningRef != nil) {
      lock.unlock()
      throw OrdoError(.invalidArgument, "rollback inside a contract callback: a notification pass cannot be undone")
    }
    guard isOwner(), depth > 0 else {
      lock.unlock()
      throw OrdoError(.noTransaction, "rollback without a transaction: call begin first")
    }
    let undo = restoreJournal()
    depth = 0
    rollbacks += 1
    release()
    lock.unlock()
    for action in undo.reversed() { action() }
  }

  /// Runs `body` in a transaction and commits it; when `body` throws, rolls
  /// the transaction back (the whole outermost one) and rethrows.
  ///
  /// - Returns: the transaction id, 0 if nothing changed or if this joined an
  ///   outer transaction.
  @discardableResult
  public func transaction(_ body: () throws -> Void) throws -> UInt64 {
    begin()
    do {
      try body()
    } catch {
      if (try? rollback()) == nil { _ = try? commit() }
      throw error
    }
    return try commit()
  }

  /// Restores the values of the transaction and forgets it. Lock held.
  private func restoreJournal() -> [@Sendable () -> Void] {
    journal.originals.forEach { n in
      if !Value.same(n.value, n.original) { setValue(n, n.original) }
    }
    let undo = journal.undo
    pruneCreated()
    journal.reset()
    return undo
  }

  /// The number of keypath nodes the store keeps (for tests).
  var nodeCount: Int {
    lock.lock()
    defer { lock.unlock() }
    return nodes.count
  }

  /// Forgets the nodes this transaction created that hold nothing at its end
  /// (no value, no counter, no descendants): a rolled-back or cancelled
  /// transaction leaves the store as it found it. Lock held.
  private func pruneCreated() {
    for n in journal.created.reversed() where n.value == nil && n.counter == 0 && n.children.isEmpty {
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
  }

  /// Whether the calling thread has a transaction open or runs a callback:
  /// then writes are accepted and a `begin` joins what is open. Bridges use
  /// it to hold remote work back while the host thread's transaction is open.
  public var isInTransaction: Bool {
    lock.lock()
    defer { lock.unlock() }
    return isOwner() && (depth > 0 || inPass || runningRef != nil)
  }

  /// The id of the last committed transaction that changed something (0 if
  /// none). While a pass runs, its thread sees the pass's id; other threads
  /// see the last committed one (the pass's writes are not visible to them).
  public var transactionID: UInt64 {
    lock.lock()
    defer { lock.unlock() }
    return visibleTransaction(own: isOwner())
  }

  /// The last transaction id as a thread sees it: a pass's id is committed
  /// only when the pass ends, for threads other than its own. Lock held.
  private func visibleTransaction(own: Bool) -> UInt64 {
    inPass && !own ? lastTransaction - 1 : lastTransaction
  }

  /// Registers an action that runs if the transaction open on this thread is
  /// rolled back: for host-owned values that must be restored with it.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` outside a transaction or
  ///   callback.
  public func onRollback(_ action: @escaping @Sendable () -> Void) throws(OrdoError) {
    lock.lock()
    defer { lock.unlock() }
    guard isOwner(), depth > 0 || inPass || runningRef != nil else {
      throw OrdoError(.noTransaction, "onRollback outside a transaction")
    }
    if !inPass { journal.undo.append(action) }
  }

  // MARK: - Keypath nodes

  /// The node of a keypath, creating it (and its ancestors) when `create`.
  /// Validates the keypath the first time it is seen. Lock held.
  private func node(_ k: String, create: Bool) throws(OrdoError) -> KeyNode? {
    if let n = lookup(k) { return n }
    let (parts, _) = try Keypath.parse(k, allowWildcards: false)
    guard create else { return nil }
    var node = root
    var prefix = ""
    var ids: [UInt32] = []
    ids.reserveCapacity(parts.count)
    for (i, part) in parts.enumerated() {
      let id = segments.intern(part)
      ids.append(id)
      prefix = i == 0 ? part : prefix + "." + part
      if let next = node.children[id] {
        node = next
      } else {
        let key = i == parts.count - 1 ? k : prefix
        let next = KeyNode(key: key, ids: ids, hash: hashString(key))
        node.children[id] = next
        nodes.insert(next)
        journal.created.append(next)
        node = next
      }
    }
    return node
  }

  /// The node of a keypath the store has, unretained (the store keeps it).
  /// Lock held.
  @inline(__always)
  private func existing(_ k: String) -> Unmanaged<KeyNode>? { nodes.find(hashString(k)) { $0.key == k } }

  /// The node of a keypath the store has. Lock held.
  @inline(__always)
  private func lookup(_ k: String) -> KeyNode? { existing(k)?.takeUnretainedValue() }

  /// The registered contract with this name. Lock held.
  private func findContract(named name: String) -> ContractState? { byName.find(hashString(name)) { $0.name == name }?.takeUnretainedValue() }

  /// The segment ids of a keypath without creating a node: unknown segments
  /// get ``SegmentTable/unknown``. Lock held.
  private func ids(_ k: String) throws(OrdoError) -> [UInt32] {
    if let n = lookup(k) { return n.ids }
    return try Keypath.parse(k, allowWildcards: false).segments.map { segments.lookup($0) }
  }

  /// Compiles a pattern against the segment table. Lock held.
  private func compile(_ p: Pattern) -> CPattern {
    CPattern(ids: p.fixed.map { if case .literal(let l) = $0 { segments.intern(l) } else { SegmentTable.any } }, isTree: p.isTree)
  }

  /// Compiles a pattern without interning (for queries). Lock held.
  private func compileQuery(_ p: Pattern) -> CPattern {
    CPattern(ids: p.fixed.map { if case .literal(let l) = $0 { segments.lookup(l) } else { SegmentTable.any } }, isTree: p.isTree)
  }

  /// A compiled pattern as text. Lock held.
  private func text(_ p: CPattern) -> String { p.text(segments) }

  /// A list of compiled patterns as text, for messages. Lock held.
  private func text(_ ps: [CPattern]) -> String { "[" + ps.map(text).joined(separator: ", ") + "]" }

  private func setValue(_ n: KeyNode, _ v: Value?) {
    if n.value == nil && v != nil { valueCount += 1 } else if n.value != nil && v == nil { valueCount -= 1 }
    n.value = v
  }

  /// The contracts whose read sets a write to `n` affects, each once. Cached
  /// on the node until the next registration or unregistration. Lock held.
  private func readers(_ n: KeyNode) -> Readers {
    if n.readersGeneration == indexGeneration { return n.readers }
    var list: [ContractState] = []
    readIndex.forEachReader(affectedBy: n.ids) { list.append($0) }
    if list.count > 1 {
      // A contract with several patterns affected is listed once.
      list.sort { $0.id < $1.id }
      var last: ContractState?
      list.removeAll { r in
        defer { last = r }
        return r === last
      }
    }
    n.readers = Readers(list)
    n.readersGeneration = indexGeneration
    return n.readers
  }

  // MARK: - Writes

  private enum WriteOp {
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

  /// Sets the value of `keypath`.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``, ``OrdoError/Code/noTransaction``,
  ///   and inside a callback ``OrdoError/Code/contractViolation`` or
  ///   ``OrdoError/Code/stability``.
  public func set(_ keypath: String, _ value: Value) throws(OrdoError) {
    lock.lock()
    // The common case: an existing keypath written by the transaction's
    // owner outside callbacks, which needs no contract check.
    if canWriteUnchecked, let n = existing(keypath) {
      n._withUnsafeGuaranteedRef { setUnchecked($0, value) }
      lock.unlock()
      return
    }
    lock.unlock()
    try write(keypath, .set(value))
  }

  /// Sets the value of a keypath given as UTF-8 bytes, when that is a plain
  /// store: the keypath exists in the store and the calling thread owns a
  /// transaction outside callbacks. Returns false, doing nothing, in every
  /// other case; the caller then calls ``set(_:_:)`` with a `String`, which
  /// validates and checks everything. For bridges that receive keypaths as
  /// C strings: the common write needs no `String` made.
  public func setExisting(utf8 keypath: UnsafeBufferPointer<UInt8>, _ value: Value) -> Bool {
    let bytes = UnsafeRawBufferPointer(keypath)
    lock.lock()
    defer { lock.unlock() }
    guard canWriteUnchecked, let n = nodes.find(hashBytes(bytes), { equalBytes($0.key, bytes) }) else { return false }
    n._withUnsafeGuaranteedRef { setUnchecked($0, value) }
    return true
  }

  /// Whether a write by the calling thread needs no contract check: it owns
  /// an open transaction and no callback runs. Lock held.
  @inline(__always)
  private var canWriteUnchecked: Bool { runningRef == nil && !inPass && depth > 0 && !suspended && isOwner() }

  /// A set outside callbacks (see ``canWriteUnchecked``). Lock held.
  @inline(__always)
  private func setUnchecked(_ n: KeyNode, _ value: Value) {
    journal.record(n)
    n.external = true
    n.ownValue = true
    _ = store(n, value)
  }

  /// Marks `keypath` changed without storing a value (for values that live
  /// in the host program). Throws like ``set(_:_:)``.
  public func touch(_ keypath: String) throws(OrdoError) {
    try write(keypath, .touch)
  }

  /// Removes the value of `keypath` (no change if it has none). Throws like
  /// ``set(_:_:)``.
  public func remove(_ keypath: String) throws(OrdoError) {
    try write(keypath, .remove)
  }

  /// Removes the values of `keypath` and of every descendant. Inside a
  /// callback the write set must allow the keypath and all its descendants
  /// (e.g. `k.**`). Throws like ``set(_:_:)``.
  public func removeTree(_ keypath: String) throws(OrdoError) {
    try write(keypath, .removeTree)
  }

  /// Writes several keypaths at once, all or nothing: every keypath and every
  /// contract rule is checked before anything changes. Used by surfaces that
  /// receive a set of writes in one message (D-Bus `Commit`, `Complete`).
  ///
  /// - Throws: like ``set(_:_:)``, for the first write that is refused; then
  ///   none of the writes is applied.
  public func write(_ batch: [Write]) throws(OrdoError) {
    guard !batch.isEmpty else { return }
    lock.lock()
    defer { lock.unlock() }
    var ops: [(key: String, op: WriteOp, node: KeyNode?, ids: [UInt32])] = []
    ops.reserveCapacity(batch.count)
    for w in batch {
      let (k, op): (String, WriteOp)
      switch w {
      case .set(let key, let v): (k, op) = (key, .set(v))
      case .touch(let key): (k, op) = (key, .touch)
      case .remove(let key): (k, op) = (key, .remove)
      case .removeTree(let key): (k, op) = (key, .removeTree)
      }
      let (n, keyIDs) = try resolve(k)  // every keypath is valid before anything else
      ops.append((k, op, n, keyIDs))
    }
    try checkWritable(ops[0].key, ops[0].op)
    if let c = running {
      for o in ops { try checkWrite(c, o.key, o.ids, o.node, o.op) }
    }
    for o in ops { try applyChecked(o.key, o.node, o.op) }
  }

  private func write(_ k: String, _ op: WriteOp) throws(OrdoError) {
    lock.lock()
    defer { lock.unlock() }
    let (n, keyIDs) = try resolve(k)
    try checkWritable(k, op)
    if let c = running { try checkWrite(c, k, keyIDs, n, op) }
    try applyChecked(k, n, op)
  }

  /// A written keypath's node if the store has one, and its segment ids;
  /// throws for an invalid keypath. Lock held.
  private func resolve(_ k: String) throws(OrdoError) -> (KeyNode?, [UInt32]) {
    if let n = lookup(k) { return (n, n.ids) }
    return (nil, try ids(k))
  }

  /// Checks that the calling thread may write `keypath` now, without
  /// writing: a transaction or callback is open and, in a callback, the
  /// contract's write rules allow it. For host-owned values (see
  /// ``HostedProperty``), whose equal-value set changes nothing but must
  /// obey the same rules as a stored value's (SPEC §5: stability is checked
  /// before the equal-value test).
  func checkWrite(_ keypath: String) throws(OrdoError) {
    lock.lock()
    defer { lock.unlock() }
    let (n, keyIDs) = try resolve(keypath)
    try checkWritable(keypath, .touch)
    if let c = running { try checkWrite(c, keypath, keyIDs, n, .touch) }
  }

  /// Inside a pass only callbacks write; outside, a transaction or an
  /// initial call must be open on this thread. Lock held.
  private func checkWritable(_ k: String, _ op: WriteOp) throws(OrdoError) {
    guard isOwner(), !suspended, inPass ? runningRef != nil : (depth > 0 || runningRef != nil) else {
      throw OrdoError(.noTransaction, "\(op.name) \"\(k)\" outside a transaction: call begin first")
    }
  }

  /// Applies a checked write (creating the keypath's node if needed) and,
  /// inside a pass, schedules what it affects. Lock held.
  private func applyChecked(_ k: String, _ resolved: KeyNode?, _ op: WriteOp) throws(OrdoError) {
    // Without a node resolved beforehand, `node` finds the one an earlier
    // write of the same batch created, or creates it.
    let found = if let resolved { resolved } else { try node(k, create: true) }
    guard let n = found else { return }
    let c = running
    if apply(n, op, by: c), inPass, let c {
      schedule(readersOf: n, after: c)
    }
  }

  /// The running contract's write rules (SPEC §5). Lock held.
  private func checkWrite(_ c: ContractState, _ k: String, _ keyIDs: [UInt32], _ n: KeyNode?, _ op: WriteOp) throws(OrdoError) {
    var allowed: Int?
    for (i, w) in c.writes.enumerated() {
      if case .removeTree = op { if w.coversTree(keyIDs) { allowed = i; break } } else if w.matches(keyIDs) {
        allowed = i
        break
      }
    }
    guard let i = allowed else {
      let set = c.writes.isEmpty ? "its write set is empty" : "its write set is [\(c.writes.map(text).joined(separator: ", "))]"
      let what: String
      if case .removeTree = op {
        what = "removeTree \"\(k)\" (needs a pattern covering \"\(k)\" and all its descendants, such as \"\(k).**\")"
      } else {
        what = "\(op.name) \"\(k)\""
      }
      throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not \(what): \(set)")
    }
    let key = c.key
    var earlier: ContractState?
    let check: (ContractState) -> Void = { r in
      if r !== c, r.key < key, earlier == nil || r.key < earlier!.key { earlier = r }
    }
    if let n {
      readers(n).forEach(check)
    } else {
      readIndex.forEachReader(affectedBy: keyIDs, check)
    }
    if let e = earlier {
      throw OrdoError(.stability, "contract \"\(c.name)\" may not \(op.name) \"\(k)\": contract \"\(e.name)\", placed before it in the pass, reads it")
    }
    c.usedWrites |= ContractState.bit(i)
  }

  /// Applies a write to the store and the journal. Returns whether it
  /// altered the current state. Lock held.
  private func apply(_ n: KeyNode, _ op: WriteOp, by c: ContractState?) -> Bool {
    journal.record(n)
    if let c {
      if !n.writtenBy.contains(c.id) {
        n.writtenBy.append(c.id)
        n.hasLists = true
      }
    } else {
      n.external = true
    }
    switch op {
    case .set(let v):
      n.ownValue = true
      return store(n, v)
    case .remove:
      n.ownValue = true
      return store(n, nil)
    case .touch:
      // Every touch is news to the readers after the writer (the value lives
      // in the host), even when the keypath was touched before.
      n.touched = true
      return true
    case .removeTree:
      var altered = false
      var removed = n.removed
      n.forEachInSubtree { d in
        guard d.value != nil else { return }
        altered = store(d, nil) || altered
        if !removed.contains(where: { $0 === d }) { removed.append(d) }
      }
      n.removed = removed
      if !removed.isEmpty { n.hasLists = true }
      return altered
    }
  }

  /// Stores a value (nil: removes), recording the original. Returns whether
  /// the value changed. Lock held.
  private func store(_ n: KeyNode, _ v: Value?) -> Bool {
    if Value.same(n.value, v) { return false }
    journal.saveOriginal(n)
    setValue(n, v)
    return true
  }

  // MARK: - The notification pass

  /// Schedules the contracts a write to `n` affects. Lock held.
  private func schedule(readersOf n: KeyNode, after: ContractState) {
    let afterKey = after.key
    readers(n).forEach { r in
      guard r.registered, r.calledSerial != passSerial, r !== after, !(r.key < afterKey) else { return }
      trigger(r, by: n)
    }
  }

  /// Schedules `c` in the running pass unless it is already. Lock held.
  @inline(__always)
  private func enqueue(_ c: ContractState) {
    guard c.scheduledSerial != passSerial else { return }
    c.scheduledSerial = passSerial
    c.clearTriggers()
    schedule.push(c)
  }

  /// Schedules `c` (if it is not yet) for a write to `n`. Lock held.
  @inline(__always)
  private func trigger(_ c: ContractState, by n: KeyNode) {
    enqueue(c)
    c.addTrigger(n)
  }

  /// Calls a popped contract if it is due (SPEC §5). Lock held.
  private func passStep(_ c: ContractState, _ txn: UInt64) {
    guard c.registered, c.calledSerial != passSerial else {
      c.clearTriggers()
      return
    }
    c.calledSerial = passSerial
    let serial = journal.serial
    let changed: ChangedKeypaths
    if c.kind == .everyTransaction {
      var keys: [String] = []
      journal.records.forEach { n in if Journal.isChanged(n, serial) { keys.append(n.key) } }
      changed = ChangedKeypaths(keys)
    } else {
      switch c.triggers {
      case .none: changed = []
      case .one(let u): changed = u._withUnsafeGuaranteedRef { n in Journal.isChanged(n, serial) ? ChangedKeypaths(single: n.key) : [] }
      case .many(let list):
        markSerial += 1
        var keys: [String] = []
        for n in list where n.bumpSerial != markSerial && Journal.isChanged(n, serial) {
          n.bumpSerial = markSerial
          keys.append(n.key)
        }
        changed = ChangedKeypaths(keys)
      }
    }
    c.clearTriggers()
    if changed.isEmpty && !c.initialPending { return }
    c.initialPending = false
    call(c, Notification(transaction: txn, contract: c.id, changed: changed))
  }

  /// Runs the pass of the transaction in the journal and commits it. Lock
  /// held and ownership held on entry; ownership released on return.
  private func runPass() -> UInt64 {
    nextPassSerial()
    var anyChanged = false
    let serial = journal.serial
    // Schedule the readers of what changed (evaluated before any callback
    // runs).
    journal.records.forEach { n in
      guard Journal.isChanged(n, serial) else { return }
      anyChanged = true
      // A contract's own initial-call writes do not schedule it; a keypath
      // also written by another contract (or outside callbacks) does.
      let skip: ContractID = n.external || !n.hasLists || n.writtenBy.count != 1 ? 0 : n.writtenBy[0]
      readers(n).forEach { r in
        guard r.registered && r.calledSerial != passSerial && r.id != skip else { return }
        trigger(r, by: n)
      }
    }
    guard anyChanged else {
      pruneCreated()
      journal.reset()
      depth = 0
      release()
      return 0
    }
    lastTransaction += 1
    let txn = lastTransaction
    inPass = true
    for c in everyTxn where c.calledSerial != passSerial { enqueue(c) }
    while let c = schedule.pop() {
      c._withUnsafeGuaranteedRef { passStep($0, txn) }
    }
    // Commit: counters rise once for every keypath that was touched or whose
    // value differs from its value at the start of the transaction.
    markSerial += 1
    let bump = markSerial
    journal.records.forEach { n in
      if n.touched && n.bumpSerial != bump {
        n.bumpSerial = bump
        n.counter += 1
      }
    }
    journal.originals.forEach { n in
      if n.bumpSerial != bump && !Value.same(n.original, n.value) {
        n.bumpSerial = bump
        n.counter += 1
      }
    }
    pruneCreated()
    journal.reset()
    inPass = false
    depth = 0
    running = nil
    if !deferredLevelSeeds.isEmpty {
      let seeds = deferredLevelSeeds
      deferredLevelSeeds.removeAll()
      propagateLevels(seeds)
    }
    release()
    return txn
  }

  /// Starts a new pass serial. When the 32 bits run out (after four
  /// billion passes) every contract's stamps are cleared first, so that no
  /// stale stamp can equal a new serial. Lock held.
  private func nextPassSerial() {
    if passSerial == .max {
      registry.forEach { c in
        c.scheduledSerial = 0
        c.calledSerial = 0
      }
      passSerial = 0
    }
    passSerial += 1
  }

  /// Calls a contract's callback without holding the lock. Lock held on
  /// entry and on return.
  private func call(_ c: ContractState, _ note: Notification) {
    let previous = runningRef
    runningRef = Unmanaged.passUnretained(c)
    c.calls += 1
    c.lastTransaction = note.transaction
    notifications += 1
    let callback = c.callback
    lock.unlock()
    var failure: (any Error)?
    do { try callback?(note) } catch { failure = error }
    lock.lock()
    runningRef = previous
    if let failure {
      c.failures += 1
      failures += 1
      let report = ContractFailure(contract: c.id, name: c.name, transaction: note.transaction, message: String(describing: failure))
      if let handler = failureHandler {
        lock.unlock()
        handler(report)
        lock.lock()
      }
    }
  }

  /// Sets the function told about every callback that fails (a thrown
  /// error), with the contract's name and the transaction id. It runs on the
  /// committing thread, without the bus's lock.
  public func onFailure(_ handler: (@Sendable (ContractFailure) -> Void)?) {
    lock.lock()
    failureHandler = handler
    lock.unlock()
  }

  /// Runs `body` with the running callback's contract checks suspended on
  /// this thread: reads see the live state without contract checks, writes
  /// fail with ``OrdoError/Code/noTransaction``, registrations during a pass
  /// are placed relative to the suspended contract. For bridges that wait
  /// inside a callback (a remote writer contract awaiting its peer's answer)
  /// and meanwhile serve other clients on the same thread.
  public func withCallbackSuspended<T>(_ body: () throws -> T) rethrows -> T {
    lock.lock()
    let was = suspended
    let own = isOwner()
    if own { suspended = true }
    lock.unlock()
    defer {
      if own {
        lock.lock()
        suspended = was
        lock.unlock()
      }
    }
    return try body()
  }

  // MARK: - Reads

  /// Checks a read of `k` by the running callback, if any. Lock held.
  private func checkReadIfInCallback(_ k: String, _ n: KeyNode?) throws(OrdoError) -> Bool {
    let own = isOwner()
    if own, let c = running, !suspended {
      let keyIDs: [UInt32]
      if let n { keyIDs = n.ids } else { keyIDs = try ids(k) }
      try checkRead(c, k, keyIDs)
    }
    return own
  }

  /// The value of `keypath`, or nil if it holds none. Inside a callback the
  /// keypath must be in the contract's read or write set. From a thread that
  /// does not own the running transaction, the last committed value.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``, ``OrdoError/Code/contractViolation``.
  public func value(_ keypath: String) throws(OrdoError) -> Value? {
    lock.lock()
    defer { lock.unlock() }
    let n = lookup(keypath)
    if n == nil { _ = try ids(keypath) }
    let own = try checkReadIfInCallback(keypath, n)
    guard let n else { return nil }
    return own ? n.value : journal.committedValue(n)
  }

  /// The current values of a notification's changed keypaths that hold one,
  /// for surfaces that deliver values with a notification (D-Bus `Notify`).
  /// No contract check applies: these are the keypaths the contract was
  /// notified of. From a thread that does not own the running transaction,
  /// committed values.
  public func values(of note: Notification) -> [String: Value] {
    lock.lock()
    defer { lock.unlock() }
    let own = isOwner()
    var out: [String: Value] = [:]
    for k in note.changed {
      guard let n = lookup(k) else { continue }
      if let v = own ? n.value : journal.committedValue(n) { out[k] = v }
    }
    return out
  }

  /// The value of `keypath`. Throws ``OrdoError/Code/notFound`` when it holds
  /// none, and like ``value(_:)``.
  public func get(_ keypath: String) throws(OrdoError) -> Value {
    guard let v = try value(keypath) else {
      throw OrdoError(.notFound, "\"\(keypath)\" holds no value")
    }
    return v
  }

  /// The number of committed transactions that changed `keypath` itself (0 if
  /// none). Inside a callback the keypath must be readable by the contract.
  public func counter(_ keypath: String) throws(OrdoError) -> UInt64 {
    lock.lock()
    defer { lock.unlock() }
    let n = lookup(keypath)
    if n == nil { _ = try ids(keypath) }
    _ = try checkReadIfInCallback(keypath, n)
    return n?.counter ?? 0
  }

  /// Declares a read of a host-owned value at `keypath` (see
  /// ``HostedProperty``): inside a callback, checks it against the
  /// contract's read and write sets like a read of a stored value.
  public func access(_ keypath: String) throws(OrdoError) {
    lock.lock()
    defer { lock.unlock() }
    let n = lookup(keypath)
    if n == nil { _ = try ids(keypath) }
    _ = try checkReadIfInCallback(keypath, n)
  }

  /// The values and counters of every keypath matching one of the patterns,
  /// and the last committed transaction id, read at one moment.
  public func snapshot(_ patterns: [String]) throws(OrdoError) -> (values: [String: Value], counters: [String: UInt64], transaction: UInt64) {
    var parsed: [Pattern] = []
    for p in patterns { parsed.append(try Pattern(p)) }
    lock.lock()
    defer { lock.unlock() }
    let own = isOwner()
    let compiled = parsed.map(compileQuery)
    if own, let c = running, !suspended, c.kind != .everyTransaction {
      for (i, p) in compiled.enumerated() where !c.reads.contains(where: { $0.covers(p) }) && !c.writes.contains(where: { $0.covers(p) }) {
        throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not read \"\(patterns[i])\": outside its read and write sets")
      }
    }
    var vs: [String: Value] = [:]
    var cs: [String: UInt64] = [:]
    for p in compiled {
      forEachNode(matching: p) { n in
        if let v = own ? n.value : journal.committedValue(n) { vs[n.key] = v }
        if n.counter > 0 { cs[n.key] = n.counter }
      }
    }
    return (vs, cs, visibleTransaction(own: own))
  }

  /// Visits the nodes a pattern matches. Lock held.
  private func forEachNode(matching p: CPattern, _ body: (KeyNode) -> Void) {
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

  /// The running contract's read rule (SPEC §5). Lock held.
  private func checkRead(_ c: ContractState, _ k: String, _ keyIDs: [UInt32]) throws(OrdoError) {
    if c.kind == .everyTransaction { return }
    for (i, r) in c.reads.enumerated() where r.matches(keyIDs) {
      c.usedReads |= ContractState.bit(i)
      return
    }
    for w in c.writes where w.matches(keyIDs) { return }
    throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not read \"\(k)\": its read set is [\(c.reads.map(text).joined(separator: ", "))] and its write set [\(c.writes.map(text).joined(separator: ", "))]")
  }

  // MARK: - Contracts

  /// Registers a contract (SPEC §4). With ``ContractFlags/notifyInitial`` the
  /// contract is called once right away: during this call outside a pass
  /// (its writes then form a transaction of their own, committed when the
  /// callback returns), or at its position in the running pass.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` (empty name, writes on an
  ///   every-transaction contract), ``OrdoError/Code/invalidKeypath``,
  ///   ``OrdoError/Code/duplicateName``, ``OrdoError/Code/cycle``,
  ///   ``OrdoError/Code/orderConflict``. Nothing changes when it throws.
  @discardableResult
  public func register(_ spec: ContractSpec) throws(OrdoError) -> ContractHandle {
    guard !spec.name.isEmpty else { throw OrdoError(.invalidArgument, "a contract needs a non-empty name") }
    guard spec.name.utf8.count <= 255 else {
      throw OrdoError(.invalidArgument, "contract name \"\(spec.name.prefix(40))…\" is longer than 255 bytes")
    }
    var readPatterns: [Pattern] = []
    var writePatterns: [Pattern] = []
    for r in spec.reads { readPatterns.append(try Pattern(r)) }
    for w in spec.writes { writePatterns.append(try Pattern(w)) }
    if readPatterns.isEmpty && !writePatterns.isEmpty {
      throw OrdoError(.invalidArgument, "contract \"\(spec.name)\" has an empty read set (every-transaction) and may not write; its write set is [\(spec.writes.joined(separator: ", "))]")
    }
    lock.lock()
    let acquired = acquire()
    let reads = readPatterns.map(compile)
    let writes = writePatterns.map(compile)
    let c = ContractState(id: nextID, name: spec.name, reads: reads, writes: writes, priority: spec.priority, callback: spec.callback)
    do {
      try admit(c, initial: spec.flags.contains(.notifyInitial))
    } catch {
      if acquired { release() }
      lock.unlock()
      throw error
    }
    nextID += 1
    insert(c)
    let handle = ContractHandle(id: c.id, name: c.name, bus: self)
    guard spec.flags.contains(.notifyInitial) else {
      if acquired { release() }
      lock.unlock()
      return handle
    }
    if inPass {
      c.initialPending = true
      enqueue(c)
      lock.unlock()
      return handle
    }
    // Initial call outside a pass: its writes form a transaction of their own
    // (or join the one this thread has open). Like a callback in a pass, it
    // starts at depth 0: its begin/commit pairs join, a commit without begin
    // fails, and a begin it leaves open ends with the call instead of keeping
    // the caller's transaction open.
    let outer = depth
    let nested = runningRef != nil
    depth = 0
    call(c, Notification(transaction: lastTransaction, contract: c.id, changed: []))
    depth = outer
    if outer == 0 && !nested {
      _ = runPass()
    }
    lock.unlock()
    return handle
  }

  /// Registers a contract. See ``register(_:)``.
  @discardableResult
  public func register(
    name: String, reads: [String], writes: [String] = [], priority: Int32? = nil, flags: ContractFlags = [],
    callback: @escaping ContractCallback
  ) throws(OrdoError) -> ContractHandle {
    try register(ContractSpec(name: name, reads: reads, writes: writes, priority: priority, flags: flags, callback: callback))
  }

  /// The registration checks (SPEC §4). Changes nothing. Lock held.
  private func admit(_ c: ContractState, initial: Bool) throws(OrdoError) {
    if findContract(named: c.name) != nil {
      throw OrdoError(.duplicateName, "a contract named \"\(c.name)\" is already registered on this bus")
    }
    switch c.kind {
    case .everyTransaction:
      break
    case .priority:
      for r in c.reads {
        var writer: ContractState?
        writeIndex.forEachWriter(affecting: r) { w in if w.isData, writer == nil { writer = w } }
        if let w = writer {
          throw OrdoError(.orderConflict, "priority contract \"\(c.name)\" reads \"\(text(r))\", which data contract \"\(w.name)\" may write; priority contracts run before all data contracts")
        }
      }
    case .data:
      for w in c.writes {
        var reader: ContractState?
        readIndex.forEachReader(affectedBy: w.ids) { r in if r.kind == .priority, reader == nil { reader = r } }
        if let r = reader {
          throw OrdoError(.orderConflict, "data contract \"\(c.name)\" may write \"\(text(w))\", which priority contract \"\(r.name)\" reads; priority contracts run before all data contracts")
        }
      }
      try checkCycle(c)
      c.level = level(of: c)
    }
    let key = c.key
    // A contract may not read what a contract running later declares as a
    // concrete write, nor concretely write what an earlier one reads. Between
    // two data contracts levels already order writer before reader (levels
    // downstream of a new contract rise after it is admitted).
    for r in c.reads {
      var later: ContractState?
      writeIndex.forEachWriter(affecting: r) { w in
        if later == nil, !(w.isData && c.isData), w.key > key, w.writes.contains(where: { $0.isConcrete && $0.mayAffect(reader: r) }) { later = w }
      }
      if let w = later {
        throw OrdoError(.orderConflict, "contract \"\(c.name)\" reads \"\(text(r))\", which contract \"\(w.name)\", running after it, writes")
      }
    }
    for w in c.writes where w.isConcrete {
      var earlier: ContractState?
      readIndex.forEachReader(affectedBy: w.ids) { r in
        if earlier == nil, r !== c, !(r.isData && c.isData), r.key < key { earlier = r }
      }
      if let r = earlier {
        throw OrdoError(.orderConflict, "contract \"\(c.name)\" writes \"\(text(w))\", which contract \"\(r.name)\", running before it, reads")
      }
    }
    if initial && inPass, let current = running, key < current.key {
      throw OrdoError(.orderConflict, "contract \"\(c.name)\" asks for an initial call, but its position in the pass is before the running contract \"\(current.name)\"")
    }
  }

  /// Refuses a data contract that would close a cycle. Lock held.
  private func checkCycle(_ c: ContractState) throws(OrdoError) {
    guard !c.writes.isEmpty else { return }
    var upstream = Set<ObjectIdentifier>()
    for r in c.reads {
      writeIndex.forEachWriter(affecting: r) { w in if w.isData { upstream.insert(ObjectIdentifier(w)) } }
    }
    guard !upstream.isEmpty else { return }
    // Depth-first search downstream of c for one of its writers.
    var visited = Set<ObjectIdentifier>()
    var parent: [ObjectIdentifier: ContractState] = [:]
    var stack: [ContractState] = []
    for d in downstream(c) where visited.insert(ObjectIdentifier(d)).inserted {
      stack.append(d)
    }
    while let x = stack.popLast() {
      if upstream.contains(ObjectIdentifier(x)) {
        var names = [x.name]
        var node = x
        while let p = parent[ObjectIdentifier(node)] {
          names.append(p.name)
          node = p
        }
        let path = ([c.name] + names.reversed() + [c.name]).joined(separator: " → ")
        throw OrdoError(.cycle, "contract \"\(c.name)\" would close a dependency cycle: \(path)")
      }
      for d in downstream(x) where d !== c && visited.insert(ObjectIdentifier(d)).inserted {
        parent[ObjectIdentifier(d)] = x
        stack.append(d)
      }
    }
  }

  /// The data contracts (other than `c`) that read something `c` may write.
  private func downstream(_ c: ContractState) -> [ContractState] {
    var out: [ContractState] = []
    var seen = Set<ObjectIdentifier>()
    for w in c.writes {
      readIndex.forEachReader(affectedBy: w.ids) { r in
        if r.isData, r !== c, r.registered, seen.insert(ObjectIdentifier(r)).inserted { out.append(r) }
      }
    }
    return out
  }

  /// A data contract's level: 1 + the highest level among the data
  /// contracts (other than itself) that may write something it reads.
  private func level(of c: ContractState) -> Int {
    var level = 0
    for r in c.reads {
      writeIndex.forEachWriter(affecting: r) { w in
        if w.isData, w !== c, w.registered { level = max(level, w.level + 1) }
      }
    }
    return level
  }

  /// Recomputes levels downstream of the seeds. During a pass, deferred to
  /// its end (SPEC §5). Lock held.
  private func propagateLevels(_ seeds: [ContractState]) {
    if inPass {
      deferredLevelSeeds.append(contentsOf: seeds)
      return
    }
    var work = seeds
    while let x = work.popLast() {
      guard x.registered, x.isData else { continue }
      let l = level(of: x)
      if l != x.level {
        x.level = l
        work.append(contentsOf: downstream(x))
      }
    }
  }

  private func insert(_ c: ContractState) {
    registry.append(c)
    byName.insert(c)
    for r in c.reads { readIndex.insert(r, c) }
    for w in c.writes { writeIndex.insert(w, c) }
    indexGeneration += 1
    if c.kind == .everyTransaction { everyTxn.append(c) }
    if c.isData { propagateLevels(downstream(c)) }
  }

  /// Unregisters a contract. It is not called afterwards, even later in the
  /// running pass.
  ///
  /// - Throws: ``OrdoError/Code/notFound`` for an unknown id.
  public func unregister(_ id: ContractID) throws(OrdoError) {
    lock.lock()
    let acquired = acquire()
    guard let c = registry.find(id) else {
      if acquired { release() }
      lock.unlock()
      throw OrdoError(.notFound, "no contract with id \(id) on this bus")
    }
    let seeds = c.isData ? downstream(c) : []
    byName.remove(c)
    for r in c.reads { readIndex.remove(r, c) }
    for w in c.writes { writeIndex.remove(w, c) }
    indexGeneration += 1
    if c.kind == .everyTransaction { everyTxn.removeAll { $0 === c } }
    c.registered = false
    registry.removed(sweep: !inPass)
    // A contract scheduled in the running pass holds its trigger nodes, and
    // those nodes' reader caches may hold it: drop the triggers, or the
    // contract (and what its callback captures) leaks with the cycle.
    c.clearTriggers()
    let callback = c.callback
    c.callback = nil
    propagateLevels(seeds)
    if acquired { release() }
    lock.unlock()
    // The callback (and what it captures) is released here, outside the lock.
    withExtendedLifetime(callback) {}
  }

  /// Unregisters the contract with this name. Throws
  /// ``OrdoError/Code/notFound`` when there is none.
  public func unregister(named name: String) throws(OrdoError) {
    lock.lock()
    let id = findContract(named: name)?.id
    lock.unlock()
    guard let id else { throw OrdoError(.notFound, "no contract named \"\(name)\" on this bus") }
    try unregister(id)
  }

  // MARK: - Introspection

  /// Every registered contract, in pass order.
  public func contracts() -> [ContractInfo] {
    lock.lock()
    defer { lock.unlock() }
    let sorted = registry.live.sorted { $0.key < $1.key }
    return sorted.enumerated().map { i, c in
      ContractInfo(
        id: c.id, name: c.name, kind: c.kind, reads: c.reads.map(text), writes: c.writes.map(text),
        priority: c.priority, level: c.level, position: i, calls: c.calls, lastTransaction: c.lastTransaction,
        failures: UInt64(c.failures),
        unusedReads: c.reads.enumerated().filter { c.usedReads & ContractState.bit($0.offset) == 0 }.map { text($0.element) },
        unusedWrites: c.writes.enumerated().filter { c.usedWrites & ContractState.bit($0.offset) == 0 }.map { text($0.element) })
    }
  }

  /// The contract with this id, if registered.
  public func contract(_ id: ContractID) -> ContractInfo? {
    contracts().first { $0.id == id }
  }

  /// The id of the contract whose callback runs on this thread now, if any.
  public var currentContract: ContractID? {
    lock.lock()
    defer { lock.unlock() }
    return isOwner() ? running?.id : nil
  }

  /// Counts kept since the bus was made.
  public var statistics: BusStatistics {
    lock.lock()
    defer { lock.unlock() }
    return BusStatistics(
      contracts: registry.count, transactions: visibleTransaction(own: isOwner()), notifications: notifications, failures: failures,
      rollbacks: rollbacks, values: valueCount)
  }

  /// The dependency graph in Graphviz DOT: contracts (boxes, in pass order,
  /// labelled with priority or level) and the patterns they read (edges into
  /// the contract) and write (edges out of it).
  public func graph() -> String {
    let list = contracts()
    func escape(_ s: String) -> String { s.replacingAll("\\", "\\\\").replacingAll("\"", "\\\"") }
    func quote(_ s: String) -> String { "\"" + escape(s) + "\"" }
    var out = "digraph ordo {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n"
    var patterns = Set<String>()
    for c in list {
      let rank = c.priority.map { "priority \($0)" } ?? (c.kind == .everyTransaction ? "every transaction" : "level \(c.level)")
      out += "  \(quote("c:" + c.name)) [shape=box, label=\"#\(c.position) \(escape(c.name))\\n\(rank)\"];\n"
      patterns.formUnion(c.reads)
      patterns.formUnion(c.writes)
    }
    for p in patterns.sorted() {
      out += "  \(quote("k:" + p)) [shape=ellipse, label=\(quote(p))];\n"
    }
    for c in list {
      for r in c.reads { out += "  \(quote("k:" + r)) -> \(quote("c:" + c.name));\n" }
      for w in c.writes { out += "  \(quote("c:" + c.name)) -> \(quote("k:" + w)) [style=bold];\n" }
    }
    return out + "}\n"
  }
}

extension String {
  func replacingAll(_ target: String, _ replacement: String) -> String {
    guard contains(target) else { return self }
    return split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
  }
}
