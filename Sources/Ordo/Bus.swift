
/// A change-notification bus: a store of values addressed by keypaths, with
/// change counters, write transactions and contracts that are called once per
/// transaction in a deterministic order (SPEC §1–§5, §10).
///
/// Any thread may use a bus. Transactions are serialized: `begin` on one
/// thread waits while another thread's transaction (or its notification
/// pass) runs. Reads never wait for a transaction: from a thread that does not
/// own the running transaction they see the last committed state. The pass
/// runs on the committing thread, and callbacks may call back into the bus
/// from it.
///
/// The bus is a façade over its parts, each holding one concept
/// (`docs/architecture.md`): the `Gate` (who may do what now), the
/// `Store` (values, counters, the journal), the `ContractGraph`
/// (registration, order, levels) and the `PassRunner` (the pass).
public final class Bus: @unchecked Sendable {
  let gate = Gate()
  let store = Store()
  let contractGraph: ContractGraph
  let passes: PassRunner
  /// Transactions rolled back (statistics).
  private(set) var rollbackCount: UInt64 = 0
  /// What typed properties, contexts and streams name the bus by, without
  /// keeping it alive (see ``BusLink``); also the end-of-pass hooks.
  let link = BusLink()

  /// Makes an empty bus with a new epoch.
  public init() {
    contractGraph = ContractGraph(store: store)
    passes = PassRunner(gate: gate, store: store, graph: contractGraph)
    link.attach(self)
    store.slab.attach(link)
  }

  deinit {
    // A transaction left open: its held-back writes go with it.
    store.behind.discard()
    link.detach()
    store.reset()
  }

  /// Takes the bus's lock and, on the owner's thread, applies the writes
  /// held back (``WriteBehind``): every section under the lock starts
  /// here, but the writes that may be held back themselves
  /// (``write(_:_:)`` settles before any write it does not hold back).
  @inline(__always)
  func lockGate() {
    gate.lock.lock()
    // Only the owner holds writes back, and only its own reads and writes
    // need them applied: another thread reads the committed state.
    if gate.isOwner, !store.behind.isEmpty { store.settle() }
  }

  // MARK: - Transactions (SPEC §3)

  /// Begins a write transaction, or joins the one this thread has open (or
  /// the running pass, from a callback). Waits while another thread's
  /// transaction runs.
  public func begin() {
    lockGate()
    _ = gate.acquire()
    gate.enter()
    gate.lock.unlock()
  }

  /// Commits. The outermost commit runs the notification pass and returns
  /// after it with the transaction id (0 when nothing changed); an inner
  /// commit returns 0.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` without a matching `begin`;
  ///   ``OrdoError/Code/storage`` when a persistence layer could not store
  ///   the transaction (then nothing of it was applied).
  @discardableResult
  public func commit() throws(OrdoError) -> UInt64 {
    lockGate()
    switch gate.leave() {
    case .refused:
      gate.lock.unlock()
      throw OrdoError(.noTransaction, "commit without a transaction: call begin first")
    case .joined:
      gate.lock.unlock()
      return 0
    case .outermost:
      let outcome = passes.runCommit()
      let hooks = passEnded(outcome)
      gate.lock.unlock()
      // Contracts unregistered during the pass go now, without the lock.
      withExtendedLifetime(outcome.retired) {}
      defer { for hook in hooks { hook() } }
      return try settle(outcome)
    }
  }

  /// Runs the rollback actions of a refused pass and reports the refusal.
  private func settle(_ outcome: PassRunner.Outcome) throws(OrdoError) -> UInt64 {
    if let trace = outcome.trace { deliver(trace) }
    guard let refusal = outcome.refusal else { return outcome.transaction }
    for action in outcome.undo.reversed() { action() }
    throw refusal
  }

  /// The end-of-pass hooks due after `outcome`: all of them when a pass ran
  /// (stored or refused), none when nothing changed (no pass). Lock held.
  private func passEnded(_ outcome: PassRunner.Outcome) -> [@Sendable () -> Void] {
    guard outcome.transaction != 0 || outcome.refusal != nil else { return [] }
    return link.takeEndOfPassHooks()
  }

  /// Discards every write of the whole (outermost) transaction; nothing is
  /// notified and no counter changes.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` without a transaction;
  ///   ``OrdoError/Code/invalidArgument`` inside a callback (a pass cannot be
  ///   undone).
  public func rollback() throws(OrdoError) {
    lockGate()
    guard gate.isOwner, case .open = gate.phase else {
      let inCallback = gate.isOwner && gate.inTransaction
      gate.lock.unlock()
      if inCallback {
        throw OrdoError(.invalidArgument, "rollback inside a contract callback: a notification pass cannot be undone")
      }
      throw OrdoError(.noTransaction, "rollback without a transaction: call begin first")
    }
    let undo = store.rollback()
    rollbackCount += 1
    gate.finish()
    gate.lock.unlock()
    for action in undo.reversed() { action() }
  }

  /// Runs `body` in a transaction and commits it; when `body` throws, rolls
  /// the transaction back (the whole outermost one) and rethrows.
  ///
  /// The body's error type is the transaction's: give the closure
  /// `throws(OrdoError)` (every bus call throws only ``OrdoError``) and the
  /// caller catches an ``OrdoError`` without a cast:
  ///
  /// ```swift
  /// func rename(_ bus: Bus, _ title: Property<String>) throws(OrdoError) {
  ///   try bus.transaction { () throws(OrdoError) in try title.set("Songs") }
  /// }
  /// ```
  ///
  /// - Returns: the transaction id, 0 if nothing changed or if this joined an
  ///   outer transaction. (A body that returns a value: see
  ///   ``transaction(_:)->R``.)
  /// - Throws: what `body` throws; a commit that a persistence layer refused
  ///   (``OrdoError/Code/storage``) as an `E` — which needs `E` to be
  ///   ``OrdoError`` or `any Error`; with another error type such a refusal
  ///   stops the program.
  @discardableResult
  public func transaction<E: Error>(_ body: () throws(E) -> Void) throws(E) -> UInt64 {
    try transaction { () throws(E) -> UInt64 in
      try body()
      return 0
    }.1
  }

  /// Runs `body` in a transaction, commits it and returns what `body`
  /// returned; when `body` throws, rolls the transaction back and rethrows.
  /// Throws like ``transaction(_:)->UInt64``.
  public func transaction<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
    try transaction(body).0
  }

  /// The result of `body` and the transaction id.
  private func transaction<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> (R, UInt64) {
    begin()
    let result: R
    do {
      result = try body()
    } catch {
      if (try? rollback()) == nil { _ = try? commit() }
      throw error
    }
    do {
      return (result, try commit())
    } catch {
      guard let e = error as? E else {
        preconditionFailure("Ordo: the commit failed (\(error)) and the transaction's error type \(E.self) cannot hold an OrdoError: give the body throws(OrdoError)")
      }
      throw e
    }
  }

  /// Registers an action that runs if the transaction open on this thread is
  /// rolled back: for host-owned values that must be restored with it.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` outside a transaction or
  ///   callback.
  public func onRollback(_ action: @escaping @Sendable () -> Void) throws(OrdoError) {
    lockGate()
    defer { gate.lock.unlock() }
    guard gate.inTransaction else { throw OrdoError(.noTransaction, "onRollback outside a transaction") }
    if !gate.inPass { store.journal.undo.append(action) }
  }

  /// Whether the calling thread has a transaction open or runs a callback:
  /// then writes are accepted and a `begin` joins what is open. Bridges use
  /// it to hold remote work back while the host thread's transaction is open.
  package var isInTransaction: Bool {
    lockGate()
    defer { gate.lock.unlock() }
    return gate.inTransaction
  }

  /// The id of the last committed transaction that changed something (0 if
  /// none). While a pass runs, its thread sees the pass's id; other threads
  /// see the last committed one (the pass's writes are not visible to them).
  public var transactionID: UInt64 {
    lockGate()
    defer { gate.lock.unlock() }
    return visibleTransaction()
  }

  /// The last transaction id as the calling thread sees it. Lock held.
  private func visibleTransaction() -> UInt64 { gate.ownPassTransaction ?? store.lastTransaction }

  /// The epoch of this bus's history (SPEC §10): a UUID made with its
  /// store. Transaction ids, counters and changed-at compare only within one
  /// epoch; a persistence layer restores it with the model.
  public var epoch: String {
    lockGate()
    defer { gate.lock.unlock() }
    return store.epoch
  }

  /// The number of keypath nodes the store keeps (for tests).
  var nodeCount: Int {
    lockGate()
    defer { gate.lock.unlock() }
    return store.nodes.count
  }

  // MARK: - Writes (SPEC §2)

  /// Sets the value of `keypath`.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``, ``OrdoError/Code/noTransaction``,
  ///   and inside a callback ``OrdoError/Code/contractViolation`` or
  ///   ``OrdoError/Code/stability``.
  public func set(_ keypath: String, _ value: Value) throws(OrdoError) {
    // Not lockGate(): the write may be held back with the others (finding
    // the node does not depend on what is held).
    gate.lock.lock()
    defer { gate.lock.unlock() }
    try write(store.target(keypath), .set(value))
  }

  /// Marks `keypath` changed without storing a value (for values that live
  /// in the host program). Throws like ``set(_:_:)-(String,_)``.
  public func touch(_ keypath: String) throws(OrdoError) {
    lockGate()
    defer { gate.lock.unlock() }
    try write(store.target(keypath), .touch)
  }

  /// Removes the value of `keypath` (no change if it has none). Throws like
  /// ``set(_:_:)-(String,_)``.
  public func remove(_ keypath: String) throws(OrdoError) {
    lockGate()
    defer { gate.lock.unlock() }
    try write(store.target(keypath), .remove)
  }

  /// Removes the values of `keypath` and of every descendant. Inside a
  /// callback the write set must allow the keypath and all its descendants
  /// (e.g. `k.**`). Throws like ``set(_:_:)-(String,_)``.
  public func removeTree(_ keypath: String) throws(OrdoError) {
    lockGate()
    defer { gate.lock.unlock() }
    try write(store.target(keypath), .removeTree)
  }

  /// Sets the value of a keypath given as UTF-8 bytes when the store has it,
  /// through the one write path. Returns false, doing nothing, when the
  /// store does not have the keypath; the caller then calls ``set(_:_:)``
  /// with a `String`. For bridges that receive keypaths as C strings: the
  /// common write makes no `String`.
  package func setExisting(utf8 keypath: UnsafeBufferPointer<UInt8>, _ value: Value) throws(OrdoError) -> Bool {
    // Not lockGate(), as set(_:_:).
    gate.lock.lock()
    defer { gate.lock.unlock() }
    guard let n = store.existing(utf8: UnsafeRawBufferPointer(keypath)) else { return false }
    try write(.node(n._withUnsafeGuaranteedRef { $0.ref }), .set(value))
    return true
  }

  /// Writes several keypaths at once, all or nothing: every keypath and every
  /// contract rule is checked before anything changes. For surfaces that
  /// receive a set of writes in one message (D-Bus `Commit`, `Complete`).
  ///
  /// - Throws: like ``set(_:_:)``, for the first write that is refused; then
  ///   none of the writes is applied.
  package func write(_ batch: [Write]) throws(OrdoError) {
    guard !batch.isEmpty else { return }
    lockGate()
    defer { gate.lock.unlock() }
    var resolved: [(Target, WriteOp)] = []
    resolved.reserveCapacity(batch.count)
    for w in batch {  // every keypath is valid before anything else
      switch w {
      case .set(let k, let v):
        let t = try store.target(k)
        if case .string(let s) = v { try Rules.checkString(s, t) }
        resolved.append((t, .set(v)))
      case .touch(let k): resolved.append((try store.target(k), .touch))
      case .remove(let k): resolved.append((try store.target(k), .remove))
      case .removeTree(let k): resolved.append((try store.target(k), .removeTree))
      }
    }
    let access = gate.writeAccess
    switch access {
    case .refused: throw Rules.noTransaction(resolved[0].1, resolved[0].0.keypath)
    case .free: break
    case .contract(let c):
      for (t, op) in resolved {
        do { try Rules.checkWrite(c, t, op, contractGraph) } catch {
          passes.recorder?.refused(t.keypath, error)
          throw error
        }
      }
    }
    for (t, op) in resolved { apply(t, op, access) }
  }

  /// Checks that the calling thread may write `keypath` now, without
  /// writing. For host-owned values (see ``HostedProperty``), whose
  /// equal-value set changes nothing but obeys the same rules as a stored
  /// value's (SPEC §5: stability is checked before the equal-value test).
  func checkWrite(_ keypath: String) throws(OrdoError) {
    lockGate()
    defer { gate.lock.unlock() }
    let t = try store.target(keypath)
    switch gate.writeAccess {
    case .refused: throw Rules.noTransaction(.touch, keypath)
    case .free: break
    case .contract(let c): try Rules.checkWrite(c, t, .touch, contractGraph)
    }
  }

  /// The one write path: a resolved target, the rules the phase imposes,
  /// then one apply. Lock held.
  @inline(__always)
  func write(_ t: Target, _ op: WriteOp) throws(OrdoError) {
    if case .set(.string(let s)) = op { try Rules.checkString(s, t) }
    let access = gate.writeAccess
    switch access {
    case .free:
      // The owner's open transaction: no contract rules, and a scalar set
      // of a keypath the store has is held back (``WriteBehind``).
      if case .node(let r) = t, let p = WriteBehind.heldValue(op) { return store.holdBack(r, p) }
      if !store.behind.isEmpty { store.settle() }
    case .contract(let c):
      assert(store.behind.isEmpty, "writes held back in a callback")
      do { try Rules.checkWrite(c, t, op, contractGraph) } catch {
        passes.recorder?.refused(t.keypath, error)
        throw error
      }
    case .refused: throw Rules.noTransaction(op, t.keypath)
    }
    apply(t, op, access)
  }

  /// Applies a checked write and, inside a pass, schedules what it affects.
  /// Lock held.
  @inline(__always)
  private func apply(_ t: Target, _ op: WriteOp, _ access: WriteAccess) {
    let n = store.node(t)
    guard case .contract(let c) = access else {
      _ = store.apply(n, op, writer: nil)
      return
    }
    if gate.inPass {
      if let r = passes.recorder { r.wrote(n.with { $0.key }) }
      if store.apply(n, op, writer: 0) { passes.scheduleReaders(of: n, after: c) }
    } else {
      // An initial call inside an open transaction: remembered, so that
      // its own writes do not schedule it in that transaction's pass.
      _ = store.apply(n, op, writer: c.id)
    }
  }

  // MARK: - Reads

  /// The value of `keypath`, or nil if it holds none. Inside a callback the
  /// keypath must be in the contract's read or write set. From a thread that
  /// does not own the running transaction, the last committed value.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``, ``OrdoError/Code/contractViolation``.
  public func value(_ keypath: String) throws(OrdoError) -> Value? {
    lockGate()
    defer { gate.lock.unlock() }
    guard let n = try readable(keypath) else { return nil }
    return store.value(n, own: gate.isOwner)
  }

  /// The value of `keypath`. Throws ``OrdoError/Code/notFound`` when it holds
  /// none, and like ``value(_:)-(String)``.
  @available(*, deprecated, message: "use value(_:), which returns nil when the keypath holds no value")
  public func get(_ keypath: String) throws(OrdoError) -> Value {
    guard let v = try value(keypath) else {
      throw OrdoError(.notFound, "\"\(keypath)\" holds no value")
    }
    return v
  }

  /// The number of committed transactions that changed `keypath` itself (0 if
  /// none). Inside a callback the keypath must be readable by the contract.
  public func counter(_ keypath: String) throws(OrdoError) -> UInt64 {
    lockGate()
    defer { gate.lock.unlock() }
    return try readable(keypath)?.counter ?? 0
  }

  /// The id of the last committed transaction that changed `keypath` (0 if
  /// none; SPEC §10). A removed value keeps it. Read like ``counter(_:)`-(String)`.
  public func changedAt(_ keypath: String) throws(OrdoError) -> UInt64 {
    lockGate()
    defer { gate.lock.unlock() }
    return try readable(keypath)?.changedAt ?? 0
  }

  /// Declares a read of a host-owned value at `keypath` (see
  /// ``HostedProperty``): inside a callback, checks it against the
  /// contract's read and write sets like a read of a stored value.
  public func access(_ keypath: String) throws(OrdoError) {
    lockGate()
    defer { gate.lock.unlock() }
    _ = try readable(keypath)
  }

  /// Validates a keypath and applies the running callback's read rule; the
  /// node if the store has one. Lock held.
  private func readable(_ keypath: String) throws(OrdoError) -> KeyNode? {
    let t = try store.target(keypath)
    if let c = gate.reader { try Rules.checkRead(c, keypath, t.ids, contractGraph) }
    if case .node(let n) = t { return n.node }
    return nil
  }

  /// The current values of a notification's changed keypaths that hold one,
  /// for surfaces that deliver values with a notification (D-Bus `Notify`).
  /// No contract check applies: these are the keypaths the contract was
  /// notified of. From a thread that does not own the running transaction,
  /// committed values.
  /// These reads count as reads of the contract's read patterns (its usage
  /// report, ``ContractInfo/unusedReads``): a remote contract receives them.
  package func values(of note: ContractNotification) -> [String: Value] {
    lockGate()
    defer { gate.lock.unlock() }
    let own = gate.isOwner
    let c = contractGraph.contract(note.contract)
    var out: [String: Value] = [:]
    for k in note.changed {
      guard let n = store.existing(k) else { continue }
      if let c { for (i, r) in c.reads.enumerated() where r.matches(n.ids) { c.usedReads |= ContractState.bit(i) } }
      if let v = store.value(n, own: own) { out[k] = v }
    }
    return out
  }

  /// The values and counters of every keypath matching one of the patterns,
  /// and the last committed transaction id, read at one moment.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``; inside a callback
  ///   ``OrdoError/Code/contractViolation`` for a pattern the contract may
  ///   not read.
  public func snapshot(_ patterns: [String]) throws(OrdoError) -> Snapshot {
    try snapshot(patterns, committed: false)
  }

  /// ``snapshot(_:)-([String])`` of the last committed state, also on the
  /// thread of the running pass: what a bridge answers a peer that takes
  /// no part in that pass (D-Bus: any peer but the awaited writer's).
  package func committedSnapshot(_ patterns: [String]) throws(OrdoError) -> Snapshot {
    try snapshot(patterns, committed: true)
  }

  /// The last committed transaction id, also on the thread of the running
  /// pass (see ``committedSnapshot(_:)``).
  package var committedTransactionID: UInt64 {
    lockGate()
    defer { gate.lock.unlock() }
    return store.lastTransaction
  }

  private func snapshot(_ patterns: [String], committed: Bool) throws(OrdoError) -> Snapshot {
    let parsed = try Bus.parse(patterns)
    lockGate()
    defer { gate.lock.unlock() }
    let compiled = parsed.map(store.compileQuery)
    if let c = gate.reader { try Rules.checkRead(c, patterns: compiled, as: patterns) }
    let own = gate.isOwner && !committed
    var vs: [String: Value] = [:]
    var cs: [String: UInt64] = [:]
    for p in compiled {
      store.forEachNode(matching: p) { n in
        if let v = store.value(n, own: own) { vs[n.key] = v }
        if n.counter > 0 { cs[n.key] = n.counter }
      }
    }
    return Snapshot(values: vs, counters: cs, transaction: committed ? store.lastTransaction : visibleTransaction())
  }

  /// What changed after transaction `since` among the keypaths matching the
  /// patterns (SPEC §10), read at one moment: a client that saw every
  /// transaction up to `since` catches up with it.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` when `since` is after the
  ///   last committed transaction (the client's history belongs to another
  ///   epoch); ``OrdoError/Code/invalidKeypath``; inside a callback
  ///   ``OrdoError/Code/contractViolation`` like ``snapshot(_:)-([String])``.
  public func changes(since: UInt64, _ patterns: [String]) throws(OrdoError) -> Changes {
    let parsed = try Bus.parse(patterns)
    lockGate()
    defer { gate.lock.unlock() }
    // Committed state only: a pass's own thread reads what was committed
    // before it, like every other thread.
    let last = store.lastTransaction
    guard since <= last else {
      throw OrdoError(.invalidArgument, "changes since transaction \(since), but the last committed transaction is \(last): that history belongs to another epoch than \(store.epoch)")
    }
    let compiled = parsed.map(store.compileQuery)
    if let c = gate.reader { try Rules.checkRead(c, patterns: compiled, as: patterns) }
    var out = Changes(transaction: last)
    for p in compiled {
      store.forEachNode(matching: p) { n in
        guard n.changedAt > since, n.counter > 0 else { return }
        out.counters[n.key] = n.counter
        out.changedAt[n.key] = n.changedAt
        if let v = store.journal.committedValue(n) { out.values[n.key] = v } else { out.removed.insert(n.key) }
      }
    }
    return out
  }

  private static func parse(_ patterns: [String]) throws(OrdoError) -> [Pattern] {
    var parsed: [Pattern] = []
    for p in patterns { parsed.append(try Pattern(p)) }
    return parsed
  }

  // MARK: - Contracts (SPEC §4)

  /// Registers a contract (SPEC §4). With ``ContractFlags/notifyInitial`` the
  /// contract is called once right away: during this call outside a pass
  /// (its writes then form a transaction of their own, committed when the
  /// callback returns — or, while this thread has a transaction open, join
  /// that transaction, committed or rolled back with it), or at its
  /// position in the running pass.
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
    let reads = try Bus.parse(spec.reads)
    let writes = try Bus.parse(spec.writes)
    if reads.isEmpty && !writes.isEmpty {
      throw OrdoError(.invalidArgument, "contract \"\(spec.name)\" has an empty read set (every-transaction) and may not write; its write set is [\(spec.writes.joined(separator: ", "))]")
    }
    let initial = spec.flags.contains(.notifyInitial)
    lockGate()
    let acquired = gate.acquire()
    let c = contractGraph.make(spec, reads: reads, writes: writes)
    do {
      try contractGraph.admit(c, initialDuringPassAfter: initial && passes.hasTransaction ? gate.running : nil)
    } catch {
      if acquired { gate.release() }
      gate.lock.unlock()
      // The refused contract (and its callback) goes without the lock.
      withExtendedLifetime(c) {}
      throw error
    }
    contractGraph.insert(c, deferLevels: passes.hasTransaction)
    let handle = ContractHandle(id: c.id, name: c.name, bus: self)
    guard initial else {
      if acquired { gate.release() }
      gate.lock.unlock()
      return handle
    }
    var hooks: [@Sendable () -> Void] = []
    var retired: [ContractState] = []
    switch gate.phase {
    case .pass where passes.hasTransaction:
      passes.scheduleInitial(c)
    case .idle:
      // Outside any transaction: the initial call opens a pass of its own.
      let outcome = passes.runInitial(c)
      if let trace = outcome.trace {
        gate.lock.unlock()
        deliver(trace)
        lockGate()
      }
      hooks = passEnded(outcome)
      if let refusal = outcome.refusal {
        passes.report(ContractFailure(contract: c.id, name: c.name, transaction: 0, message: refusal.description))
        gate.lock.unlock()
        withExtendedLifetime((outcome.retired, c)) {}
        for action in outcome.undo.reversed() { action() }
        for hook in hooks { hook() }
        return handle
      }
      retired = outcome.retired
    default:
      // Inside an open transaction, an initial call, or the initial call
      // that opened a pass: called now; its writes join what is open.
      passes.callInitial(c)
      if !gate.inPass { retired = contractGraph.takeRetired() }
    }
    gate.lock.unlock()
    // What went during the initial call goes without the lock (the new
    // contract too, if it unregistered itself).
    withExtendedLifetime((retired, c)) {}
    for hook in hooks { hook() }
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

  /// Unregisters a contract. It is not called afterwards, even later in the
  /// running pass.
  ///
  /// - Throws: ``OrdoError/Code/notFound`` for an unknown id.
  public func unregister(_ id: ContractID) throws(OrdoError) {
    lockGate()
    let acquired = gate.acquire()
    guard let c = contractGraph.contract(id) else {
      if acquired { gate.release() }
      gate.lock.unlock()
      throw OrdoError(.notFound, "no contract with id \(id) on this bus")
    }
    let gone = contractGraph.remove(c, inPass: gate.inPass, deferLevels: passes.hasTransaction)
    if acquired { gate.release() }
    gate.lock.unlock()
    // The contract (and what its callback captures) is released here,
    // outside the lock.
    withExtendedLifetime(gone) {}
  }

  /// Unregisters the contract with this name. Throws
  /// ``OrdoError/Code/notFound`` when there is none.
  public func unregister(named name: String) throws(OrdoError) {
    lockGate()
    let id = contractGraph.contract(named: name)?.id
    gate.lock.unlock()
    guard let id else { throw OrdoError(.notFound, "no contract named \"\(name)\" on this bus") }
    try unregister(id)
  }

  /// Sets the function told about every callback that fails (a thrown
  /// error), with the contract's name and the transaction id. It runs on the
  /// committing thread, without the bus's lock.
  public func onFailure(_ handler: (@Sendable (ContractFailure) -> Void)?) {
    lockGate()
    passes.failureHandler = handler
    gate.lock.unlock()
  }

  /// Sets the function told about every notification pass when it ends
  /// (devtools: `docs/devtools.md`): the contracts it scheduled in order,
  /// for each the keypaths that scheduled it, its writes, refused writes,
  /// failure and duration, and those it skipped and why. It runs on the
  /// committing thread after the pass, without the bus's lock. Without a
  /// handler a pass records nothing.
  public func onTrace(_ handler: (@Sendable (PassTrace) -> Void)?) {
    lockGate()
    passes.traceListeners[0] = handler
    gate.lock.unlock()
  }

  /// Adds a trace listener beside ``onTrace(_:)``'s (for bridges: a D-Bus
  /// service tracing for its peers does not displace the host's own
  /// handler). Returns its key for ``removeTraceListener(_:)``.
  package func addTraceListener(_ listener: @escaping @Sendable (PassTrace) -> Void) -> UInt64 {
    lockGate()
    defer { gate.lock.unlock() }
    let key = passes.nextTraceListener
    passes.nextTraceListener += 1
    passes.traceListeners[key] = listener
    return key
  }

  /// Removes a listener added with ``addTraceListener(_:)``.
  package func removeTraceListener(_ key: UInt64) {
    lockGate()
    passes.traceListeners[key] = nil
    gate.lock.unlock()
  }

  /// Calls the trace handler, without the lock.
  private func deliver(_ trace: PassTrace) {
    lockGate()
    let listeners = passes.traceListeners.sorted { $0.key < $1.key }.map(\.value)
    gate.lock.unlock()
    for l in listeners { l(trace) }
  }

  /// Runs `body` with the running callback's contract checks suspended on
  /// this thread: reads see the live state without contract checks, writes
  /// fail with ``OrdoError/Code/noTransaction``, registrations during a pass
  /// are placed relative to the suspended contract. For bridges that wait
  /// inside a callback (a remote writer contract awaiting its peer's answer)
  /// and meanwhile serve other clients on the same thread.
  package func withCallbackSuspended<T>(_ body: () throws -> T) rethrows -> T {
    lockGate()
    let was = gate.setSuspended(true)
    gate.lock.unlock()
    defer {
      if let was {
        lockGate()
        _ = gate.setSuspended(was)
        gate.lock.unlock()
      }
    }
    return try body()
  }

  // MARK: - Persistence hooks

  /// Sets the function told about every transaction just before it commits,
  /// with its id and the state after it of every keypath it changed. It
  /// runs on the committing thread with the bus's lock held, after the
  /// pass's last callback; when it throws, the transaction is discarded
  /// (memory as before it) and `commit` throws ``OrdoError/Code/storage``.
  /// For persistence layers (OrdoStore); it must not call into the bus.
  package func setCommitHook(_ hook: ((UInt64, [KeyState]) throws -> Void)?) {
    lockGate()
    passes.commitHook = hook
    gate.lock.unlock()
  }

  /// Replaces the model (values, counters, changed-at), the last
  /// transaction id and the epoch with a stored state. Contracts stay.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` while a transaction is
  ///   open on any thread (it waits for other threads' transactions) or
  ///   when a keypath changed after `lastTransaction`;
  ///   ``OrdoError/Code/invalidKeypath``. Nothing changes when it throws.
  package func restore(epoch: String, lastTransaction: UInt64, keypaths: [KeyState]) throws(OrdoError) {
    lockGate()
    let acquired = gate.acquire()
    defer {
      if acquired { gate.release() }
      gate.lock.unlock()
    }
    guard acquired, case .idle = gate.phase else {
      throw OrdoError(.invalidArgument, "restore with a transaction open on this thread")
    }
    try store.restore(epoch: epoch, lastTransaction: lastTransaction, keypaths: keypaths)
  }
}

/// The values and counters of the keypaths matching some patterns, read at
/// one moment (see ``Bus/snapshot(_:)-([String])``).
public struct Snapshot: Sendable, Hashable {
  /// The keypaths that hold a value, with it.
  public var values: [String: Value]
  /// The counter of every matching keypath that was ever changed.
  public var counters: [String: UInt64]
  /// The last committed transaction id (the running pass's, on its thread).
  public var transaction: UInt64

  /// Makes a snapshot.
  public init(values: [String: Value] = [:], counters: [String: UInt64] = [:], transaction: UInt64 = 0) {
    self.values = values
    self.counters = counters
    self.transaction = transaction
  }
}

/// What changed after a transaction (see ``Bus/changes(since:_:)-(_,[String])``).
public struct Changes: Sendable, Hashable {
  /// Keypaths that changed and hold a value, with it.
  public var values: [String: Value] = [:]
  /// Keypaths that changed and hold no value (removed, or only touched).
  public var removed: Set<String> = []
  /// The counter of every keypath in `values` and `removed`.
  public var counters: [String: UInt64] = [:]
  /// The changed-at of every keypath in `values` and `removed`: the id of
  /// the last committed transaction that changed it.
  public var changedAt: [String: UInt64] = [:]
  /// The last committed transaction id: the `since` of the next catch-up.
  public var transaction: UInt64

  /// Makes an empty result read at `transaction`.
  public init(transaction: UInt64) { self.transaction = transaction }
}

extension String {
  func replacingAll(_ target: String, _ replacement: String) -> String {
    guard contains(target) else { return self }
    return split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
  }
}
