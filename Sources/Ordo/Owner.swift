extension Bus {
  /// Registers a contract bound to `owner`, which it holds weakly, and
  /// removes it once the owner is deallocated — as Quantwm purged the
  /// targets of dead view controllers. The callback receives the owner
  /// (alive for the call) and a ``ContractContext``; capture neither the
  /// owner nor the bus in it.
  ///
  /// ```swift
  /// final class TitleView: Sendable {
  ///   init(bus: Bus) throws {
  ///     try bus.register(owner: self, name: "title-view", reads: ["doc.title"]) { view, ctx in
  ///       view.show(try ctx.value("doc.title"))
  ///     }
  ///   }
  /// }
  /// ```
  ///
  /// When the owner is gone, the contract is never called again. There is
  /// no portable way to run code when an arbitrary object is deallocated
  /// (no associated objects outside Apple platforms), so the bus
  /// unregisters it at the first of: the next outermost commit on this bus
  /// (before its pass, whatever the transaction changed), the contract's
  /// turn in a running pass (it is unregistered instead of called, even
  /// when the owner went away earlier in that same pass), the next
  /// owner-bound registration, or ``removeContractsOfDeallocatedOwners()``.
  /// From the moment the owner is gone ``contracts()`` and ``graph()`` no
  /// longer list it.
  ///
  /// - Throws: like ``register(_:)``.
  @discardableResult
  public func register<Object: AnyObject & Sendable>(
    owner: Object, name: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping @Sendable (Object, ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    removeContractsOfDeallocatedOwners()
    let link = self.link
    let handle = try register(name: name, reads: reads, writes: writes, priority: priority, flags: flags, callback: {
      [weak owner] note in
      guard let owner else {
        link.bus?.ownerGone(note.contract)
        return
      }
      try body(owner, ContractContext(note, link))
    })
    // An initial call may already have found the owner gone and removed it.
    withGate { if contractGraph.contract(handle.id) != nil { link.owned[handle.id] = WeakOwner(object: owner) } }
    return handle
  }

  /// Registers a contract bound to `owner` (see
  /// ``register(owner:name:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``)
  /// under a name derived from the owner's type, the contract's `role` and
  /// the owner's instance number on this bus: the second
  /// `PlaylistHeaderViewController` to register its `playlistUpdated` role
  /// registers `PlaylistHeaderViewController.playlistUpdated#2`. Every
  /// contract of one owner gets the same number; numbers count the
  /// instances of each type that registered, from 1, and are not reused.
  /// The name is the contract's name everywhere: ``contracts()``,
  /// ``graph()``, traces, failures.
  ///
  /// ```swift
  /// final class PlaylistHeader: Sendable {
  ///   init(bus: Bus) throws {
  ///     try bus.register(owner: self, role: "title", reads: ["playlist.title"]) { header, ctx in
  ///       header.show(try ctx.value("playlist.title"))
  ///     }
  ///   }
  /// }
  /// ```
  ///
  /// - Throws: like ``register(_:)``; ``OrdoError/Code/duplicateName``
  ///   when this owner already registered `role`.
  @discardableResult
  public func register<Object: AnyObject & Sendable>(
    owner: Object, role: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping @Sendable (Object, ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    try register(owner: owner, name: contractName(owner: owner, role: role), reads: reads, writes: writes, priority: priority, flags: flags, body)
  }

  /// The name of `owner`'s contract for `role`: its type, the role and its
  /// instance number (see
  /// ``register(owner:role:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``).
  func contractName(owner: AnyObject, role: String) -> String {
    let type = String(describing: Swift.type(of: owner))
    let number = withGate { () -> Int in
      let id = ObjectIdentifier(owner)
      if let known = link.ownerNumbers[id], known.owner.object === owner { return known.number }
      let n = (link.lastOwnerNumber[type] ?? 0) + 1
      link.lastOwnerNumber[type] = n
      link.ownerNumbers[id] = (WeakOwner(object: owner), n)
      return n
    }
    return "\(type).\(role)#\(number)"
  }

  /// Unregisters every owner-bound contract whose owner was deallocated
  /// (see ``register(owner:name:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``); returns
  /// how many.
  @discardableResult
  public func removeContractsOfDeallocatedOwners() -> Int {
    let (count, released) = withGate { () -> (Int, [ContractState]) in
      let acquired = gate.acquire()
      defer { if acquired { gate.release() } }
      return sweepDeadOwners()
    }
    // Released here, outside the lock.
    withExtendedLifetime(released) {}
    return count
  }

  /// Unregisters the owner-bound contracts whose owners are gone and
  /// forgets the instance numbers of dead owners. Returns how many it
  /// unregistered, and the contracts to release without the lock. Lock
  /// held; the bus owned by the calling thread.
  func sweepDeadOwners() -> (count: Int, released: [ContractState]) {
    var count = 0
    var released: [ContractState] = []
    for (id, owner) in link.owned where owner.object == nil {
      link.owned[id] = nil
      guard let c = contractGraph.contract(id) else { continue }
      count += 1
      if let gone = remove(c) { released.append(gone) }
    }
    link.ownerNumbers = link.ownerNumbers.filter { $0.value.owner.object != nil }
    return (count, released)
  }

  /// The ids of the owner-bound contracts whose owners are gone. Lock held.
  func contractsOfDeadOwners() -> Set<ContractID> {
    guard !link.owned.isEmpty else { return [] }
    return Set(link.owned.compactMap { $0.value.object == nil ? $0.key : nil })
  }

  /// A callback found its owner gone: unregister it (it is not called).
  func ownerGone(_ id: ContractID) {
    withGate { link.owned[id] = nil }
    try? unregister(id)
  }
}

