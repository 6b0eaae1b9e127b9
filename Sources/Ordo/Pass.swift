/// The notification pass (SPEC §5): which contracts a transaction's changes
/// schedule, in which order they are called, what each receives, and the
/// commit at the end. One runner per bus; it runs on the committing thread
/// with the bus's lock held, and lets the lock go only around callbacks.
///
/// Guarded by the bus's lock, so exclusivity is unchecked: its
/// `@exclusivity(unchecked)` fields skip the dynamic check (the cost of
/// each is measured beside it).
final class PassRunner {
  let gate: Gate
  let store: Store
  let graph: ContractGraph
  /// The store's journal (a field of its own: read without a retain).
  let journal: Journal
  /// Identifies the running pass on the contracts (32 bits, to keep them
  /// small; see ``nextSerial()``).
  private(set) var serial: UInt32 = 0
  // Pushed and popped for every scheduled contract. Without
  // @exclusivity(unchecked) the delivery workload (`ordo-bench --profile
  // delivery`, callgrind) runs 16 % more instructions.
  @exclusivity(unchecked) private var schedule = Schedule()
  private var markSerial: UInt32 = 0

  // Statistics and reports.
  private(set) var notifications: UInt64 = 0
  private(set) var failures: UInt64 = 0
  /// What the last failed callback threw, described.
  private var lastFailure: String?
  /// The contract whose failure the handler is told of, during that call:
  /// the pass's position for a registration the handler makes (an initial
  /// call before it is refused, SPEC §5).
  private(set) var failing: ContractState?
  var failureHandler: (@Sendable (ContractFailure) -> Void)?
  var failurePolicy = FailurePolicy.report
  /// The failures written to standard error, without a handler.
  private var failureLog = FailureLog()
  /// Told about every transaction before it commits; a throw discards it.
  var commitHook: ((UInt64, [KeyState]) throws -> Void)?
  /// Told about every pass, after it ends, by key: 0 is the handler of
  /// ``Bus/onTrace(_:)``, others are bridges' listeners.
  /// (Exclusivity-unchecked: read at every pass, one of the seven per-pass
  /// checks measured in ``ContractGraph``; lock held.)
  @exclusivity(unchecked) var traceListeners: [UInt64: @Sendable (PassTrace) -> Void] = [:]
  var nextTraceListener: UInt64 = 1
  /// Contracts registered with an initial call inside the open transaction
  /// (SPEC §5): called at their position in its pass, or, when it changes
  /// nothing or is rolled back, each in a pass of its own after it
  /// (``Bus/runAwaitedInitials(_:)``).
  @exclusivity(unchecked) var initialsAwaitingPass: [ContractState] = []
  /// The running pass's trace, only while someone listens.
  private(set) var recorder: TraceRecorder?

  init(gate: Gate, store: Store, graph: ContractGraph) {
    self.gate = gate
    self.store = store
    self.graph = graph
    journal = store.journal
  }

  deinit { schedule.free() }

  /// How a pass ended.
  struct Outcome {
    /// The transaction id; 0 when nothing changed or the commit hook refused it.
    var transaction: UInt64 = 0
    /// The commit hook's refusal, when it refused.
    var refusal: OrdoError?
    /// Rollback actions to run (last first) without the lock, after a refusal.
    var undo: [@Sendable () -> Void] = []
    /// The pass's trace, for the trace handler (called without the lock).
    var trace: PassTrace?
    /// Contracts unregistered during the pass, to release without the lock.
    var retired: [ContractState] = []
  }

  // MARK: - Starting a pass

  /// The pass of the transaction in the journal, at its outermost commit.
  /// Lock and ownership held on entry; ownership given up on return.
  func runCommit() -> Outcome {
    assert(store.heldWrites.isEmpty, "a pass starts with writes held back")
    nextSerial()
    if !traceListeners.isEmpty { recorder = TraceRecorder() }
    guard scheduleChangedReaders() else { return discard() }
    for c in takeInitialsAwaitingPass() where c.registered { scheduleInitial(c) }
    let txn = store.lastTransaction + 1
    gate.phase = .pass(txn: txn, call: nil)
    return finish(txn)
  }

  /// Schedules the readers of what the transaction changed, evaluated
  /// before any callback; returns whether anything changed. One function
  /// for the whole loop, so that the per-change scheduling inlines into it
  /// (inside ``runCommit()`` it does not: a call per change).
  @inline(never)
  private func scheduleChangedReaders() -> Bool {
    fetchReaders()
    if graph.slab.hasPrefetchHints { fetchHints() }
    var anyChanged = false
    for i in 0..<journal.count where journal[i].written && journal.isChanged(i) {
      anyChanged = true
      scheduleReaders(changedBy: i)
    }
    return anyChanged
  }

  /// Starts fetching the states of the readers of every written keypath
  /// that has several, before the scheduling below reads them one by one:
  /// the fetches of a commit reaching contracts out of cache then overlap
  /// instead of following each other (docs/performance.md). A single
  /// reader's state was asked for when the transaction first wrote its
  /// keypath (``Readers/fetchSingleEarly()``). A reader list not yet
  /// refreshed may name a contract that is gone: a prefetch of its line is
  /// harmless.
  @inline(__always)
  private func fetchReaders() {
    for i in 0..<journal.count {
      if case .many(let list) = journal[i].node.state.pointee.readers {
        for c in list { fetchEarly(UnsafeRawPointer(c.state)) }
      }
    }
  }

  /// Starts fetching what the prefetch hint of every reader of a written
  /// keypath names (``PrefetchHint``), before the scheduling, so that the
  /// loads of the hints, out of cache at 100 000 contracts, overlap each
  /// other rather than wait for each contract's turn. Only on a bus with
  /// hints, and out of line, so that ``fetchReaders()``'s scheduling stays
  /// inlined. A stale reader's room holds no
  /// hint or another contract's: harmless.
  @inline(never)
  private func fetchHints() {
    for i in 0..<journal.count {
      switch journal[i].node.state.pointee.readers {
      case .none: break
      case .one(let r): r.ref.fetchPrefetchHint()
      case .many(let list): for c in list { c.fetchPrefetchHint() }
      }
    }
  }

  /// The pass opened by the initial call of `c`, registered outside any
  /// transaction (SPEC §5): `c` counts as called in it, so its own writes do
  /// not call it again; the pass gets an id only if the call changed
  /// something. Lock and ownership held on entry; ownership given up on
  /// return.
  func runInitial(_ c: ContractState) -> Outcome {
    nextSerial()
    if !traceListeners.isEmpty { recorder = TraceRecorder() }
    gate.phase = .pass(txn: 0, call: nil)
    callInitial(c)
    var anyChanged = false
    for i in 0..<journal.count where journal[i].written && journal.isChanged(i) {
      anyChanged = true
      break
    }
    guard anyChanged else {
      while let s = schedule.pop() { s.clearTriggers() }
      return discard()
    }
    let txn = store.lastTransaction + 1
    gate.setPassTransaction(txn)
    return finish(txn)
  }

  /// Calls `c` once now, with an empty list and the last committed id, in
  /// the pass that an initial call opened (its own, or one nested in it):
  /// `c` counts as called in it. Lock held.
  func callInitial(_ c: ContractState) {
    let h = c.passState
    h.pointee.calledSerial = serial
    let note = ContractNotification(transaction: store.lastTransaction, contract: c.id, changed: [])
    if let r = recorder { call(h, note, tracing: r, because: [], initial: true) } else { call(h, note) }
  }

  /// Schedules `c`, registered during the running pass with an initial
  /// call, at its position. Lock held.
  func scheduleInitial(_ c: ContractState) {
    c.passState.pointee.initialPending = true
    enqueue(c.passState)
  }

  /// Empties ``initialsAwaitingPass``, returning what it held. Lock held.
  func takeInitialsAwaitingPass() -> [ContractState] {
    guard !initialsAwaitingPass.isEmpty else { return [] }
    defer { initialsAwaitingPass.removeAll() }
    return initialsAwaitingPass
  }

  /// Whether the running pass has its id (it is not the initial call that
  /// opens a pass). Lock held.
  var hasTransaction: Bool {
    if case .pass(let txn, _) = gate.phase { return txn != 0 }
    return false
  }

  // MARK: - Scheduling

  /// The contracts a change of the written keypath of record `i` schedules
  /// (SPEC §1, §2): the readers a write to it affects; for a removeTree of
  /// a keypath whose own value did not change, only the readers of the
  /// values it removed.
  @inline(__always)
  private func forEachReader(changedBy i: Int, _ body: (ContractRef) -> Void) {
    if !journal[i].hasLists || journal.removed(i).isEmpty || journal.ownChange(i) {
      graph.readers(journal[i].node).forEach(body)
      return
    }
    for j in journal.removed(i) where journal.netChanged(Int(j)) {
      journal[Int(j)].node.with { graph.forEachReader(matching: $0) { body($0.passState) } }
    }
  }

  /// Schedules, at the start of a pass, the readers that the change of
  /// record `i`'s keypath affects. Without closures in the
  /// common case (a closure here costs a retain and a release of the runner
  /// per change).
  @inline(__always)
  private func scheduleReaders(changedBy i: Int) {
    if journal[i].hasLists { return scheduleReadersWithLists(changedBy: i) }
    // The node's state only (its line in the slab), not its object.
    let n = journal[i].node
    graph.refreshReaders(n)
    switch n.state.pointee.readers {
    case .none: break
    case .one(let r):
      let c = r.ref
      if due(c) { trigger(c, by: n) }
    case .many(let list): for c in list where due(c) { trigger(c, by: n) }
    }
  }

  /// ``scheduleReaders(changedBy:)`` for a record with lists (a
  /// removeTree): out of line, so that the common
  /// path stays small enough to inline.
  @inline(never)
  private func scheduleReadersWithLists(changedBy i: Int) {
    let node = journal[i].node
    if !journal.removed(i).isEmpty && !journal.ownChange(i) {
      forEachReader(changedBy: i) { c in
        guard due(c) else { return }
        trigger(c, by: node)
      }
      return
    }
    graph.readers(node).forEach { c in if due(c) { trigger(c, by: node) } }
  }

  /// Whether a reader of a change is scheduled at the start of the pass:
  /// registered and not yet called in it.
  @inline(__always)
  private func due(_ c: ContractRef) -> Bool {
    c.pointee.registered && c.pointee.calledSerial != serial
  }

  /// Schedules, later in the pass, the contracts a write by the running
  /// contract `after` affects. Lock held.
  func scheduleReaders(of n: NodeRef, after: ContractState) {
    guard let i = journal.index(n) else { return }
    let afterKey = after.key
    let a = after.passState
    forEachReader(changedBy: i) { r in
      guard r.pointee.registered, r.pointee.calledSerial != serial, r != a, !(r.key < afterKey) else { return }
      trigger(r, by: n)
    }
  }

  /// Schedules `c` in the running pass unless it is already.
  @inline(__always)
  private func enqueue(_ c: ContractRef) {
    guard c.pointee.scheduledSerial != serial else { return }
    c.pointee.scheduledSerial = serial
    c.clearTriggers()
    schedule.push(c)
  }

  /// Schedules `c` (if it is not yet) for a write to `n`.
  @inline(__always)
  private func trigger(_ c: ContractRef, by n: NodeRef) {
    enqueue(c)
    c.addTrigger(n)
  }

  // MARK: - Running and ending a pass

  /// Calls the scheduled contracts in order, then commits. Lock held.
  private func finish(_ txn: UInt64) -> Outcome {
    for c in graph.everyTransaction where c.passState.pointee.calledSerial != serial { enqueue(c.passState) }
    // One notification for every call of the pass: it holds the store's
    // root once, not a node per call (see ``ChangedKeypaths``).
    var note = ContractNotification(pass: txn, keeper: store.root)
    while let c = schedule.pop() { step(c, &note) }
    var outcome = Outcome()
    let changed = recorder == nil ? [] : changedKeys()
    if let hook = commitHook {
      do {
        try hook(txn, store.pendingChanges(txn))
      } catch {
        outcome.refusal = OrdoError(.storage, "transaction \(txn) was not stored, nothing of it was applied: \(error)")
        outcome.undo = store.rollback()
        outcome.trace = endTrace(txn, changed, committed: false)
        outcome.retired = end()
        return outcome
      }
    }
    store.commit(txn)
    outcome.trace = endTrace(txn, changed, committed: true)
    outcome.retired = end()
    outcome.transaction = txn
    return outcome
  }

  /// Ends a pass in which nothing changed: no id, nobody notified (but the
  /// initial call that opened it, which the trace shows).
  private func discard() -> Outcome {
    var outcome = Outcome()
    if let r = recorder, !r.steps.isEmpty { outcome.trace = endTrace(store.lastTransaction, [], committed: false) }
    recorder = nil
    store.settleOwnership()
    store.reset()
    outcome.retired = end()
    return outcome
  }

  /// Every keypath written in the transaction that still counts as changed.
  private func changedKeys() -> [String] {
    var keys: [String] = []
    for i in 0..<journal.count where journal[i].written && journal.isChanged(i) {
      keys.append(journal[i].node.with { $0.key })
    }
    return keys
  }

  private func endTrace(_ txn: UInt64, _ changed: [String], committed: Bool) -> PassTrace? {
    defer { recorder = nil }
    return recorder?.finish(txn, changed: changed, committed: committed)
  }

  /// The keypaths that scheduled `c` (for the trace).
  private func because(_ c: ContractRef) -> [String] {
    let t = c.pointee.triggers
    guard let first = t.first else { return [] }
    guard t.hasMore else { return [first.with { $0.key }] }
    var seen = Set<String>()
    return c.allTriggers.map(\.key).filter { seen.insert($0).inserted }
  }

  /// Ends the pass; returns the contracts unregistered during it.
  private func end() -> [ContractState] {
    gate.finish()
    graph.passEnded()
    return graph.takeRetired()
  }

  /// Calls a popped contract if it is due (SPEC §5.2), with the pass's
  /// reused notification. Lock held.
  @inline(__always)
  private func step(_ c: ContractRef, _ note: inout ContractNotification) {
    let txn = note.transaction
    guard c.pointee.registered, c.pointee.calledSerial != serial else {
      if let r = recorder, !c.pointee.registered { r.skipped(c.contract, .unregistered, because: because(c), transaction: txn) }
      c.clearTriggers()
      return
    }
    c.pointee.calledSerial = serial
    if c.pointee.initialPending {
      // An initial call during a pass gets an empty list even when writes
      // made later in the pass affect its reads: "read everything".
      c.pointee.initialPending = false
      c.clearTriggers()
      note.prepare(c.pointee.id, keypaths: [])
      if let r = recorder { call(c, note, tracing: r, because: [], initial: true, step: true) } else { call(c, note, step: true) }
      return
    }
    let any = prepare(&note, for: c)
    guard let r = recorder else {
      c.clearTriggers()
      if any { call(c, note, step: true) }
      return
    }
    let why = c.pointee.kind == .everyTransaction ? Array(note.changed) : because(c)
    c.clearTriggers()
    if !any {
      r.skipped(c.contract, .unchanged, because: why, transaction: txn)
      return
    }
    call(c, note, tracing: r, because: why, initial: false, step: true)
  }

  /// Readies `note` with the keypaths `c` is told of at its turn: those
  /// that scheduled it and still count as changed; every changed keypath
  /// for an every-transaction contract. Returns whether there is any. The
  /// common single trigger inline (its node, no reference count), the rest
  /// out of line.
  @inline(__always)
  private func prepare(_ note: inout ContractNotification, for c: ContractRef) -> Bool {
    let keys: ChangedKeypaths
    let t = c.pointee.triggers
    if c.pointee.kind == .everyTransaction {
      keys = ChangedKeypaths(changedKeys())
    } else if let u = t.first {
      if !t.hasMore {
        guard isChanged(u) else { return false }
        note.prepare(c.pointee.id, node: u)
        return true
      }
      keys = changedKeypaths(of: c.allTriggers)
    } else {
      keys = []
    }
    note.prepare(c.pointee.id, keypaths: keys)
    return !keys.isEmpty
  }

  /// Whether the keypath of a trigger still counts as changed.
  @inline(__always)
  private func isChanged(_ trigger: NodeRef) -> Bool {
    guard let i = journal.index(trigger) else { return false }
    return journal.isChanged(i)
  }

  /// The keypaths of several triggers that still count as changed, each
  /// once, in the order they scheduled.
  private func changedKeypaths(of list: [KeyNode]) -> ChangedKeypaths {
    markSerial &+= 1
    var keys: [String] = []
    for n in list {
      guard let i = journal.index(n.ref), journal[i].mark != markSerial else { continue }
      journal[i].mark = markSerial
      if journal.isChanged(i) { keys.append(n.key) }
    }
    return ChangedKeypaths(keys)
  }

  /// A call recorded in the trace.
  private func call(_ c: ContractRef, _ note: ContractNotification, tracing r: TraceRecorder, because: [String], initial: Bool, step: Bool = false) {
    let i = r.calling(c.contract, because: because, initial: initial, transaction: note.transaction)
    let t0 = monotonicNS()
    let failed = call(c, note, step: step)
    r.called(i, durationNS: monotonicNS() - t0, failure: failed ? lastFailure : nil)
  }

  /// Calls a contract's callback without holding the lock; returns whether
  /// it threw (then ``lastFailure`` says what). A flag, not the error:
  /// returning an optional error costs every call a release. Lock held on
  /// entry and on return. `step`: a step of the running pass (no callback
  /// runs; see ``Gate/callInPass(_:_:_:)``).
  @discardableResult
  @inline(__always)
  private func call(_ c: ContractRef, _ note: ContractNotification, step: Bool = false) -> Bool {
    c.pointee.calls &+= 1
    c.pointee.lastTransaction = note.transaction
    notifications &+= 1
    var failure: (any Error)?
    c.pointee.running = true
    // The callback is a constant of the contract, which the bus keeps
    // while it runs (see ``Registry``): called borrowed, without a retain.
    if step {
      gate.callInPass(c, note.transaction) {
        do { try c.pointee.invoke(note) } catch { failure = error }
      }
    } else {
      gate.call(c) {
        do { try c.pointee.invoke(note) } catch { failure = error }
      }
    }
    // Unregistered during this call, it stays retired until the pass (or,
    // outside a pass, the registration that made this initial call) ends,
    // and goes then without the lock.
    c.pointee.running = false
    guard let failure else { return false }
    failed(c.contract, note.transaction, failure)
    return true
  }

  /// Counts and reports a callback's failure. Lock held.
  @inline(never)
  private func failed(_ c: ContractState, _ txn: UInt64, _ failure: any Error) {
    graph.failures[c.id, default: 0] += 1
    failures += 1
    let message = String(describing: failure)
    lastFailure = message
    failing = c
    report(ContractFailure(contract: c.id, name: c.name, transaction: txn, message: message))
    failing = nil
  }

  /// Tells the failure handler, without the lock, or writes the failure to
  /// standard error; then applies the failure policy. Lock held.
  func report(_ failure: ContractFailure) {
    if let handler = failureHandler {
      gate.withLockReleased { handler(failure) }
    } else if let text = failureLog.lines(for: failure, at: monotonicNS()) {
      gate.withLockReleased { FailureLog.emit(text) }
    }
    if failurePolicy == .trapInDebug {
      assertionFailure("Ordo: contract \"\(failure.name)\" failed in transaction \(failure.transaction): \(failure.message) (Bus.failurePolicy is .trapInDebug)")
    }
  }

  /// Starts a new pass serial. When the 32 bits run out (after four
  /// billion passes) every contract's stamps are cleared first, so that no
  /// stale stamp can equal a new serial.
  private func nextSerial() {
    if serial == .max {
      graph.registry.forEach { c in
        c.passState.pointee.scheduledSerial = 0
        c.passState.pointee.calledSerial = 0
      }
      serial = 0
    }
    serial += 1
  }
}

/// The contracts scheduled in a pass, popped in order key order. The bulk
/// scheduled at the start of a pass is sorted once; contracts scheduled
/// while the pass runs go to a binary heap (keys and references in separate
/// arrays, so that sifting compares plain keys).
///
/// Contracts are not retained: a scheduled contract stays in the bus's
/// registry at least until the pass ends (the registry retires contracts
/// unregistered during a pass until it ends).
///
/// The bulk lives in two ``Buffer``s rather than arrays: every scheduled
/// contract is pushed and popped once. Only touched with the bus's lock
/// held; ``free()`` releases the buffers.
/// Unretained: docs/reliability.md, "Unretained references", row "the pass's schedule and the running contract".
struct Schedule {
  private typealias Ref = ContractRef
  /// Pushed since the run was taken.
  private var added = Buffer<Ref>()
  /// The sorted run, popped from `next`.
  private var run = Buffer<Ref>()
  private var next = 0
  private var keys: [OrderKey] = []
  private var refs: [Ref] = []

  @inline(__always)
  mutating func push(_ c: ContractRef) { added.append(c) }

  mutating func free() {
    added.free()
    run.free()
  }

  @inline(__always) private static func key(_ r: Ref) -> OrderKey { r.key }

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
  @inline(__always)
  mutating func pop() -> ContractRef? {
    // Most passes schedule nothing while they run: the sorted run, in turn.
    if next < run.count && added.count == 0 && keys.isEmpty {
      next += 1
      return run[next - 1]
    }
    return popSlow()
  }

  private mutating func popSlow() -> ContractRef? {
    if added.count > 0 {
      if next == run.count && keys.isEmpty {
        // Swap the buffers (no copy): `run` is spent and keeps its capacity.
        run.removeAll()
        swap(&run, &added)
        // Often already in order (readers registered in the order their
        // keypaths were written): one scan instead of a sort.
        run.sortIfNeeded(by: Schedule.key)
        next = 0
      } else {
        for i in 0..<added.count { heapPush(added[i]) }
        added.removeAll()
      }
    }
    let haveRun = next < run.count
    if !keys.isEmpty && (!haveRun || keys[0] < Schedule.key(run[next])) { return heapPop() }
    guard haveRun else {
      run.removeAll()
      next = 0
      return nil
    }
    next += 1
    return run[next - 1]
  }
}
