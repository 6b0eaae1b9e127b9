/// The registered contracts and what orders them (SPEC §4): the registry,
/// the name table, the read and write pattern indexes, the admission checks
/// (order conflicts, cycles), and dependency levels. It answers the pass's
/// one question — which contracts does a write to this keypath affect — from
/// a cache on the key node, rebuilt after every registration change.
final class ContractGraph {
  let store: Store
  private(set) var registry = Registry()
  private var byName = UnretainedTable<ContractState>()
  private(set) var readIndex = PatternIndex()
  private(set) var writeIndex = PatternIndex()
  /// Every-transaction contracts, in registration order.
  private(set) var everyTransaction: [ContractState] = []
  private(set) var nextID: ContractID = 1
  /// Bumped by every registration and unregistration: node reader caches of
  /// older generations are stale.
  private var generation: UInt64 = 0
  /// Level changes made during a pass, applied when it ends (SPEC §5).
  private var deferredLevelSeeds: [ContractState] = []

  init(store: Store) { self.store = store }

  /// The registered contract with this name.
  func contract(named name: String) -> ContractState? {
    byName.find(hashString(name)) { $0.name == name }?.takeUnretainedValue()
  }

  /// The registered contract with this id.
  func contract(_ id: ContractID) -> ContractState? { registry.find(id) }

  // MARK: - Readers (SPEC §1 "affects")

  /// The contracts whose read sets a write to `n` affects, each once.
  /// Cached on the node until the next registration or unregistration.
  @inline(__always)
  func readers(_ n: KeyNode) -> Readers {
    if n.readersGeneration == generation { return n.readers }
    return rebuildReaders(n)
  }

  private func rebuildReaders(_ n: KeyNode) -> Readers {
    var list: [ContractState] = []
    readIndex.forEachReader(affectedBy: n.ids) { list.append($0) }
    n.readers = Readers(ContractGraph.unique(list))
    n.readersGeneration = generation
    return n.readers
  }

  /// The contracts whose read sets a write to a target affects (a target
  /// the store does not have yet has no cache).
  func forEachReader(affectedBy t: Target, _ body: (ContractState) -> Void) {
    switch t {
    case .node(let n): n.with { readers($0).forEach(body) }
    case .new(_, _, let ids): readIndex.forEachReader(affectedBy: ids, body)
    }
  }

  /// The contracts with a read pattern that matches the keypath `n` itself
  /// (not only a descendant): those a removed value of `n` changes.
  func forEachReader(matching n: KeyNode, _ body: (ContractState) -> Void) {
    var list: [ContractState] = []
    readIndex.forEachReader(matching: n.ids) { list.append($0) }
    ContractGraph.unique(list).forEach(body)
  }

  /// The list in id order with each contract once (a contract with several
  /// affected patterns is listed once).
  private static func unique(_ list: [ContractState]) -> [ContractState] {
    guard list.count > 1 else { return list }
    var sorted = list.sorted { $0.id < $1.id }
    var last: ContractState?
    sorted.removeAll { r in
      defer { last = r }
      return r === last
    }
    return sorted
  }

  // MARK: - Admission (SPEC §4)

  /// Makes the state of a new contract (not yet registered).
  func make(_ spec: ContractSpec, reads: [Pattern], writes: [Pattern]) -> ContractState {
    ContractState(
      id: nextID, name: spec.name, reads: reads.map(store.compile), writes: writes.map(store.compile), priority: spec.priority,
      callback: spec.callback)
  }

  /// The registration checks (SPEC §4), and the check that an initial call
  /// asked for during a pass is not placed before the running contract.
  /// Changes nothing.
  func admit(_ c: ContractState, initialDuringPassAfter running: ContractState?) throws(OrdoError) {
    if contract(named: c.name) != nil {
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
          throw OrdoError(.orderConflict, "priority contract \"\(c.name)\" reads \"\(store.text(r))\", which data contract \"\(w.name)\" may write; priority contracts run before all data contracts")
        }
      }
    case .data:
      for w in c.writes {
        var reader: ContractState?
        readIndex.forEachReader(affectedBy: w.ids) { r in if r.kind == .priority, reader == nil { reader = r } }
        if let r = reader {
          throw OrdoError(.orderConflict, "data contract \"\(c.name)\" may write \"\(store.text(w))\", which priority contract \"\(r.name)\" reads; priority contracts run before all data contracts")
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
        throw OrdoError(.orderConflict, "contract \"\(c.name)\" reads \"\(store.text(r))\", which contract \"\(w.name)\", running after it, writes")
      }
    }
    for w in c.writes where w.isConcrete {
      var earlier: ContractState?
      readIndex.forEachReader(affectedBy: w.ids) { r in
        if earlier == nil, r !== c, !(r.isData && c.isData), r.key < key { earlier = r }
      }
      if let r = earlier {
        throw OrdoError(.orderConflict, "contract \"\(c.name)\" writes \"\(store.text(w))\", which contract \"\(r.name)\", running before it, reads")
      }
    }
    if let current = running, key < current.key {
      throw OrdoError(.orderConflict, "contract \"\(c.name)\" asks for an initial call, but its position in the pass is before the running contract \"\(current.name)\"")
    }
  }

  /// Refuses a data contract that would close a cycle.
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

  /// A data contract's level (SPEC §4): 1 + the highest level among the
  /// data contracts (other than itself) that may write something it reads.
  private func level(of c: ContractState) -> Int {
    var level = 0
    for r in c.reads {
      writeIndex.forEachWriter(affecting: r) { w in
        if w.isData, w !== c, w.registered { level = max(level, w.level + 1) }
      }
    }
    return level
  }

  /// Recomputes levels downstream of the seeds; during a pass, deferred to
  /// its end (SPEC §5).
  private func propagateLevels(_ seeds: [ContractState], inPass: Bool) {
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

  /// Applies the level changes deferred by a pass. Called when it ends.
  func passEnded() {
    guard !deferredLevelSeeds.isEmpty else { return }
    let seeds = deferredLevelSeeds
    deferredLevelSeeds.removeAll()
    propagateLevels(seeds, inPass: false)
  }

  // MARK: - Registration changes

  /// Adds an admitted contract.
  /// `deferLevels` while a pass with an id runs (its order must not change).
  func insert(_ c: ContractState, deferLevels: Bool) {
    precondition(c.id == nextID, "contracts are made and inserted one at a time")
    nextID += 1
    registry.append(c)
    byName.insert(c)
    for r in c.reads { readIndex.insert(r, c) }
    for w in c.writes { writeIndex.insert(w, c) }
    generation += 1
    if c.kind == .everyTransaction { everyTransaction.append(c) }
    if c.isData { propagateLevels(downstream(c), inPass: deferLevels) }
  }

  /// Removes a contract. It stays in the registry, unregistered, until no
  /// pass can name it (the registry sweeps only outside passes). Returns its
  /// callback, to be released without the lock. `inPass` while any pass
  /// runs (its schedule names contracts unretained); `deferLevels` while a
  /// pass with an id runs.
  func remove(_ c: ContractState, inPass: Bool, deferLevels: Bool) -> ContractCallback? {
    let seeds = c.isData ? downstream(c) : []
    byName.remove(c)
    for r in c.reads { readIndex.remove(r, c) }
    for w in c.writes { writeIndex.remove(w, c) }
    generation += 1
    if c.kind == .everyTransaction { everyTransaction.removeAll { $0 === c } }
    c.registered = false
    registry.removed(sweep: !inPass)
    // A contract scheduled in the running pass holds its trigger nodes:
    // drop them with it.
    c.clearTriggers()
    propagateLevels(seeds, inPass: deferLevels)
    // A contract unregistered from its own callback (or while a bridge
    // waits in it) keeps its callback until the call returns.
    guard !c.running else { return nil }
    let callback = c.callback
    c.callback = nil
    return callback
  }

  /// Patterns as text, for messages.
  func text(_ ps: PatternList) -> String { "[" + ps.map(store.text).joined(separator: ", ") + "]" }
}

/// The registered contracts in id order (ids only grow, so appending keeps
/// the order), found by binary search: 8 bytes a contract where a hash
/// table takes about 20. An unregistered contract stays until more than
/// half the entries are unregistered ones; they are then dropped in one
/// sweep.
struct Registry {
  private var all: [ContractState] = []
  /// Registered contracts.
  private(set) var count = 0

  /// Adds a contract with an id above every id added before.
  mutating func append(_ c: ContractState) {
    precondition(all.last.map { $0.id < c.id } ?? true, "contract ids must grow")
    all.append(c)
    count += 1
  }

  /// Notes that a contract was unregistered (its `registered` is false).
  /// With `sweep` (outside passes: a pass's schedule and triggers name
  /// contracts without retaining them, so they must stay alive until it
  /// ends), drops the unregistered ones once they are more than half.
  mutating func removed(sweep: Bool) {
    count -= 1
    if sweep && count * 2 < all.count {
      all.removeAll { !$0.registered }
    }
  }

  /// The registered contract with this id.
  func find(_ id: ContractID) -> ContractState? {
    var lo = 0
    var hi = all.count
    while lo < hi {
      let mid = (lo + hi) / 2
      if all[mid].id < id { lo = mid + 1 } else { hi = mid }
    }
    guard lo < all.count, all[lo].id == id, all[lo].registered else { return nil }
    return all[lo]
  }

  /// The registered contracts, in id order.
  var live: [ContractState] { all.filter(\.registered) }

  /// Calls `body` for every contract still listed (registered or not).
  func forEach(_ body: (ContractState) -> Void) { all.forEach(body) }
}

