/// The bus's side of a typed property (``Property``): how a property
/// names its node, and its write.
extension Bus {
  /// The write of a typed property: the lock, then the bus's one write path
  /// with the node already found, as ``set(_:_:)-(Handle,_)`` (the
  /// property's node always belongs to this bus, so there is no handle to
  /// check). Inlined into ``BusLink/set(_:_:)``, the one call
  /// ``Property/set(_:)`` makes.
  @inline(__always)
  func writeProperty(_ node: NodeRef, _ op: WriteOp) throws(OrdoError) {
    // Not lockGate(): the write may be held back with the others.
    gate.lock.lock()
    defer { gate.lock.unlock() }
    try write(.node(node), op)
  }

  /// A typed property for a resolved (pinned) node of this bus.
  func makeProperty<T: PropertyValue>(_ node: KeyNode, as type: T.Type) -> Property<T> {
    lockGate()
    // From now on the link keeps the pinned nodes when the bus goes
    // (``BusLink/detach()``).
    link.keepsPinned = true
    gate.lock.unlock()
    return Property(node: node, link: link)
  }
}

extension Property {
  /// The node, as a strong reference for the caller's scope. Alive: the
  /// store keeps it while the bus lives (it is pinned), the link after.
  var keyNode: KeyNode { NodeRef(property: node).node }
}
