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
  /// (no associated objects outside Apple platforms), so the bus notices
  /// it at the first of: the contract's next turn in a pass (it is
  /// unregistered instead of called, even when the owner went away earlier
  /// in that same pass), the next owner-bound registration on this bus, or
  /// ``removeContractsOfDeallocatedOwners()``. Until then ``contracts()``
  /// still lists it.
  ///
  /// - Throws: like ``register(_:)``.
  @discardableResult
  public func register<Owner: AnyObject & Sendable>(
    owner: Owner, name: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping @Sendable (Owner, ContractContext) throws -> Void
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

  /// Unregisters every owner-bound contract whose owner was deallocated
  /// (see ``register(owner:name:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``); returns
  /// how many.
  @discardableResult
  public func removeContractsOfDeallocatedOwners() -> Int {
    let dead = withGate {
      let dead = link.owned.filter { $0.value.object == nil }.map(\.key)
      for id in dead { link.owned[id] = nil }
      return dead
    }
    var removed = 0
    for id in dead where (try? unregister(id)) != nil { removed += 1 }
    return removed
  }

  /// A callback found its owner gone: unregister it (it is not called).
  func ownerGone(_ id: ContractID) {
    withGate { link.owned[id] = nil }
    try? unregister(id)
  }
}

