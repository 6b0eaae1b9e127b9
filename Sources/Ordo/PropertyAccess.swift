/// The bus's side of a typed property (``Property``): how a property
/// names its node, and its write.
extension Bus {
  /// The write of a typed property: the lock, then the bus's one write path
  /// with the node already found, as ``set(_:_:)-(Handle,_)`` (the
  /// property's node always belongs to this bus, so there is no handle to
  /// check). Inlined into ``BusLink/set(_:_:)``, the one call
  /// ``Property/set(_:)`` makes.
  @inline(__always)
  func writeProperty(_ node: NodeRef, _ op: WriteOp, _ rule: SchemaRule) throws(OrdoError) {
    try writeNode(node, op, rule)
  }

  /// A write to a resolved node (a handle's, a typed property's). In the
  /// owner's open transaction a scalar set is held back without the lock
  /// (``WriteBehind``: the buffer is the owner's alone, and
  /// ``Gate/ownsOpenTransaction`` needs no lock), so that a transaction's
  /// writes do not wait for one another: the lock's atomic operation waited
  /// for the load of the caller's handle before it, one write after
  /// another. Every other write takes the lock and the one write path.
  /// `rule` is what the bus's schema asks of the write (``SchemaRule``):
  /// what it does not decide asks the schema, out of line.
  @inline(__always)
  func writeNode(_ node: NodeRef, _ op: WriteOp, _ rule: SchemaRule) throws(OrdoError) {
    if rule.bits != 0 { try checkSchema(node, op, rule) }
    // The owner first: only the owner may read the buffer. Full: the
    // locked path below settles first (``Store/holdBack(_:_:)``).
    if let p = WriteBehind.heldValue(op), gate.ownsOpenTransaction, !store.heldWrites.isFull {
      return store.heldWrites.append(node, p)
    }
    // withLock: the write may be held back with the others.
    try withLock { () throws(OrdoError) in try write(.node(node), op) }
  }

  /// A typed property for a resolved (pinned) node of this bus.
  func makeProperty<T: PropertyValue>(_ node: KeyNode, as type: T.Type) -> Property<T> {
    // From now on the link keeps the pinned nodes when the bus goes
    // (``BusLink/detach()``).
    withGate { link.keepsPinned = true }
    return Property(node: node, link: link)
  }
}

extension Property {
  /// The node, as a strong reference for the caller's scope. Alive: the
  /// store keeps it while the bus lives (it is pinned), the link after.
  var keyNode: KeyNode { NodeRef(property: node).node }
}
