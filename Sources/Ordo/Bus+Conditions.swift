import Synchronization

/// Conditional commits and owned values (SPEC §15): what a model shared by
/// several writers needs — updates that cannot be lost (etcd's `Txn`,
/// ZooKeeper's versioned writes) and values that vanish with the one who
/// wrote them (etcd leases, ZooKeeper's ephemeral nodes).
extension Bus {
  // MARK: - Conditions

  /// Makes the transaction open on this thread conditional: its outermost
  /// commit applies it only if `keypath`'s counter is still `counter` (0:
  /// never changed). When a condition does not hold, nothing of the
  /// transaction is applied, no pass runs, no id is used, and the commit
  /// throws ``OrdoError/Code/conflict`` naming the keypath, the expected
  /// and the current counter.
  ///
  /// Transactions are serialized, so a counter cannot move between the
  /// read a read-modify-write starts from and its commit on one bus: the
  /// condition guards the read made *before* the transaction (a value shown
  /// to a user, a peer's `Get`). Check it with the counter read then:
  ///
  /// ```swift
  /// let seen = try bus.counter("cart.count")   // with the value shown
  /// try bus.transaction(expecting: ["cart.count": seen]) { () throws(OrdoError) in
  ///   try bus.set("cart.count", .int64(newCount))
  /// }
  /// ```
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``; ``OrdoError/Code/noTransaction``
  ///   outside a transaction; ``OrdoError/Code/invalidArgument`` inside a
  ///   callback (a pass cannot be refused).
  public func expect(_ keypath: String, counter expected: UInt64) throws(OrdoError) {
    try withGate { () throws(OrdoError) in
      let t = try store.target(keypath)
      guard gate.inTransaction else {
        throw OrdoError(.noTransaction, "expect \"\(keypath)\" outside a transaction: call begin first")
      }
      guard gate.phase.openDepth != nil else {
        throw OrdoError(.invalidArgument, "expect \"\(keypath)\" inside a callback: a notification pass cannot be refused")
      }
      guard store.journal.conflict == nil else { return }
      let current: UInt64
      if case .node(let n) = t { current = n.with { $0.counter } } else { current = 0 }
      if current != expected {
        store.journal.conflict = OrdoError(
          .conflict,
          "keypath \"\(keypath)\" was expected at counter \(expected) but is at \(current): nothing of the transaction was applied")
      }
    }
  }

  /// ``expect(_:counter:)-(String,_)`` for a typed keypath.
  public func expect(_ keypath: Keypath, counter expected: UInt64) throws(OrdoError) {
    try expect(keypath.string, counter: expected)
  }

  /// Runs `body` in a transaction that commits only if every keypath of
  /// `conditions` still has its counter (see ``expect(_:counter:)-(String,_)``);
  /// rolls back and rethrows when `body` throws.
  ///
  /// - Returns: the transaction id (0 if nothing changed).
  /// - Throws: ``OrdoError/Code/conflict`` when a condition does not hold;
  ///   what `body` throws.
  @discardableResult
  public func transaction(
    expecting conditions: KeyValuePairs<String, UInt64>, _ body: () throws(OrdoError) -> Void
  ) throws(OrdoError) -> UInt64 {
    begin()
    return try completeTransaction { () throws(OrdoError) in
      for (k, n) in conditions { try expect(k, counter: n) }
      try body()
    }.1
  }

  // MARK: - Owned values

  /// Begins a write transaction, or joins the one this thread has open,
  /// whose sets belong to `owner` from here to the commit that closes this
  /// `begin`: the values they store are removed, in one transaction, when
  /// the owner is released. A later plain write of such a keypath (by
  /// anyone, a callback's included) ends its ownership, and an owned write
  /// by another owner hands it over; within one transaction the keypath's
  /// last write decides. `remove` and `removeTree` store nothing: they end
  /// ownership like any plain write; `touch` leaves it as it is.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` for an owner of another
  ///   bus or one already released, and inside a callback (a callback's
  ///   writes are its contract's).
  public func begin(owner: Owner) throws(OrdoError) {
    guard owner.link === link else {
      throw OrdoError(.invalidArgument, "owner \"\(owner.name)\" belongs to another bus")
    }
    try withGate { () throws(OrdoError) in
      let acquired = gate.acquire()
      if case .pass = gate.phase {
        throw OrdoError(.invalidArgument, "begin(owner:) inside a callback: a callback's writes belong to its contract")
      }
      // Checked once the bus is this thread's: a release cannot slip in
      // between the check and the transaction.
      guard store.ownership.isLive(owner.id) else {
        if acquired { gate.release() }
        throw OrdoError(.invalidArgument, "owner \"\(owner.name)\" was released")
      }
      gate.enter()
      _ = gate.own(owner.id)
    }
  }

  /// Runs `body` in a transaction whose sets belong to `owner` (see
  /// ``begin(owner:)``); rolls back and rethrows when `body` throws.
  ///
  /// - Returns: the transaction id (0 if nothing changed).
  @discardableResult
  public func transaction(owner: Owner, _ body: () throws(OrdoError) -> Void) throws(OrdoError) -> UInt64 {
    try begin(owner: owner)
    return try completeTransaction(body).1
  }

  /// The values that belong to an owner, among the keypaths matching
  /// `patterns`, by keypath.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for an invalid pattern.
  public func ownedValues(_ patterns: [String] = ["**"]) throws(OrdoError) -> [OwnedValue] {
    let parsed = try Bus.parse(patterns)
    return withGate {
      store.ownership.list { k in parsed.contains { $0.matches(k) } }.map { OwnedValue(keypath: $0.keypath, owner: $0.owner) }
    }
  }

  /// A new owner's id. Lock taken.
  func addOwner(name: String) -> UInt64 { withGate { store.ownership.add(name: name) } }

  /// Releases an owner: its values are removed in one transaction with a
  /// normal pass — the calling thread's open transaction if it has one,
  /// at the end of the running pass from a callback, else a transaction of
  /// their own.
  ///
  /// When a persistence layer refuses that transaction of their own, the
  /// refusal goes to the failure handler (``onFailure(_:)``, or standard
  /// error), as a ``ContractFailure`` with contract 0 (no contract), the
  /// name `owner "NAME"` and transaction 0; the values stay, and stay
  /// owned — the layer still stores them so — by the bus's placeholder
  /// owner ``Ownership/restoredOwner``: a plain write ends that ownership
  /// as any other, and the next restart removes them. (The values of an
  /// owner released in a transaction that is rolled back or refused go to
  /// the placeholder too, and that transaction's caller learns why.) They
  /// are not removed again at once: while the disk refuses, each retry
  /// would be refused too.
  func releaseOwner(_ id: UInt64, name: String) {
    let inPass = withGate { gate.isOwner && gate.inPass }
    if inPass {
      atEndOfPass { [link] in link.bus?.releaseOwner(id, name: name) }
      return
    }
    do throws(OrdoError) { try removeOwnedValues(of: id) } catch {
      withGate {
        passes.report(ContractFailure(
          contract: 0, name: "owner \"\(name)\"", transaction: 0,
          message: "its values were not removed: \(error.message); they stay, owned by \"\(Ownership.restoredOwnerName)\""))
      }
    }
  }

  /// Releases owner `id` and removes its values in one transaction: the
  /// calling thread's open one if it has one, else one of their own, whose
  /// refusal this throws. Not from a callback.
  private func removeOwnedValues(of id: UInt64) throws(OrdoError) {
    begin()
    withGate {
      for n in store.ownership.release(id, store.journal) { apply(.node(n.ref), .remove, gate.writeAccess) }
    }
    try commit()
  }
}

/// A value that belongs to an owner (``Bus/ownedValues(_:)``).
public struct OwnedValue: Sendable, Hashable {
  /// The keypath whose value is owned.
  public let keypath: String
  /// The owner's name (over D-Bus, the peer's unique bus name).
  public let owner: String
}

/// An owner of stored values (SPEC §15): the sets of a transaction begun
/// with ``Bus/begin(owner:)`` store values that belong to it, and when it
/// is released — by ``release()`` or when its last reference goes — they
/// are removed in one transaction, with a normal pass: a provider's values
/// vanish with the provider, as etcd's leased keys do.
///
/// ```swift
/// let presence = Owner(bus, name: "presence")
/// try bus.transaction(owner: presence) { () throws(OrdoError) in
///   try bus.set("presence.alice", .bool(true))
/// }
/// presence.release()   // presence.alice is removed; its readers are notified
/// ```
///
/// An owner does not keep its bus alive; released after its bus is gone,
/// it does nothing.
public final class Owner: Sendable {
  /// For messages and ``Bus/ownedValues(_:)``.
  public let name: String
  let id: UInt64
  let link: BusLink
  private let released = Atomic<Bool>(false)

  /// A new owner on `bus`.
  public init(_ bus: Bus, name: String) {
    self.name = name
    link = bus.link
    id = bus.addOwner(name: name)
  }

  /// Removes every value the owner holds, in one transaction (see
  /// ``Bus/begin(owner:)``); later, the owner can own nothing more. A
  /// second call does nothing.
  public func release() {
    guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
    link.bus?.releaseOwner(id, name: name)
  }

  deinit { release() }
}

extension Bus {
  /// Removes, in one transaction with a normal pass, the values a
  /// persistence layer restored as owned whose owners are gone (SPEC §15:
  /// with durable state, owned values are removed in the first transaction
  /// after a restart). Returns that transaction's id (0 if there were none).
  package func releaseRestoredOwnedValues() -> UInt64 {
    let id = withGate { store.ownership.restoredOwner }
    guard id != 0 else { return 0 }
    let before = withGate { store.lastTransaction }
    // A refusal is the persistence layer's own: it knows, and nothing is
    // reported.
    try? removeOwnedValues(of: id)
    return withGate { store.lastTransaction == before ? 0 : store.lastTransaction }
  }
}
