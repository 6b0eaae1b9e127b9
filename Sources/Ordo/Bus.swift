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
  private var owner: pthread_t?
  private var depth = 0
  private var inPass = false
  private var running: ContractState?
  /// Contract checks of the running callback are suspended (owner thread).
  private var suspended = false
  private var passTransaction: UInt64 = 0
  private var passSerial: UInt64 = 0
  private var schedule = Schedule()
  private var deferredLevelSeeds: [ContractState] = []

  // Store.
  private var values: [String: Value] = [:]
  private var counters: [String: UInt64] = [:]
  private let keys = KeyTree()
  private var journal = Journal()
  private var lastTransaction: UInt64 = 0

  // Contracts.
  private var registry: [ContractID: ContractState] = [:]
  private var byName: [String: ContractState] = [:]
  private var readIndex = PatternIndex()
  private var writeIndex = PatternIndex()
  private var everyTxn: [ContractState] = []
  private var nextID: ContractID = 1
  private var nextSeq: UInt64 = 1

  // Statistics and failures.
  private var notifications: UInt64 = 0
  private var failures: UInt64 = 0
  private var rollbacks: UInt64 = 0
  private var failureHandler: (@Sendable (ContractFailure) -> Void)?

  /// Makes an empty bus.
  public init() {}

  // MARK: - Ownership

  private func isOwner() -> Bool {
    guard let o = owner else { return false }
    return pthread_equal(o, currentThread()) != 0
  }

  /// Waits until no other thread owns a transaction and takes ownership.
  /// Returns false when the calling thread already owned it. Lock held.
  private func acquire() -> Bool {
    if isOwner() { return false }
    while owner != nil { lock.wait() }
    owner = currentThread()
    return true
  }

  private func release() {
    owner = nil
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
    if depth > 0 || inPass || running != nil {
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
    if isOwner() && (inPass || running != nil) {
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
    for (k, old) in journal.original {
      let segs = k.split(separator: ".", omittingEmptySubsequences: false)
      if let old {
        if values.updateValue(old, forKey: k) == nil { keys.insert(k, segs) }
      } else if values.removeValue(forKey: k) != nil, counters[k] == nil {
        keys.remove(segs)
      }
    }
    let undo = journal.undo
    journal.reset()
    return undo
  }

  /// The id of the last committed transaction that changed something (0 if
  /// none).
  public var transactionID: UInt64 {
    lock.lock()
    defer { lock.unlock() }
    return lastTransaction
  }

  /// Registers an action that runs if the transaction open on this thread is
  /// rolled back: for host-owned values that must be restored with it.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` outside a transaction or
  ///   callback.
  public func onRollback(_ action: @escaping @Sendable () -> Void) throws(OrdoError) {
    lock.lock()
    defer { lock.unlock() }
    guard isOwner(), depth > 0 || inPass || running != nil else {
      throw OrdoError(.noTransaction, "onRollback outside a transaction")
    }
    if !inPass { journal.undo.append(action) }
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
    try write(keypath, .set(value))
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

  private func write(_ k: String, _ op: WriteOp) throws(OrdoError) {
    let segs = try Keypath.scan(k, allowWildcards: false)
    try write([(k, segs, op)])
  }

  /// Writes several keypaths at once, all or nothing: every keypath and every
  /// contract rule is checked before anything changes. Used by surfaces that
  /// receive a set of writes in one message (D-Bus `Commit`, `Complete`).
  ///
  /// - Throws: like ``set(_:_:)``, for the first write that is refused; then
  ///   none of the writes is applied.
  public func write(_ batch: [Write]) throws(OrdoError) {
    var ops: [(String, [Substring], WriteOp)] = []
    ops.reserveCapacity(batch.count)
    for w in batch {
      switch w {
      case .set(let k, let v): ops.append((k, try Keypath.scan(k, allowWildcards: false), .set(v)))
      case .touch(let k): ops.append((k, try Keypath.scan(k, allowWildcards: false), .touch))
      case .remove(let k): ops.append((k, try Keypath.scan(k, allowWildcards: false), .remove))
      case .removeTree(let k): ops.append((k, try Keypath.scan(k, allowWildcards: false), .removeTree))
      }
    }
    try write(ops)
  }

  private func write(_ ops: [(String, [Substring], WriteOp)]) throws(OrdoError) {
    guard let first = ops.first else { return }
    lock.lock()
    defer { lock.unlock() }
    // Inside a pass only callbacks write; outside, a transaction or an
    // initial call must be open on this thread.
    guard isOwner(), !suspended, inPass ? running != nil : (depth > 0 || running != nil) else {
      throw OrdoError(.noTransaction, "\(first.2.name) \"\(first.0)\" outside a transaction: call begin first")
    }
    let c = running
    if let c {
      for (k, segs, op) in ops { try checkWrite(c, k, segs, op) }
    }
    for (k, segs, op) in ops {
      let altered = apply(k, segs, op, by: c)
      if inPass, altered, let c {
        scheduleReaders(of: k, segs, after: c, skipping: [])
      }
    }
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

  /// The running contract's write rules (SPEC §5). Lock held.
  private func checkWrite(_ c: ContractState, _ k: String, _ segs: [Substring], _ op: WriteOp) throws(OrdoError) {
    var allowed: Int?
    for (i, w) in c.writes.enumerated() {
      if case .removeTree = op { if w.coversTree(segs) { allowed = i; break } } else if w.matches(segments: segs) {
        allowed = i
        break
      }
    }
    guard let i = allowed else {
      let set = c.writes.isEmpty ? "its write set is empty" : "its write set is [\(c.writes.map(\.string).joined(separator: ", "))]"
      let what = (op.name == "removeTree") ? "removeTree \"\(k)\" (needs a pattern covering \"\(k)\" and all its descendants, such as \"\(k).**\")" : "\(op.name) \"\(k)\""
      throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not \(what): \(set)")
    }
    let key = c.key
    var earlier: ContractState?
    readIndex.forEachReader(affectedBy: QuerySegments(keypath: segs)) { r in
      if r !== c, r.key < key, earlier == nil || r.key < earlier!.key { earlier = r }
    }
    if let e = earlier {
      throw OrdoError(.stability, "contract \"\(c.name)\" may not \(op.name) \"\(k)\": contract \"\(e.name)\", placed before it in the pass, reads it")
    }
    c.usedWrites[i] = true
  }

  /// Applies a write to the store and the journal. Returns whether it
  /// altered the current state. Lock held.
  private func apply(_ k: String, _ segs: [Substring], _ op: WriteOp, by c: ContractState?) -> Bool {
    var rec = journal.records[k] ?? {
      journal.order.append(k)
      return WriteRecord(segments: segs)
    }()
    if let c {
      if !rec.writtenBy.contains(c.id) { rec.writtenBy.append(c.id) }
    } else {
      rec.external = true
    }
    var altered = false
    switch op {
    case .set(let v):
      rec.ownValue = true
      altered = store(k, segs, v)
    case .remove:
      rec.ownValue = true
      altered = store(k, segs, nil)
    case .touch:
      altered = !rec.touched
      rec.touched = true
    case .removeTree:
      var under: [String] = []
      if let node = keys.node(segs) { keys.keys(under: node, into: &under) }
      for key in under where values[key] != nil {
        altered = store(key, key.split(separator: ".", omittingEmptySubsequences: false), nil) || altered
        if !rec.removed.contains(key) { rec.removed.append(key) }
      }
    }
    journal.records[k] = rec
    return altered
  }

  /// Stores a value (nil: removes), recording the original. Returns whether
  /// the value changed. Lock held.
  private func store(_ k: String, _ segs: [Substring], _ v: Value?) -> Bool {
    let old = values[k]
    if old == v { return false }
    if journal.original.index(forKey: k) == nil { journal.original[k] = .some(old) }
    if let v {
      values[k] = v
      if old == nil { keys.insert(k, segs) }
    } else {
      values[k] = nil
      if counters[k] == nil { keys.remove(segs) }
    }
    return true
  }

  private func netChanged(_ k: String) -> Bool {
    guard let i = journal.original.index(forKey: k) else { return false }
    return journal.original.values[i] != values[k]
  }

  private func isChanged(_ rec: WriteRecord, _ k: String) -> Bool {
    if rec.touched { return true }
    if rec.ownValue && netChanged(k) { return true }
    return rec.removed.contains(where: netChanged)
  }

  // MARK: - The notification pass

  /// Schedules the contracts a write to `k` affects. Lock held.
  private func scheduleReaders(of k: String, _ segs: [Substring], after: ContractState?, skipping: [ContractID]) {
    let serial = passSerial
    let afterKey = after?.key
    readIndex.forEachReader(affectedBy: QuerySegments(keypath: segs)) { r in
      guard r.registered, r.calledSerial != serial, r !== after else { return }
      if let afterKey, r.key < afterKey { return }
      if !skipping.isEmpty && skipping.contains(r.id) { return }
      if r.scheduledSerial != serial {
        r.scheduledSerial = serial
        r.triggers.removeAll(keepingCapacity: true)
        schedule.push(r)
      }
      if r.triggers.last != k { r.triggers.append(k) }
    }
  }

  /// Runs the pass of the transaction in the journal and commits it. Lock
  /// held and ownership held on entry; ownership released on return.
  private func runPass(excluding initial: ContractState? = nil) -> UInt64 {
    var any = false
    for k in journal.order where isChanged(journal.records[k]!, k) {
      any = true
      break
    }
    guard any else {
      journal.reset()
      depth = 0
      release()
      return 0
    }
    lastTransaction += 1
    let txn = lastTransaction
    passTransaction = txn
    passSerial += 1
    inPass = true
    if let initial { initial.calledSerial = passSerial }
    for k in journal.order {
      let rec = journal.records[k]!
      guard isChanged(rec, k) else { continue }
      let skip = rec.external ? [] : rec.writtenBy
      scheduleReaders(of: k, rec.segments, after: nil, skipping: skip)
    }
    for c in everyTxn where c.calledSerial != passSerial && c.scheduledSerial != passSerial {
      c.scheduledSerial = passSerial
      c.triggers.removeAll()
      schedule.push(c)
    }
    while let c = schedule.pop() {
      guard c.registered, c.calledSerial != passSerial else { continue }
      c.calledSerial = passSerial
      var changed: [String]
      if c.kind == .everyTransaction {
        changed = journal.order.filter { isChanged(journal.records[$0]!, $0) }
      } else {
        changed = []
        var seen = Set<String>()
        for k in c.triggers where isChanged(journal.records[k]!, k) {
          if c.triggers.count > 8 ? seen.insert(k).inserted : !changed.contains(k) { changed.append(k) }
        }
      }
      c.triggers.removeAll()
      if changed.isEmpty && !c.initialPending { continue }
      c.initialPending = false
      call(c, Notification(transaction: txn, contract: c.id, changed: changed))
    }
    // Commit: counters rise once for every keypath that was touched or whose
    // value differs from its value at the start of the transaction.
    var bumped = Set<String>()
    for (k, rec) in journal.records where rec.touched && bumped.insert(k).inserted {
      bump(k, rec.segments)
    }
    for (k, old) in journal.original where old != values[k] && bumped.insert(k).inserted {
      bump(k, k.split(separator: ".", omittingEmptySubsequences: false))
    }
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

  private func bump(_ k: String, _ segs: [Substring]) {
    if let c = counters[k] {
      counters[k] = c + 1
    } else {
      counters[k] = 1
      if values[k] == nil { keys.insert(k, segs) }
    }
  }

  /// Calls a contract's callback without holding the lock. Lock held on
  /// entry and on return.
  private func call(_ c: ContractState, _ note: Notification) {
    let previous = running
    running = c
    c.calls += 1
    c.lastTransaction = note.transaction
    notifications += 1
    let callback = c.callback
    lock.unlock()
    var failure: (any Error)?
    do { try callback(note) } catch { failure = error }
    lock.lock()
    running = previous
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

  // MARK: - Reads

  /// The value of `keypath`, or nil if it holds none. Inside a callback the
  /// keypath must be in the contract's read or write set. From a thread that
  /// does not own the running transaction, the last committed value.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``, ``OrdoError/Code/contractViolation``.
  public func value(_ keypath: String) throws(OrdoError) -> Value? {
    let segs = try Keypath.scan(keypath, allowWildcards: false)
    lock.lock()
    defer { lock.unlock() }
    if isOwner() {
      if let c = running, !suspended { try checkRead(c, keypath, segs) }
      return values[keypath]
    }
    return committedValue(keypath)
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
      if let v = own ? values[k] : committedValue(k) { out[k] = v }
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
    let segs = try Keypath.scan(keypath, allowWildcards: false)
    lock.lock()
    defer { lock.unlock() }
    if isOwner(), let c = running, !suspended { try checkRead(c, keypath, segs) }
    return counters[keypath] ?? 0
  }

  /// Declares a read of a host-owned value at `keypath` (see
  /// ``HostedProperty``): inside a callback, checks it against the
  /// contract's read and write sets like a read of a stored value.
  public func access(_ keypath: String) throws(OrdoError) {
    let segs = try Keypath.scan(keypath, allowWildcards: false)
    lock.lock()
    defer { lock.unlock() }
    if isOwner(), let c = running, !suspended { try checkRead(c, keypath, segs) }
  }

  /// The values and counters of every keypath matching one of the patterns,
  /// and the last committed transaction id, read at one moment.
  public func snapshot(_ patterns: [String]) throws(OrdoError) -> (values: [String: Value], counters: [String: UInt64], transaction: UInt64) {
    var parsed: [Pattern] = []
    for p in patterns { parsed.append(try Pattern(p)) }
    lock.lock()
    defer { lock.unlock() }
    let own = isOwner()
    if own, let c = running, !suspended {
      for p in parsed {
        guard c.kind == .everyTransaction || c.reads.contains(where: { covers($0, p) }) || c.writes.contains(where: { covers($0, p) }) else {
          throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not read \"\(p.string)\": outside its read and write sets")
        }
      }
    }
    var vs: [String: Value] = [:]
    var cs: [String: UInt64] = [:]
    for p in parsed {
      for k in keys.keys(matching: p) {
        if let v = own ? values[k] : committedValue(k) { vs[k] = v }
        if let n = counters[k] { cs[k] = n }
      }
      if !own {
        for (k, old) in journal.original where old != nil && vs[k] == nil && p.matches(k) { vs[k] = old! }
      }
    }
    return (vs, cs, lastTransaction)
  }

  /// Whether pattern `a` matches every keypath pattern `b` matches.
  private func covers(_ a: Pattern, _ b: Pattern) -> Bool {
    if b.isTree && !a.isTree { return false }
    if a.isTree ? b.fixed.count < a.fixed.count : b.fixed.count != a.fixed.count { return false }
    for i in 0..<a.fixed.count {
      switch (a.fixed[i], b.fixed[i]) {
      case (.any, _): continue
      case (.literal(let x), .literal(let y)) where x == y: continue
      default: return false
      }
    }
    return true
  }

  private func committedValue(_ k: String) -> Value? {
    if let i = journal.original.index(forKey: k) { return journal.original.values[i] }
    return values[k]
  }

  /// The running contract's read rule (SPEC §5). Lock held.
  private func checkRead(_ c: ContractState, _ k: String, _ segs: [Substring]) throws(OrdoError) {
    if c.kind == .everyTransaction { return }
    for (i, r) in c.reads.enumerated() where r.matches(segments: segs) {
      c.usedReads[i] = true
      return
    }
    for w in c.writes where w.matches(segments: segs) { return }
    throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not read \"\(k)\": its read set is [\(c.reads.map(\.string).joined(separator: ", "))] and its write set [\(c.writes.map(\.string).joined(separator: ", "))]")
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
    var reads: [Pattern] = []
    var writes: [Pattern] = []
    for r in spec.reads { reads.append(try Pattern(r)) }
    for w in spec.writes { writes.append(try Pattern(w)) }
    if reads.isEmpty && !writes.isEmpty {
      throw OrdoError(.invalidArgument, "contract \"\(spec.name)\" has an empty read set (every-transaction) and may not write; its write set is [\(spec.writes.joined(separator: ", "))]")
    }
    lock.lock()
    let acquired = acquire()
    let c = ContractState(id: nextID, seq: nextSeq, name: spec.name, reads: reads, writes: writes, priority: spec.priority, callback: spec.callback)
    do {
      try admit(c, initial: spec.flags.contains(.notifyInitial))
    } catch {
      if acquired { release() }
      lock.unlock()
      throw error
    }
    nextID += 1
    nextSeq += 1
    insert(c)
    let handle = ContractHandle(id: c.id, name: c.name, bus: self)
    guard spec.flags.contains(.notifyInitial) else {
      if acquired { release() }
      lock.unlock()
      return handle
    }
    if inPass {
      c.scheduledSerial = passSerial
      c.initialPending = true
      c.triggers.removeAll()
      schedule.push(c)
      lock.unlock()
      return handle
    }
    // Initial call outside a pass: its writes form a transaction of their own
    // (or join the one this thread has open). Like a callback in a pass, it
    // starts at depth 0: its begin/commit pairs join, a commit without begin
    // fails, and a begin it leaves open ends with the call instead of keeping
    // the caller's transaction open.
    let outer = depth
    let nested = running != nil
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
    if byName[c.name] != nil {
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
          throw OrdoError(.orderConflict, "priority contract \"\(c.name)\" reads \"\(r.string)\", which data contract \"\(w.name)\" may write; priority contracts run before all data contracts")
        }
      }
    case .data:
      for w in c.writes {
        var reader: ContractState?
        readIndex.forEachReader(affectedBy: QuerySegments(w)) { r in if r.kind == .priority, reader == nil { reader = r } }
        if let r = reader {
          throw OrdoError(.orderConflict, "data contract \"\(c.name)\" may write \"\(w.string)\", which priority contract \"\(r.name)\" reads; priority contracts run before all data contracts")
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
        throw OrdoError(.orderConflict, "contract \"\(c.name)\" reads \"\(r.string)\", which contract \"\(w.name)\", running after it, writes")
      }
    }
    for w in c.writes where w.isConcrete {
      var earlier: ContractState?
      readIndex.forEachReader(affectedBy: QuerySegments(w)) { r in
        if earlier == nil, r !== c, !(r.isData && c.isData), r.key < key { earlier = r }
      }
      if let r = earlier {
        throw OrdoError(.orderConflict, "contract \"\(c.name)\" writes \"\(w.string)\", which contract \"\(r.name)\", running before it, reads")
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
      readIndex.forEachReader(affectedBy: QuerySegments(w)) { r in
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
    registry[c.id] = c
    byName[c.name] = c
    for r in c.reads { readIndex.insert(r, c) }
    for w in c.writes { writeIndex.insert(w, c) }
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
    guard let c = registry[id] else {
      if acquired { release() }
      lock.unlock()
      throw OrdoError(.notFound, "no contract with id \(id) on this bus")
    }
    let seeds = c.isData ? downstream(c) : []
    registry[id] = nil
    byName[c.name] = nil
    for r in c.reads { readIndex.remove(r, c) }
    for w in c.writes { writeIndex.remove(w, c) }
    if c.kind == .everyTransaction { everyTxn.removeAll { $0 === c } }
    c.registered = false
    propagateLevels(seeds)
    if acquired { release() }
    lock.unlock()
    // The callback (and what it captures) is released here, outside the lock.
    withExtendedLifetime(c) {}
  }

  /// Unregisters the contract with this name. Throws
  /// ``OrdoError/Code/notFound`` when there is none.
  public func unregister(named name: String) throws(OrdoError) {
    lock.lock()
    let id = byName[name]?.id
    lock.unlock()
    guard let id else { throw OrdoError(.notFound, "no contract named \"\(name)\" on this bus") }
    try unregister(id)
  }

  // MARK: - Introspection

  /// Every registered contract, in pass order.
  public func contracts() -> [ContractInfo] {
    lock.lock()
    defer { lock.unlock() }
    let sorted = registry.values.sorted { $0.key < $1.key }
    return sorted.enumerated().map { i, c in
      ContractInfo(
        id: c.id, name: c.name, kind: c.kind, reads: c.reads.map(\.string), writes: c.writes.map(\.string),
        priority: c.priority, level: c.level, position: i, calls: c.calls, lastTransaction: c.lastTransaction,
        failures: c.failures,
        unusedReads: zip(c.reads, c.usedReads).filter { !$0.1 }.map(\.0.string),
        unusedWrites: zip(c.writes, c.usedWrites).filter { !$0.1 }.map(\.0.string))
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
      contracts: registry.count, transactions: lastTransaction, notifications: notifications, failures: failures,
      rollbacks: rollbacks, values: values.count)
  }

  /// The dependency graph in Graphviz DOT: contracts (boxes, in pass order,
  /// labelled with priority or level) and the patterns they read (edges into
  /// the contract) and write (edges out of it).
  public func graph() -> String {
    let list = contracts()
    func quote(_ s: String) -> String { "\"" + s.replacingAll("\\", "\\\\").replacingAll("\"", "\\\"") + "\"" }
    var out = "digraph ordo {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n"
    var patterns = Set<String>()
    for c in list {
      let rank = c.priority.map { "priority \($0)" } ?? (c.kind == .everyTransaction ? "every transaction" : "level \(c.level)")
      out += "  \(quote("c:" + c.name)) [shape=box, label=\(quote("#\(c.position) \(c.name)\\n\(rank)"))];\n"
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
