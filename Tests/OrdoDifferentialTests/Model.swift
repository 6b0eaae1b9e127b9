// A deliberately simple model of SPEC §1–§5, run side by side with the real
// bus. Clarity over speed: a flat dictionary store, every contract scanned for
// every rule, levels recomputed from scratch, the pass picks the scheduled
// contract that sorts first each time. It shares no code with Sources/Ordo
// (values are compared by its own bit-for-bit rule; patterns by Naive).
//
// It executes a generated scenario the way the conformance runner does (a
// contract's callback records the call, then runs its `on_notify` actions
// whose `only_txn` matches) and records the outcome of every step and
// action; `annotate` writes those outcomes into the scenario as expectations.
//
// Where SPEC.md leaves a choice open, the model follows the decisions of the
// code (and docs/semantics.md), noted "decision:" below.

import Foundation
import Ordo

/// The model cannot say what should happen (a generated scenario outside
/// what the comparison covers); the sequence is skipped.
struct Unsupported: Error, CustomStringConvertible {
  let description: String
}

/// A failed operation: the status name the bus must report.
struct Fail: Error {
  let code: String
  init(_ code: String) { self.code = code }
}

/// What one step or action did.
struct Outcome: Equatable {
  var error: String?
  var value: Value?
  var counter: UInt64?
  var txn: UInt64?
  var calls: [Call]?
}

final class Model {
  enum Kind { case priority, data, every }

  final class Contract {
    let id: UInt64
    let seq: UInt64
    let name: String
    let reads: [String]
    let writes: [String]
    let priority: Int32?
    let kind: Kind
    let actions: [GStep]
    let path: [Int]

    init(id: UInt64, seq: UInt64, step: GStep, path: [Int]) {
      self.id = id
      self.seq = seq
      self.name = step.name ?? ""
      self.reads = step.reads
      self.writes = step.writes
      // SPEC §4: an empty read set makes an every-transaction contract; a
      // priority given to one is ignored.
      self.kind = step.reads.isEmpty ? .every : (step.priority == nil ? .data : .priority)
      self.priority = kind == .priority ? step.priority : nil
      self.actions = step.onNotify
      self.path = path
    }
  }

  /// A keypath as written in the open transaction.
  struct Written {
    let key: String
    var touched = false
    /// `set` or `remove` wrote the keypath's own value.
    var ownValue = false
    /// The keypaths whose values a `removeTree` of this keypath removed.
    var removed: [String] = []
  }

  struct Frame {
    let contract: Contract
    /// begin/commit nesting inside this callback.
    var depth = 0
  }

  // Store.
  var values: [String: Value] = [:]
  var counters: [String: UInt64] = [:]
  /// SPEC §10: the id of the last committed transaction whose counter bump
  /// touched the keypath. A keypath whose value was removed keeps it (and
  /// its counter): a tombstone.
  var changedAt: [String: UInt64] = [:]
  var lastTxn: UInt64 = 0

  // Contracts, in registration order.
  var contracts: [Contract] = []
  var nextID: UInt64 = 1
  var nextSeq: UInt64 = 1
  /// The conformance runner's name → contract map (set when `register`
  /// returns, cleared by a successful `unregister`).
  var handles: [String: Contract] = [:]

  // The open transaction.
  var depth = 0
  /// The value each changed keypath had at the start of the transaction.
  var start: [String: Value?] = [:]
  var written: [Written] = []

  // The running pass.
  var inPass = false
  var passLevels: [UInt64: Int] = [:]
  var called: Set<UInt64> = []
  /// Scheduled contracts and the keypaths that scheduled them, in order.
  var scheduled: [UInt64: [String]] = [:]
  var initialPending: Set<UInt64> = []
  /// The initial call of a contract registered outside any transaction
  /// runs: it opens a pass in which that contract counts as called, and the
  /// pass gets its id when the call returns having changed something.
  var initialPass = false
  /// Contracts registered with notifyInitial inside the open transaction:
  /// called in its pass, or each in a pass of its own after it when it
  /// changes nothing or is rolled back.
  var awaitingInitial: [Contract] = []
  var frames: [Frame] = []

  // Conditions and owned values (SPEC §15).
  /// A condition of the open transaction did not hold.
  var conflict = false
  /// Live owners; the owner of each owned value; the open transaction's
  /// `begin_owned` scopes (innermost last, with the depth of their begin);
  /// its owned sets; owners released from callbacks, removed when the pass
  /// ends.
  var owners: Set<String> = []
  var ownerOf: [String: String] = [:]
  var ownedScopes: [(owner: String, depth: Int)] = []
  var noted: [(key: String, owner: String)] = []
  var releasesAtEndOfPass: [String] = []

  // Output.
  var calls: [Call] = []
  /// Every outcome of each step or action (an action runs once per call).
  var outcomes: [[Int]: [Outcome]] = [:]

  // MARK: - Values

  /// SPEC §2: same presence, type and content; doubles bit for bit.
  static func same(_ a: Value?, _ b: Value?) -> Bool {
    switch (a, b) {
    case (nil, nil): return true
    case (.bool(let x)?, .bool(let y)?): return x == y
    case (.int64(let x)?, .int64(let y)?): return x == y
    case (.double(let x)?, .double(let y)?): return x.bitPattern == y.bitPattern
    case (.string(let x)?, .string(let y)?): return Array(x.utf8) == Array(y.utf8)
    case (.bytes(let x)?, .bytes(let y)?): return x == y
    default: return false
    }
  }

  func netChanged(_ k: String) -> Bool {
    guard let old = start[k] else { return false }
    return !Model.same(old, values[k])
  }

  /// SPEC §2/§5: a written keypath still counts as changed.
  func isChanged(_ w: Written) -> Bool {
    w.touched || (w.ownValue && netChanged(w.key)) || w.removed.contains(where: netChanged)
  }

  func entry(_ k: String) -> Written? { written.first { $0.key == k } }

  // MARK: - Order

  /// Data-flow edge: a may write something that affects what b reads.
  private var edgeCache: [String: Bool] = [:]
  func feeds(_ a: Contract, _ b: Contract) -> Bool {
    if a === b { return false }
    let key = "\(a.writes)>\(b.reads)"
    if let hit = edgeCache[key] { return hit }
    let result = a.writes.contains { w in b.reads.contains { r in Naive.mayAffect(writer: w, reader: r) } }
    edgeCache[key] = result
    return result
  }

  private var levelCache: [UInt64: Int]?

  /// SPEC §4 levels of the registered data contracts, from scratch.
  func freshLevels() throws(Unsupported) -> [UInt64: Int] {
    if let cached = levelCache { return cached }
    let data = contracts.filter { $0.kind == .data }
    var memo: [UInt64: Int] = [:]
    var visiting: Set<UInt64> = []
    func level(_ c: Contract) throws(Unsupported) -> Int {
      if let l = memo[c.id] { return l }
      guard visiting.insert(c.id).inserted else { throw Unsupported(description: "cycle among data contracts") }
      var l = 0
      for w in data where feeds(w, c) { l = max(l, try level(w) + 1) }
      visiting.remove(c.id)
      memo[c.id] = l
      return l
    }
    for c in data { _ = try level(c) }
    levelCache = memo
    return memo
  }

  /// The level a data contract gets against the registered ones, given
  /// their levels.
  func admissionLevel(_ c: Contract, _ levels: [UInt64: Int]) -> Int {
    var l = 0
    for w in contracts where w.kind == .data && feeds(w, c) { l = max(l, (levels[w.id] ?? 0) + 1) }
    return l
  }

  /// Current levels: frozen during a pass (SPEC §5: levels changed by a
  /// registration during a pass take effect from the next pass).
  func levels() throws(Unsupported) -> [UInt64: Int] {
    inPass && !initialPass ? passLevels : try freshLevels()
  }

  struct Key: Comparable {
    let phase: Int
    let rank: Int64
    let seq: UInt64
    static func < (a: Key, b: Key) -> Bool { (a.phase, a.rank, a.seq) < (b.phase, b.rank, b.seq) }
  }

  /// SPEC §4: priority contracts by priority, then data contracts by level,
  /// then every-transaction contracts; ties in registration order.
  func key(_ c: Contract, _ levels: [UInt64: Int]) -> Key {
    switch c.kind {
    case .priority: Key(phase: 0, rank: Int64(c.priority!), seq: c.seq)
    case .data: Key(phase: 1, rank: Int64(levels[c.id] ?? admissionLevel(c, levels)), seq: c.seq)
    case .every: Key(phase: 2, rank: 0, seq: c.seq)
    }
  }

  // MARK: - Running a scenario

  /// Runs the steps from a fresh state and returns them with every outcome
  /// written in as an expectation.
  static func annotate(_ steps: [GStep]) throws(Unsupported) -> [GStep] {
    let m = Model()
    for (i, s) in steps.enumerated() { try m.perform(s, path: [i]) }
    return try m.annotated(steps)
  }

  func annotated(_ steps: [GStep]) throws(Unsupported) -> [GStep] {
    for (path, list) in outcomes where list.contains(where: { $0 != list[0] }) {
      throw Unsupported(description: "action \(path) has different outcomes in different calls")
    }
    func apply(_ s: GStep, _ path: [Int]) -> GStep {
      var s = s
      s.clearExpectations()
      if let o = outcomes[path]?.first {
        s.expectError = o.error
        s.expectValue = o.value
        s.expectCounter = o.counter
        s.expectTxn = o.txn
        s.expectCalls = o.calls
      }
      s.onNotify = s.onNotify.enumerated().map { apply($1, path + [$0]) }
      return s
    }
    return steps.enumerated().map { apply($1, [$0]) }
  }

  /// Performs a top-level step (path of one index) or an action.
  func perform(_ s: GStep, path: [Int]) throws(Unsupported) {
    let before = calls.count
    var o = Outcome()
    do {
      switch s.op {
      case "register": try register(s, path: path)
      case "unregister": try unregister(s.name ?? "")
      case "begin": begin()
      case "commit":
        o.txn = try commit()
      case "rollback": try rollback()
      case "set": try write(s.key ?? "", .set(s.value!))
      case "touch": try write(s.key ?? "", .touch)
      case "remove": try write(s.key ?? "", .remove)
      case "remove_tree": try write(s.key ?? "", .removeTree)
      case "get": o.value = try get(s.key ?? "")
      case "counter": o.counter = try counter(s.key ?? "")
      case "expect": try expect(s.key ?? "", s.counter ?? 0)
      case "owner": owners.insert(s.name ?? "")
      case "begin_owned": try beginOwned(s.name ?? "")
      case "release": try release(s.name ?? "")
      default: throw Unsupported(description: "unknown op \(s.op)")
      }
    } catch let f as Fail {
      o = Outcome(error: f.code)
    } catch let u as Unsupported {
      throw u
    } catch {
      throw Unsupported(description: "\(error)")
    }
    if path.count == 1 { o.calls = Array(calls[before...]) }
    outcomes[path, default: []].append(o)
  }

  func call(_ c: Contract, txn: UInt64, changed: [String]) throws(Unsupported) {
    calls.append(Call(contract: c.name, changed: changed, txn: txn))
    frames.append(Frame(contract: c))
    for (j, a) in c.actions.enumerated() where a.onlyTxn == nil || a.onlyTxn == txn {
      try perform(a, path: c.path + [j])
    }
    // decision: begins a callback leaves open end with it.
    frames.removeLast()
  }

  // MARK: - Registration (SPEC §4, §5)

  func register(_ s: GStep, path: [Int]) throws {
    let name = s.name ?? ""
    guard !name.isEmpty else { throw Fail("INVALID_ARGUMENT") }
    for p in s.reads + s.writes where !Naive.isPattern(p) { throw Fail("INVALID_KEYPATH") }
    if s.reads.isEmpty && !s.writes.isEmpty { throw Fail("INVALID_ARGUMENT") }
    if contracts.contains(where: { $0.name == name }) { throw Fail("DUPLICATE_NAME") }
    let c = Contract(id: nextID, seq: nextSeq, step: s, path: path)
    if c.kind == .priority {
      for w in contracts where w.kind == .data && feeds(w, c) { throw Fail("ORDER_CONFLICT") }
    }
    if c.kind == .data {
      for p in contracts where p.kind == .priority && feeds(c, p) { throw Fail("ORDER_CONFLICT") }
      // A cycle: c reaches a data contract that feeds c.
      var reached: [Contract] = []
      var frontier = contracts.filter { $0.kind == .data && feeds(c, $0) }
      while let x = frontier.popLast() {
        if reached.contains(where: { $0 === x }) { continue }
        reached.append(x)
        frontier += contracts.filter { $0.kind == .data && feeds(x, $0) }
      }
      if reached.contains(where: { feeds($0, c) }) { throw Fail("CYCLE") }
    }
    let lv = try levels()
    let level = admissionLevel(c, lv)
    var withNew = lv
    withNew[c.id] = level
    let ck = key(c, withNew)
    // "A contract reads a keypath that a contract running later declares as
    // a concrete write", in both directions; decision: not between two data
    // contracts (their levels order the writer first).
    for w in contracts where !(w.kind == .data && c.kind == .data) && key(w, lv) > ck {
      for cw in w.writes where Naive.isConcrete(cw) && c.reads.contains(where: { Naive.mayAffect(writer: cw, reader: $0) }) {
        throw Fail("ORDER_CONFLICT")
      }
    }
    for r in contracts where !(r.kind == .data && c.kind == .data) && key(r, lv) < ck {
      for cw in c.writes where Naive.isConcrete(cw) && r.reads.contains(where: { Naive.mayAffect(writer: cw, reader: $0) }) {
        throw Fail("ORDER_CONFLICT")
      }
    }
    if s.notifyInitial && inPass && !initialPass, let running = frames.last?.contract, ck < key(running, lv) {
      throw Fail("ORDER_CONFLICT")
    }
    nextID += 1
    nextSeq += 1
    contracts.append(c)
    levelCache = nil
    if inPass { passLevels[c.id] = level }
    if !s.notifyInitial {
      handles[name] = c
      return
    }
    if inPass && !initialPass {
      // Called at its position in this pass, with an empty list (even when
      // writes made later in the pass affect it).
      scheduled[c.id] = []
      initialPending.insert(c.id)
      handles[name] = c
      return
    }
    handles[name] = c
    if inPass {
      // Inside the initial call that opened a pass: called now, its writes
      // join that pass.
      called.insert(c.id)
      try call(c, txn: lastTxn, changed: [])
    } else if depth > 0 {
      // Inside the open transaction: called once, in its pass or after it.
      awaitingInitial.append(c)
    } else {
      try runInitialPass(c)
    }
  }

  /// The initial call outside any transaction, with the last committed id:
  /// it opens a pass in which the contract counts as called.
  func runInitialPass(_ c: Contract) throws(Unsupported) {
    inPass = true
    initialPass = true
    called = [c.id]
    try call(c, txn: lastTxn, changed: [])
    initialPass = false
    _ = try runPass(afterInitialCall: true)
  }

  /// The initial calls the ended transaction did not make (it changed
  /// nothing or was rolled back), for the contracts still registered.
  func runAwaitedInitials() throws(Unsupported) {
    let awaiting = awaitingInitial
    awaitingInitial = []
    for c in awaiting where contracts.contains(where: { $0 === c }) { try runInitialPass(c) }
  }

  func unregister(_ name: String) throws {
    guard let c = handles[name] else { throw Fail("NOT_FOUND") }
    contracts.removeAll { $0 === c }
    levelCache = nil
    handles[name] = nil
  }

  // MARK: - Transactions (SPEC §3)

  func begin() {
    if frames.isEmpty { depth += 1 } else { frames[frames.count - 1].depth += 1 }
  }

  func commit() throws -> UInt64 {
    if !frames.isEmpty {
      // Inside a callback begin/commit join the pass's transaction.
      guard frames[frames.count - 1].depth > 0 else { throw Fail("NO_TRANSACTION") }
      frames[frames.count - 1].depth -= 1
      return 0
    }
    guard depth > 0 else { throw Fail("NO_TRANSACTION") }
    if ownedScopes.last?.depth == depth { ownedScopes.removeLast() }
    depth -= 1
    guard depth == 0 else { return 0 }
    if conflict {
      discardTransaction()
      try runAwaitedInitials()
      throw Fail("CONFLICT")
    }
    let txn = try runPass()
    if txn != 0 {
      let due = releasesAtEndOfPass
      releasesAtEndOfPass = []
      for o in due { try release(o) }
    }
    try runAwaitedInitials()
    return txn
  }

  func rollback() throws {
    guard frames.isEmpty else { throw Fail("INVALID_ARGUMENT") }
    guard depth > 0 else { throw Fail("NO_TRANSACTION") }
    discardTransaction()
    try runAwaitedInitials()
  }

  /// Forgets the open transaction: values as at its start, no condition,
  /// no owned write.
  func discardTransaction() {
    for (k, old) in start { values[k] = old }
    start = [:]
    written = []
    depth = 0
    conflict = false
    ownedScopes = []
    noted = []
  }

  // MARK: - Conditions and owned values (SPEC §15)

  func expect(_ k: String, _ n: UInt64) throws {
    guard Naive.isKeypath(k) else { throw Fail("INVALID_KEYPATH") }
    if frames.isEmpty && depth == 0 { throw Fail("NO_TRANSACTION") }
    guard frames.isEmpty else { throw Fail("INVALID_ARGUMENT") }
    if counters[k, default: 0] != n { conflict = true }
  }

  func beginOwned(_ o: String) throws {
    guard owners.contains(o), frames.isEmpty else { throw Fail("INVALID_ARGUMENT") }
    begin()
    ownedScopes.append((o, depth))
  }

  /// Releases an owner: its values are removed in the open transaction, at
  /// the end of the running pass from a callback, else in a transaction of
  /// their own.
  func release(_ o: String) throws {
    guard frames.isEmpty else {
      releasesAtEndOfPass.append(o)
      return
    }
    guard owners.remove(o) != nil else { return }
    let held = ownerOf.filter { $0.value == o }.keys.sorted()
    for k in held { ownerOf[k] = nil }
    let own = depth == 0
    if own { begin() }
    for k in held { try write(k, .remove) }
    if own { _ = try commit() }
  }

  /// Who owns what once a transaction that stays ends: a value removed, or
  /// set or removed by a plain write, is no longer owned; an owned set whose
  /// value is still there belongs to its (live) owner.
  func settleOwnership() {
    for w in written {
      if w.ownValue || values[w.key] == nil { ownerOf[w.key] = nil }
      for d in w.removed where values[d] == nil { ownerOf[d] = nil }
    }
    for (k, o) in noted where values[k] != nil && owners.contains(o) { ownerOf[k] = o }
    noted = []
    ownedScopes = []
  }

  // MARK: - Writes and reads

  enum Op {
    case set(Value), touch, remove, removeTree
  }

  /// Stores a value (nil: none); records the start value. Whether the value
  /// changed.
  func change(_ k: String, _ v: Value?) -> Bool {
    let old = values[k]
    if Model.same(old, v) { return false }
    if start.index(forKey: k) == nil { start[k] = .some(old) }
    values[k] = v
    return true
  }

  func write(_ k: String, _ op: Op) throws {
    guard Naive.isKeypath(k) else { throw Fail("INVALID_KEYPATH") }
    let c = frames.last?.contract
    if c == nil && depth == 0 { throw Fail("NO_TRANSACTION") }
    if let c {
      let allowed: Bool
      if case .removeTree = op {
        allowed = c.writes.contains { Naive.coversTree($0, k) }
      } else {
        allowed = c.writes.contains { Naive.matches($0, k) }
      }
      guard allowed else { throw Fail("CONTRACT_VIOLATION") }
      let lv = try levels()
      let ck = key(c, lv)
      for r in contracts where r !== c && key(r, lv) < ck && r.reads.contains(where: { Naive.affects(write: k, read: $0) }) {
        throw Fail("STABILITY")
      }
    }
    var w = entry(k) ?? Written(key: k)
    var altered = false
    switch op {
    case .set(let v):
      w.ownValue = true
      altered = change(k, v)
    case .remove:
      w.ownValue = true
      altered = change(k, nil)
    case .touch:
      // Every touch is news: the value lives in the host program.
      altered = true
      w.touched = true
    case .removeTree:
      for d in values.keys.sorted() where Naive.isSelfOrDescendant(d, of: k) {
        altered = change(d, nil) || altered
        if !w.removed.contains(d) { w.removed.append(d) }
      }
    }
    if let i = written.firstIndex(where: { $0.key == k }) { written[i] = w } else { written.append(w) }
    if c == nil, case .set = op, let scope = ownedScopes.last { noted.append((k, scope.owner)) }
    // SPEC §5.3: a write in a pass schedules, later in the pass, the
    // contracts it affects (decision: a set or remove that leaves the current
    // value as it was schedules no one; a touch always schedules).
    if inPass, altered, let c {
      let lv = try levels()
      let ck = key(c, lv)
      for r in contracts where r !== c && !called.contains(r.id) && key(r, lv) > ck && schedules(w, r) {
        scheduled[r.id, default: []].append(k)
      }
    }
  }

  /// Whether a change of the written keypath schedules `r` (SPEC §1, §2):
  /// `r` reads something a write to it affects; for a removeTree of a
  /// keypath whose own value did not change, `r` reads one of the removed
  /// values itself.
  func schedules(_ w: Written, _ r: Contract) -> Bool {
    let own = w.touched || (netChanged(w.key) && (w.ownValue || w.removed.contains(w.key)))
    if w.removed.isEmpty || own { return r.reads.contains { Naive.affects(write: w.key, read: $0) } }
    return w.removed.contains { d in netChanged(d) && r.reads.contains { Naive.matches($0, d) } }
  }

  func readable(_ k: String) -> Bool {
    guard let c = frames.last?.contract else { return true }
    return c.kind == .every || c.reads.contains { Naive.matches($0, k) } || c.writes.contains { Naive.matches($0, k) }
  }

  func get(_ k: String) throws -> Value {
    guard Naive.isKeypath(k) else { throw Fail("INVALID_KEYPATH") }
    guard readable(k) else { throw Fail("CONTRACT_VIOLATION") }
    guard let v = values[k] else { throw Fail("NOT_FOUND") }
    return v
  }

  func counter(_ k: String) throws -> UInt64 {
    guard Naive.isKeypath(k) else { throw Fail("INVALID_KEYPATH") }
    guard readable(k) else { throw Fail("CONTRACT_VIOLATION") }
    return counters[k] ?? 0
  }

  // MARK: - Resynchronization (SPEC §10)

  /// The committed value of a keypath: while a transaction is open, the
  /// value it had at the start of it.
  func committedValue(_ k: String) -> Value? {
    if let old = start[k] { return old }
    return values[k]
  }

  /// `changes(since, patterns)` outside callbacks: every keypath matching a
  /// pattern whose changed-at is after `since`, with its committed value,
  /// or in `removed` when it holds none; the last committed id.
  func changes(since: UInt64, _ patterns: [String]) throws -> Changes {
    for p in patterns where !Naive.isPattern(p) { throw Fail("INVALID_KEYPATH") }
    // decision: `since` after the last committed id belongs to another epoch.
    guard since <= lastTxn else { throw Fail("INVALID_ARGUMENT") }
    var out = Changes(transaction: lastTxn)
    for (k, at) in changedAt where at > since && patterns.contains(where: { Naive.matches($0, k) }) {
      out.counters[k] = counters[k]
      out.changedAt[k] = at
      if let v = committedValue(k) { out.values[k] = v } else { out.removed.insert(k) }
    }
    return out
  }

  // MARK: - The pass (SPEC §5)

  func runPass(afterInitialCall: Bool = false) throws(Unsupported) -> UInt64 {
    defer {
      settleOwnership()
      start = [:]
      written = []
      depth = 0
      inPass = false
      passLevels = [:]
      called = []
      scheduled = [:]
      initialPending = []
      levelCache = nil
    }
    let changedAtStart = written.filter(isChanged)
    if changedAtStart.isEmpty { return 0 }
    lastTxn += 1
    let txn = lastTxn
    passLevels = try freshLevels()
    inPass = true
    // After an initial call its writes have scheduled their readers already.
    for w in changedAtStart where !afterInitialCall {
      for r in contracts where schedules(w, r) { scheduled[r.id, default: []].append(w.key) }
    }
    // Initial calls of registrations inside the transaction, at their positions.
    for c in awaitingInitial where contracts.contains(where: { $0 === c }) {
      if scheduled[c.id] == nil { scheduled[c.id] = [] }
      initialPending.insert(c.id)
    }
    awaitingInitial = []
    for e in contracts where e.kind == .every && scheduled[e.id] == nil { scheduled[e.id] = [] }
    while true {
      var next: Contract?
      for c in contracts where scheduled[c.id] != nil && !called.contains(c.id) {
        if next == nil || key(c, passLevels) < key(next!, passLevels) { next = c }
      }
      guard let c = next else { break }
      called.insert(c.id)
      var changed: [String] = []
      if c.kind == .every {
        changed = written.filter(isChanged).map(\.key)
      } else {
        for k in scheduled[c.id]! where !changed.contains(k) && isChanged(entry(k)!) { changed.append(k) }
      }
      let initial = initialPending.remove(c.id) != nil
      if changed.isEmpty && !initial { continue }
      try call(c, txn: txn, changed: initial ? [] : changed)
    }
    // Counters: once for every keypath touched or whose value differs from
    // its value at the start.
    var bump = Set(written.filter(\.touched).map(\.key))
    for k in start.keys where netChanged(k) { bump.insert(k) }
    for k in bump {
      counters[k, default: 0] += 1
      changedAt[k] = txn
    }
    return txn
  }
}
