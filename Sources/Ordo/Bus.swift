
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
/// (registration, order, levels) and the `PassRunner` (the pass). This
/// file holds the lock's sections, transactions and the one write path;
/// the other calls are extensions by concept (`Bus+Reads.swift`,
/// `Bus+Writes.swift`, `Bus+Contracts.swift`, `Bus+Persistence.swift`),
/// each taking the lock only through `withGate` or `withLock`.
public final class Bus: @unchecked Sendable {
  let gate = Gate()
  let store = Store()
  let contractGraph: ContractGraph
  let passes: PassRunner
  /// Transactions rolled back (statistics).
  private(set) var rollbackCount: UInt64 = 0
  /// Commits refused for a condition that did not hold (statistics).
  private(set) var conflictCount: UInt64 = 0
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
    store.heldWrites.discard()
    link.detach()
    store.reset()
  }

  // MARK: - The lock

  /// Takes the bus's lock and, on the owner's thread, applies the writes
  /// held back (``WriteBehind``): every section under the lock starts
  /// here, but the writes that may be held back themselves
  /// (``write(_:_:)`` settles before any write it does not hold back).
  @inline(__always)
  private func lockGate() {
    gate.lock.lock()
    // Only the owner holds writes back, and only its own reads and writes
    // need them applied: another thread reads the committed state.
    if gate.isOwner, !store.heldWrites.isEmpty { store.settle() }
  }

  /// Runs `body` under the bus's lock, the writes held back applied first
  /// (``lockGate()``): the one way a section of the bus takes the lock. A
  /// throwing body names its error type (`() throws(OrdoError) in`).
  @inline(__always)
  func withGate<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
    lockGate()
    defer { gate.lock.unlock() }
    return try body()
  }

  /// ``withGate(_:)`` without applying the writes held back: for a write
  /// that may be held back with them (finding its node does not depend on
  /// what is held; ``write(_:_:)`` settles before any write it does not
  /// hold back).
  @inline(__always)
  func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
    gate.lock.lock()
    defer { gate.lock.unlock() }
    return try body()
  }

  /// Runs `body` with the lock let go, inside a section under it: for a
  /// call out of the bus (a handler) in the middle of that section.
  func withoutGate<R>(_ body: () -> R) -> R {
    gate.lock.unlock()
    defer { lockGate() }
    return body()
  }

  // MARK: - Transactions (SPEC §3)

  /// Begins a write transaction, or joins the one this thread has open (or
  /// the running pass, from a callback). Waits while another thread's
  /// transaction runs.
  public func begin() {
    withGate {
      _ = gate.acquire()
      gate.enter()
    }
  }

  /// What a commit leaves to do without the lock.
  private enum CommitEnding {
    case refused
    case joined
    case conflict(OrdoError, undo: [@Sendable () -> Void], awaiting: [ContractState])
    case ran(PassRunner.Outcome, hooks: [@Sendable () -> Void], awaiting: [ContractState], swept: [ContractState])
  }

  /// Commits. The outermost commit runs the notification pass and returns
  /// after it with the transaction id (0 when nothing changed); an inner
  /// commit returns 0.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` without a matching `begin`;
  ///   ``OrdoError/Code/conflict`` when a condition of the transaction
  ///   (``expect(_:counter:)-(String,_)``) did not hold (then nothing of it
  ///   was applied and no pass ran); ``OrdoError/Code/storage`` when a persistence layer could not store
  ///   the transaction (then nothing of it was applied).
  @discardableResult
  public func commit() throws(OrdoError) -> UInt64 {
    let ending = withGate { () -> CommitEnding in
      switch gate.leave() {
      case .refused: return .refused
      case .joined: return .joined
      case .outermost:
        if let conflict = store.journal.conflict {
          // A condition did not hold: nothing is applied, no pass runs.
          let undo = store.rollback()
          conflictCount += 1
          gate.finish()
          return .conflict(conflict, undo: undo, awaiting: passes.takeInitialsAwaitingPass())
        }
        // Owner-bound contracts of dead owners go before the pass.
        let swept = link.owned.isEmpty ? [] : sweepDeadOwners().released
        let outcome = passes.runCommit()
        return .ran(outcome, hooks: passEnded(outcome), awaiting: passes.takeInitialsAwaitingPass(), swept: swept)
      }
    }
    switch ending {
    case .refused: throw OrdoError(.noTransaction, "commit without a transaction: call begin first")
    case .joined: return 0
    case .conflict(let error, let undo, let awaiting):
      for action in undo.reversed() { action() }
      runAwaitedInitials(awaiting)
      throw error
    case .ran(let outcome, let hooks, let awaiting, let swept):
      // Contracts unregistered during the pass, or swept with their dead
      // owners before it, go now, without the lock.
      withExtendedLifetime((outcome.retired, swept)) {}
      defer {
        for hook in hooks { hook() }
        // Initial calls the transaction did not make: it changed nothing.
        if !awaiting.isEmpty { runAwaitedInitials(awaiting) }
      }
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
  func passEnded(_ outcome: PassRunner.Outcome) -> [@Sendable () -> Void] {
    guard outcome.transaction != 0 || outcome.refusal != nil else { return [] }
    return link.takeEndOfPassHooks()
  }

  /// Discards every write of the whole (outermost) transaction; nothing is
  /// notified and no counter changes. Contracts registered in it with
  /// ``ContractFlags/notifyInitial`` are then called as if registered
  /// outside any transaction.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction`` without a transaction;
  ///   ``OrdoError/Code/invalidArgument`` inside a callback (a pass cannot be
  ///   undone).
  public func rollback() throws(OrdoError) {
    let (undo, awaiting) = try withGate { () throws(OrdoError) in
      guard gate.isOwner, gate.phase.openDepth != nil else {
        if gate.isOwner && gate.inTransaction {
          let name = gate.running.map { "contract \"\($0.name)\"" } ?? "a contract"
          throw OrdoError(.invalidArgument, "rollback inside the callback of \(name): a notification pass cannot be undone")
        }
        throw OrdoError(.noTransaction, "rollback without a transaction: call begin first")
      }
      let undo = store.rollback()
      rollbackCount += 1
      gate.finish()
      return (undo, passes.takeInitialsAwaitingPass())
    }
    for action in undo.reversed() { action() }
    runAwaitedInitials(awaiting)
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
    return try completeTransaction(body)
  }

  /// Runs `body` in the transaction just begun and commits it; when `body`
  /// throws, rolls it back and rethrows. Returns the result of `body` and
  /// the transaction id.
  func completeTransaction<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> (R, UInt64) {
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
    try withGate { () throws(OrdoError) in
      guard gate.inTransaction else { throw OrdoError(.noTransaction, "onRollback outside a transaction: call begin first") }
      if !gate.inPass { store.journal.undo.append(action) }
    }
  }

  /// Whether the calling thread has a transaction open or runs a callback:
  /// then writes are accepted and a `begin` joins what is open. Bridges use
  /// it to hold remote work back while the host thread's transaction is open.
  package var isInTransaction: Bool { withGate { gate.inTransaction } }

  /// The id of the last committed transaction that changed something (0 if
  /// none). While a pass runs, its thread sees the pass's id; other threads
  /// see the last committed one (the pass's writes are not visible to them).
  public var transactionID: UInt64 { withGate { visibleTransaction() } }

  /// The last transaction id as the calling thread sees it. Lock held.
  func visibleTransaction() -> UInt64 { gate.ownPassTransaction ?? store.lastTransaction }

  /// The epoch of this bus's history (SPEC §10): a UUID made with its
  /// store. Transaction ids, counters and changed-at compare only within one
  /// epoch; a persistence layer restores it with the model.
  public var epoch: String { withGate { store.epoch } }

  /// The number of keypath nodes the store keeps (for tests).
  var nodeCount: Int { withGate { store.nodes.count } }

  // MARK: - The write path (SPEC §2)

  /// Sets the value of `keypath`.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``, ``OrdoError/Code/noTransaction``,
  ///   and inside a callback ``OrdoError/Code/contractViolation`` or
  ///   ``OrdoError/Code/stability``.
  public func set(_ keypath: String, _ value: Value) throws(OrdoError) {
    try withLock { () throws(OrdoError) in try write(store.writeTarget(keypath, .set(value)), .set(value)) }
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
      if !store.heldWrites.isEmpty { store.settle() }
    case .owned:
      // Owned writes are not held back: each notes its node's owner.
      if !store.heldWrites.isEmpty { store.settle() }
    case .contract(let c):
      assert(store.heldWrites.isEmpty, "writes held back in a callback")
      do { try Rules.checkWrite(c, t, op, contractGraph) } catch {
        passes.recorder?.refused(t.keypath, error)
        throw error
      }
    case .refused: throw Rules.noTransaction(op, t.keypath)
    }
    apply(t, op, access)
  }

  /// Applies a checked write and, inside a pass, schedules what it affects;
  /// notes the sets that ownership needs (``Ownership``). Lock held.
  @inline(__always)
  func apply(_ t: Target, _ op: WriteOp, _ access: WriteAccess) {
    let n = store.node(t)
    guard case .contract(let c) = access else {
      _ = store.apply(n, op)
      if case .owned(let owner) = access {
        if case .set = op { store.ownership.wrote(n.node, owner) }
      } else if store.ownership.isNoting {
        notePlain(n, op)
      }
      return
    }
    // A callback runs in a pass.
    if let r = passes.recorder { r.wrote(n.with { $0.key }) }
    if store.apply(n, op) { passes.scheduleReaders(of: n, after: c) }
    if store.ownership.isNoting { notePlain(n, op) }
  }

  /// Notes a plain write while the transaction notes them
  /// (``Ownership/isNoting``): a set, which may end an ownership settled
  /// later; a removal ends it by the value it removes.
  private func notePlain(_ n: NodeRef, _ op: WriteOp) {
    if case .set = op { store.ownership.wrote(n.node, Ownership.plain) }
  }
}
