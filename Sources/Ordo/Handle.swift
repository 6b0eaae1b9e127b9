/// A keypath resolved once (SPEC §13): reads and writes through a handle
/// skip parsing, hashing and the table lookup, and obey every rule of
/// SPEC §2–§5 exactly as the keypath string does (they go through the same
/// write path, with the node already found).
///
/// ```swift
/// let title = try bus.resolve("doc.title")
/// try bus.transaction { try bus.set(title, .string("Songs")) }
/// let now = try bus.value(title)
/// ```
///
/// A handle is valid for its bus's lifetime and keeps neither the bus nor
/// any contract alive (a contract's callback may capture it without a
/// retain cycle). Using it on another bus is
/// ``OrdoError/Code/invalidArgument``. A handle that outlives its bus still
/// names its keypath: until the last such handle or ``Property`` goes, the
/// bus's resolved keypaths stay in memory.
public struct Handle: @unchecked Sendable, Hashable, CustomStringConvertible {
  // Two words, one reference count, as a ``Property``: the bus's link
  // (retained) and the keypath's node, not retained, named by its state
  // (``NodeRef``: a write through the handle touches only the state's
  // cache line, in the store's dense table, not the node). The store keeps a
  // handle's node while the bus lives (it is pinned, and pinned nodes are
  // never pruned), the link from the bus's deinit on
  // (``BusLink/detach()``), so a handle that outlives its bus still names
  // its keypath. Copying a handle retains the link, one object that every
  // handle of the bus shares and that stays in cache, not the node: a
  // reference count on the node was an atomic operation on a cache line
  // that a commit reaching keypaths out of cache must first fetch, once per
  // write (`ordo-bench --only scale`, scale-100000-handles). The node's
  // mutable state is only touched with its bus's lock held; its key and
  // ids never change.
  let link: BusLink
  /// Unretained: docs/reliability.md, "Unretained references", row "a handle's node".
  let ref: NodeRef
  /// What the bus's schema asks of a write through it (``SchemaRule``).
  let rule: SchemaRule

  init(node: KeyNode, link: BusLink) {
    self.link = link
    ref = node.ref
    rule = node.schemaRule
  }

  /// The node, alive as long as the handle (see above).
  var node: KeyNode { ref.node }

  /// The keypath.
  public var keypath: String { node.key }
  /// The keypath.
  public var description: String { node.key }

  /// Handles are equal when they name the same keypath of the same bus.
  public static func == (a: Handle, b: Handle) -> Bool { a.ref == b.ref }
  /// Hashes the node's identity.
  public func hash(into h: inout Hasher) { h.combine(UnsafeRawPointer(ref.state)) }
}

extension Bus {
  /// Resolves `keypath` into a handle, creating its place in the store if
  /// needed (no value, no change: nothing is written). Resolving the same
  /// keypath again gives an equal handle.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for a malformed keypath
  ///   (patterns are not keypaths).
  public func resolve(_ keypath: String) throws(OrdoError) -> Handle {
    try withGate { () throws(OrdoError) in
      try checkSchemaResolve(keypath, as: nil)
      let node = try store.pin(keypath)
      // From now on the link keeps the pinned nodes when the bus goes.
      link.keepsPinned = true
      return Handle(node: node, link: link)
    }
  }

  /// The handle's node (by its state), if the handle belongs to this bus
  /// (its link never changes: no lock needed).
  @inline(__always)
  private func ref(_ h: Handle) throws(OrdoError) -> NodeRef {
    guard h.link === link else {
      throw OrdoError(.invalidArgument, "the handle of \"\(h.node.key)\" belongs to another bus")
    }
    return h.ref
  }

  /// Sets the value of the handle's keypath. Throws like ``set(_:_:)``, and
  /// ``OrdoError/Code/invalidArgument`` for a handle of another bus.
  public func set(_ handle: Handle, _ value: Value) throws(OrdoError) {
    // The state's line is asked for first: a write held back does not
    // read it, and one applied now reads it after the lock's atomic
    // operation, which would hold up a load.
    fetchEarlyForWrite(UnsafeRawPointer(handle.ref.state))
    if handle.rule.bits != 0, handle.rule.bits != SchemaRule.code(value) { try checkSchema(handle, value) }
    try writeNode(ref(handle), .set(value), .none)
  }

  /// Marks the handle's keypath changed without a value. Throws like
  /// ``set(_:_:)-(Handle,_)``.
  public func touch(_ handle: Handle) throws(OrdoError) {
    if !handle.rule.admits(.touch) { try checkSchema(handle.keypath, .touch) }
    try withGate { () throws(OrdoError) in try write(.node(ref(handle)), .touch) }
  }

  /// Removes the value of the handle's keypath. Throws like
  /// ``set(_:_:)-(Handle,_)``.
  public func remove(_ handle: Handle) throws(OrdoError) {
    if !handle.rule.admits(.remove) { try checkSchema(handle.keypath, .remove) }
    try withGate { () throws(OrdoError) in try write(.node(ref(handle)), .remove) }
  }

  /// Removes the values of the handle's keypath and its descendants. Throws
  /// like ``removeTree(_:)``.
  public func removeTree(_ handle: Handle) throws(OrdoError) {
    if !handle.rule.admits(.removeTree) { try checkSchema(handle.keypath, .removeTree) }
    try withGate { () throws(OrdoError) in try write(.node(ref(handle)), .removeTree) }
  }

  /// The value of the handle's keypath, or nil. Read like ``value(_:)``.
  public func value(_ handle: Handle) throws(OrdoError) -> Value? {
    try value(node: ref(handle))
  }

  /// The value of a resolved node of this bus, or nil.
  func value(node: NodeRef) throws(OrdoError) -> Value? {
    try withGate { () throws(OrdoError) in
      let n = try readable(node.node)
      return orDefault(store.value(n, own: gate.isOwner), n.key)
    }
  }

  /// The value of the handle's keypath. Throws
  /// ``OrdoError/Code/notFound`` when it holds none, and like ``value(_:)-(String)``.
  @available(*, deprecated, message: "use value(_:), which returns nil when the keypath holds no value")
  public func get(_ handle: Handle) throws(OrdoError) -> Value {
    guard let v = try value(handle) else { throw OrdoError(.notFound, "\"\(handle.keypath)\" holds no value") }
    return v
  }

  /// The counter of the handle's keypath. Read like ``counter(_:)``.
  public func counter(_ handle: Handle) throws(OrdoError) -> UInt64 {
    try counter(node: ref(handle))
  }

  /// The counter of a resolved node of this bus.
  func counter(node: NodeRef) throws(OrdoError) -> UInt64 {
    try withGate { () throws(OrdoError) in try readable(node.node).counter }
  }

  /// Resolves `keypath` (``resolve(_:)``) into the handle's one-word form,
  /// with its keypath as a C string made now.
  package func resolveAddress(_ keypath: String) throws(OrdoError) -> HandleAddress {
    let h = try resolve(keypath)
    // Made under the lock, as a pass makes it; from now on only read.
    withGate { _ = h.ref.cKey }
    return HandleAddress(h.ref, rule: h.rule)
  }

  /// Applies the running callback's read rule to a node. Lock held.
  @inline(__always)
  private func readable(_ n: KeyNode) throws(OrdoError) -> KeyNode {
    if let c = gate.reader { try Rules.checkRead(c, n.key, n.ids, contractGraph) }
    return n
  }
}

/// A handle as one word, for a bridge that hands handles out as opaque
/// pointers (the C shim's `ordo_handle *`): the address of its node's
/// state. The state's block names its slab and the slab its bus's link
/// (``NodeSlab/slab(of:)``), so the word leads back to its bus with no
/// lookup and no object of its own: a write through it touches the state's
/// line and its block's anchor line, which the block's 4 095 states share
/// (an object per handle would cost a C write at 100 000 keypaths one more
/// cache miss, waited for before the state's: docs/performance.md, "Handles
/// are addresses"). Its low four bits carry the keypath's ``SchemaRule``.
///
/// Valid while its bus lives (the store keeps the node: it is pinned);
/// a use after that is the bridge's caller's bug, as a freed pointer is.
/// Every operation goes through the bus's one write path or its reads, and
/// obeys every rule as ``Handle`` does.
/// Unretained: docs/reliability.md, "Unretained references", row "a C handle".
package struct HandleAddress: Equatable {
  /// The address, as the bridge hands it out: the state's address (64-byte
  /// aligned) with the keypath's ``SchemaRule`` in its low four bits, so
  /// that a write decides what the schema asks without a load.
  package let raw: UnsafeRawPointer

  init(_ ref: NodeRef, rule: SchemaRule) { raw = UnsafeRawPointer(ref.state) + Int(rule.bits) }

  /// The handle at `raw`, an address made by ``Bus/resolveAddress(_:)``.
  package init(raw: UnsafeRawPointer) { self.raw = raw }

  /// The state's address.
  private var address: UnsafeRawPointer { UnsafeRawPointer(bitPattern: UInt(bitPattern: raw) & ~63).unsafelyUnwrapped }
  private var rule: SchemaRule { SchemaRule(tag: raw) }
  private var ref: NodeRef { NodeRef(property: address) }

  /// The bus's link, borrowed.
  @inline(__always)
  private func withLink<R>(_ body: (BusLink) throws(OrdoError) -> R) throws(OrdoError) -> R {
    let link = NodeSlab.slab(of: address)._withUnsafeGuaranteedRef { $0.link.unsafelyUnwrapped }
    let result: Result<R, OrdoError> = link._withUnsafeGuaranteedRef { l in Result { () throws(OrdoError) -> R in try body(l) } }
    return try result.get()
  }

  /// The keypath.
  package var keypath: String { ref.node.key }

  /// The keypath as NUL-terminated UTF-8 (made by
  /// ``Bus/resolveAddress(_:)``), valid while the bus lives.
  package var keypathCString: UnsafePointer<CChar> { UnsafePointer(ref.state.pointee.cKey.unsafelyUnwrapped) }

  /// ``Bus/set(_:_:)-(Handle,_)``.
  @inline(__always)
  package func set(_ value: Value) throws(OrdoError) {
    // ``BusLink/write(_:_:)`` asks for the state's line.
    try withLink { (l) throws(OrdoError) in try l.write(address, .set(value), rule) }
  }

  /// ``Bus/touch(_:)-(Handle)``.
  package func touch() throws(OrdoError) {
    try withLink { (l) throws(OrdoError) in try l.write(address, .touch, rule) }
  }

  /// ``Bus/remove(_:)-(Handle)``.
  package func remove() throws(OrdoError) {
    try withLink { (l) throws(OrdoError) in try l.write(address, .remove, rule) }
  }

  /// ``Bus/value(_:)-(Handle)``.
  package func value() throws(OrdoError) -> Value? {
    let r = ref
    return try withLink { (l) throws(OrdoError) in
      try l.with("the handle of \"\(r.node.key)\"") { (bus) throws(OrdoError) in try bus.value(node: r) }
    }
  }

  /// ``Bus/counter(_:)-(Handle)``.
  package func counter() throws(OrdoError) -> UInt64 {
    let r = ref
    return try withLink { (l) throws(OrdoError) in
      try l.with("the handle of \"\(r.node.key)\"") { (bus) throws(OrdoError) in try bus.counter(node: r) }
    }
  }
}
