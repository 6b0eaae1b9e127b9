/// The bus's reads (SPEC §2, §10): values, counters and changed-at by
/// keypath, snapshots and catch-up, each under the lock and the running
/// callback's read rule.
extension Bus {
  /// The value of `keypath`, or nil if it holds none. Inside a callback the
  /// keypath must be in the contract's read or write set. From a thread that
  /// does not own the running transaction, the last committed value.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``, ``OrdoError/Code/contractViolation``.
  public func value(_ keypath: String) throws(OrdoError) -> Value? {
    try withGate { () throws(OrdoError) in
      guard let n = try readable(keypath) else { return orDefault(nil, keypath) }
      return orDefault(store.value(n, own: gate.isOwner), keypath)
    }
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
    try withGate { () throws(OrdoError) in try readable(keypath)?.counter ?? 0 }
  }

  /// The id of the last committed transaction that changed `keypath` (0 if
  /// none; SPEC §10). A removed value keeps it. Read like ``counter(_:)`-(String)`.
  public func changedAt(_ keypath: String) throws(OrdoError) -> UInt64 {
    try withGate { () throws(OrdoError) in try readable(keypath)?.changedAt ?? 0 }
  }

  /// Declares a read of a host-owned value at `keypath` (see
  /// ``HostedProperty``): inside a callback, checks it against the
  /// contract's read and write sets like a read of a stored value.
  public func access(_ keypath: String) throws(OrdoError) {
    try withGate { () throws(OrdoError) in _ = try readable(keypath) }
  }

  /// Validates a keypath and applies the running callback's read rule; the
  /// node if the store has one. Lock held.
  func readable(_ keypath: String) throws(OrdoError) -> KeyNode? {
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
    withGate {
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
  }

  /// What a client-side cache of a contract's read set needs from a
  /// notification to stay exact (D-Bus `Register` option `cache`): for no
  /// changed keypath (an initial call), every value of the read set; else
  /// the value of every keypath at or under a changed keypath that the
  /// read set matches. A client drops what it holds at or under each
  /// changed keypath and puts these in its place. Read at the contract's
  /// turn in the pass: the stability rule (§5) keeps its read set as it is
  /// until the transaction ends, so these are its values at that
  /// transaction. Counted as reads like ``values(of:)``.
  package func readSetValues(of contract: ContractID, under changed: ChangedKeypaths) -> [String: Value] {
    withGate {
      guard let c = contractGraph.contract(contract) else { return [:] }
      let own = gate.isOwner
      var out: [String: Value] = [:]
      func take(_ n: KeyNode) {
        var matched = false
        for (i, r) in c.reads.enumerated() where r.matches(n.ids) {
          c.usedReads |= ContractState.bit(i)
          matched = true
        }
        if matched, let v = store.value(n, own: own) { out[n.key] = v }
      }
      if changed.isEmpty {
        for r in c.reads { store.forEachNode(matching: r, take) }
      } else {
        for k in changed { store.existing(k)?.forEachInSubtree(take) }
      }
      return out
    }
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
  package var committedTransactionID: UInt64 { withGate { store.lastTransaction } }

  private func snapshot(_ patterns: [String], committed: Bool) throws(OrdoError) -> Snapshot {
    let parsed = try Bus.parse(patterns)
    return try withGate { () throws(OrdoError) in
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
    return try withGate { () throws(OrdoError) in
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
  }

  /// The patterns parsed, or the first one's error.
  static func parse(_ patterns: [String]) throws(OrdoError) -> [Pattern] {
    var parsed: [Pattern] = []
    for p in patterns { parsed.append(try Pattern(p)) }
    return parsed
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

