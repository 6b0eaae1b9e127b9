/// The registered contracts and what orders them (SPEC §4): the registry,
/// the name table, the read and write pattern indexes, the admission checks
/// (order conflicts, cycles), and dependency levels. It answers the pass's
/// one question — which contracts does a write to this keypath affect — from
/// a cache on the key node, rebuilt after every registration change.
///
/// Guarded by the bus's lock, so exclusivity is unchecked: its
/// `@exclusivity(unchecked)` fields skip the dynamic check (the cost of
/// each is measured beside it).
final class ContractGraph {
  let store: Store
  // The fields a pass reads or empties once each (per pass, not per
  // change) are exclusivity-unchecked: each dynamic check costs about 75
  // instructions, 7 a pass, which is 7 % of a commit of 10 changes
  // (`ordo-bench --profile commit-handles:100000`, callgrind).
  @exclusivity(unchecked) private(set) var registry = Registry()
  private var byName = UnretainedTable<ContractState>()
  private(set) var readIndex = PatternIndex()
  private(set) var writeIndex = PatternIndex()
  /// Every-transaction contracts, in registration order.
  @exclusivity(unchecked) private(set) var everyTransaction: [ContractState] = []
  private(set) var nextID: ContractID = 1
  /// Bumped by every registration and unregistration: node reader caches of
  /// older generations are stale (see ``nextGeneration()``).
  private(set) var generation: UInt32 = 0

  /// Moves the generation to `g`, as that many registration changes would
  /// (for tests of the wrap; every cache is stale afterwards, as it would
  /// be).
  func skipGenerations(to g: UInt32) {
    precondition(g > generation && g < NodeSlab.released, "a later generation that a graph can have")
    generation = g
  }
  /// Level changes made during a pass, applied when it ends (SPEC §5).
  @exclusivity(unchecked) private var deferredLevelSeeds: [ContractState] = []
  /// The contracts' pass states (see ``ContractPassState``).
  let slab = ContractSlab()
  /// The failed calls of each registered contract that has failed (few do:
  /// kept here rather than in every contract).
  var failures: [ContractID: UInt64] = [:]

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
  func readers(_ n: NodeRef) -> Readers {
    if n.state.pointee.readersGeneration == generation { return n.state.pointee.readers }
    return rebuildReaders(n)
  }

  /// Makes `n`'s reader cache current (then read ``NodeState/readers`` in
  /// place, without a copy).
  @inline(__always)
  func refreshReaders(_ n: NodeRef) {
    if n.state.pointee.readersGeneration != generation { _ = rebuildReaders(n) }
  }

  private func rebuildReaders(_ n: NodeRef) -> Readers {
    var list: [ContractState] = []
    n.with { readIndex.forEachReader(affectedBy: $0.ids) { list.append($0) } }
    let readers = Readers(ContractGraph.unique(list))
    n.state.pointee.readers = readers
    n.state.pointee.readersGeneration = generation
    return readers
  }

  /// Makes every reader cache stale: after a registration change, the next
  /// generation. A generation is 32 bits, to fit a node's state in a cache
  /// line; when it would reach a value reserved for "none", every node's
  /// cache is marked stale first, so that no old stamp can match again.
  private func nextGeneration() {
    if generation == NodeSlab.released - 1 {
      store.root.forEachInSubtree { $0.ref.state.pointee.readersGeneration = NodeState.noGeneration }
      generation = 0
    } else {
      generation += 1
    }
  }

  /// The contracts whose read sets a write to a target affects, by their
  /// pass states (a target the store does not have yet has no cache).
  func forEachReader(affectedBy t: Target, _ body: (ContractRef) -> Void) {
    switch t {
    case .node(let n): readers(n).forEach(body)
    case .new(_, _, let ids): readIndex.forEachReader(affectedBy: ids) { body($0.passState) }
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
      slab: slab, callback: spec.callback)
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
    nextGeneration()
    if c.kind == .everyTransaction { everyTransaction.append(c) }
    if c.isData { propagateLevels(downstream(c), inPass: deferLevels) }
  }

  /// Removes a contract. Returns it, to be released without the lock, or
  /// nil when the registry keeps it retired until the running pass (or its
  /// own running call) ends. `inPass` while any pass runs (its schedule
  /// names contracts unretained); `deferLevels` while a pass with an id
  /// runs.
  func remove(_ c: ContractState, inPass: Bool, deferLevels: Bool) -> ContractState? {
    let seeds = c.isData ? downstream(c) : []
    byName.remove(c)
    failures[c.id] = nil
    for r in c.reads { readIndex.remove(r, c) }
    for w in c.writes { writeIndex.remove(w, c) }
    nextGeneration()
    if c.kind == .everyTransaction { everyTransaction.removeAll { $0 === c } }
    c.registered = false
    // A contract scheduled in the running pass holds its trigger nodes:
    // drop them with it.
    c.clearTriggers()
    propagateLevels(seeds, inPass: deferLevels)
    // Kept while the running pass may still pop it, or while its own call
    // (or a bridge waiting in it) runs.
    return registry.remove(c, keep: inPass || c.passState.pointee.running)
  }

  /// The contracts retired during the pass that ended (or the initial call
  /// outside a pass): to be released without the lock.
  func takeRetired() -> [ContractState] { registry.takeRetired() }

  /// Patterns as text, for messages.
  func text(_ ps: PatternList) -> String { "[" + ps.map(store.text).joined(separator: ", ") + "]" }
}

/// The registered contracts in id order (ids only grow, so appending keeps
/// the order), found by binary search over their ids: 16 bytes a contract
/// where a hash table takes about 20.
///
/// The registry is what keeps a contract alive (the pass, the indexes'
/// caches and the name table name it without retaining it, and the
/// callback is a constant of the contract, called without a retain). So
/// an unregistered contract goes at once — returned by ``remove(_:keep:)``
/// to be released without the bus's lock — unless a pass or its own call
/// still names it: then it is kept aside (retired) until that ends. Its
/// slot becomes a hole; the holes are dropped in one sweep when they are
/// more than half.
struct Registry {
  private var ids: [ContractID] = []
  private var refs: [ContractState?] = []
  private var holes = 0
  /// Unregistered contracts that the running pass or call still names.
  private var retired: [ContractState] = []
  /// Registered contracts.
  private(set) var count = 0

  /// Adds a contract with an id above every id added before.
  mutating func append(_ c: ContractState) {
    precondition(ids.last.map { $0 < c.id } ?? true, "contract ids must grow")
    ids.append(c.id)
    refs.append(c)
    count += 1
  }

  private func slot(_ id: ContractID) -> Int? {
    var lo = 0
    var hi = ids.count
    while lo < hi {
      let mid = (lo + hi) / 2
      if ids[mid] < id { lo = mid + 1 } else { hi = mid }
    }
    return lo < ids.count && ids[lo] == id ? lo : nil
  }

  /// Takes out an unregistered contract (its `registered` is false).
  /// Returns it, for the caller to release without the lock; with `keep`
  /// (a pass runs, or its own call), keeps it retired instead and returns
  /// nil.
  mutating func remove(_ c: ContractState, keep: Bool) -> ContractState? {
    guard let i = slot(c.id), refs[i] === c else { return nil }
    refs[i] = nil
    holes += 1
    count -= 1
    if holes > 8 && holes * 2 > ids.count {
      var j = 0
      for k in 0..<ids.count where refs[k] != nil {
        ids[j] = ids[k]
        refs.swapAt(j, k)
        j += 1
      }
      ids.removeLast(ids.count - j)
      refs.removeLast(refs.count - j)
      holes = 0
    }
    if keep {
      retired.append(c)
      return nil
    }
    return c
  }

  /// Every retired contract, taken out (the pass ended).
  mutating func takeRetired() -> [ContractState] {
    guard !retired.isEmpty else { return [] }
    defer { retired.removeAll() }
    return retired
  }

  /// The registered contract with this id (an unregistered one's slot is
  /// empty).
  func find(_ id: ContractID) -> ContractState? {
    guard let i = slot(id) else { return nil }
    return refs[i]
  }

  /// The registered contracts, in id order.
  var live: [ContractState] { refs.compactMap { $0 } }

  /// Calls `body` for every registered contract and every retired one.
  func forEach(_ body: (ContractState) -> Void) {
    for case let c? in refs { body(c) }
    retired.forEach(body)
  }
}
