/// What a contract's callback receives when registered with a
/// ``ContractBody``: the notification (transaction, contract, changed
/// keypaths) and the bus's reads and writes, so that the callback need not
/// capture the bus and forms no retain cycle with it.
///
/// ```swift
/// try bus.register(name: "count", reads: ["doc.items.**"], writes: ["doc.count"]) { ctx in
///   try ctx.set("doc.count", .int64(Int64(ctx.changed.count)))
/// }
/// ```
///
/// Every read and write through the context is the bus's own, under the
/// rules of the running contract (SPEC §5). The context belongs to the call
/// it was made for: used after its callback returned, it is a plain use of
/// the bus from that thread (outside a transaction, writes fail with
/// ``OrdoError/Code/noTransaction``). It does not keep the bus alive; once
/// the bus is gone every call throws ``OrdoError/Code/invalidArgument``.
public struct ContractContext: Sendable {
  /// The notification of this call.
  public let notification: ContractNotification
  let link: BusLink

  init(_ notification: ContractNotification, _ link: BusLink) {
    self.notification = notification
    self.link = link
  }

  /// The transaction id (see ``ContractNotification/transaction``).
  public var transaction: UInt64 { notification.transaction }
  /// The contract being called.
  public var contract: ContractID { notification.contract }
  /// The changed keypaths that affect the contract's read set; empty for an
  /// initial call (see ``ContractNotification/changed``).
  public var changed: ChangedKeypaths { notification.changed }
  /// Whether this is an initial call (``ContractFlags/notifyInitial``): the
  /// changed list is empty and the contract should read everything it needs.
  public var isInitial: Bool { notification.changed.isEmpty }

  @inline(__always)
  private func with<R>(_ what: @autoclosure () -> String, _ body: (Bus) throws(OrdoError) -> R) throws(OrdoError) -> R {
    try link.with("the context of contract \(notification.contract) (\(what()))", body)
  }

  // MARK: Reads

  /// The value of `keypath`, or nil (``Bus/value(_:)-(String)``).
  public func value(_ keypath: String) throws(OrdoError) -> Value? {
    try with(keypath) { bus throws(OrdoError) in try bus.value(keypath) }
  }

  /// The value of a handle's keypath, or nil (``Bus/value(_:)-(Handle)``).
  public func value(_ handle: Handle) throws(OrdoError) -> Value? {
    try with(handle.keypath) { bus throws(OrdoError) in try bus.value(handle) }
  }

  /// The value of a typed property, or nil (``Property/value``). A
  /// property of another bus is ``OrdoError/Code/invalidArgument``.
  public func value<T>(_ property: Property<T>) throws(OrdoError) -> T? {
    try ownProperty(property)
    return try property.value
  }

  /// The counter of `keypath` (``Bus/counter(_:)-(String)``).
  public func counter(_ keypath: String) throws(OrdoError) -> UInt64 {
    try with(keypath) { bus throws(OrdoError) in try bus.counter(keypath) }
  }

  /// The current values of the changed keypaths that hold one (what a
  /// D-Bus `Notify` carries). No contract check applies: these are the
  /// keypaths the contract was notified of.
  public func changedValues() throws(OrdoError) -> [String: Value] {
    let note = notification
    return try with("changed values") { bus in bus.values(of: note) }
  }

  /// A snapshot of the keypaths matching the patterns (``Bus/snapshot(_:)-([String])``).
  public func snapshot(_ patterns: [String]) throws(OrdoError) -> Snapshot {
    try with(patterns.joined(separator: ", ")) { bus throws(OrdoError) in try bus.snapshot(patterns) }
  }

  // MARK: Writes

  /// Sets `keypath` (``Bus/set(_:_:)-(String,_)``): the contract's write rules apply.
  public func set(_ keypath: String, _ value: Value) throws(OrdoError) {
    try with(keypath) { bus throws(OrdoError) in try bus.set(keypath, value) }
  }

  /// Sets a handle's keypath (``Bus/set(_:_:)-(Handle,_)``).
  public func set(_ handle: Handle, _ value: Value) throws(OrdoError) {
    try with(handle.keypath) { bus throws(OrdoError) in try bus.set(handle, value) }
  }

  /// Sets a typed property (``Property/set(_:)``). A property of another
  /// bus is ``OrdoError/Code/invalidArgument``, as its handle is.
  public func set<T>(_ property: Property<T>, _ value: T) throws(OrdoError) {
    try ownProperty(property)
    try property.set(value)
  }

  /// A property of another bus is refused, as its handle is: its writes
  /// would go to that bus, past the running contract's rules.
  private func ownProperty<T>(_ property: Property<T>) throws(OrdoError) {
    guard property.link === link else {
      throw OrdoError(.invalidArgument, "the property \"\(property.keypath)\" belongs to another bus")
    }
  }

  /// Touches `keypath` (``Bus/touch(_:)-(String)``).
  public func touch(_ keypath: String) throws(OrdoError) {
    try with(keypath) { bus throws(OrdoError) in try bus.touch(keypath) }
  }

  /// Removes the value of `keypath` (``Bus/remove(_:)-(String)``).
  public func remove(_ keypath: String) throws(OrdoError) {
    try with(keypath) { bus throws(OrdoError) in try bus.remove(keypath) }
  }

  /// Removes the values of `keypath` and its descendants
  /// (``Bus/removeTree(_:)-(String)``).
  public func removeTree(_ keypath: String) throws(OrdoError) {
    try with(keypath) { bus throws(OrdoError) in try bus.removeTree(keypath) }
  }

  // MARK: The bus

  /// Resolves a keypath into a handle (``Bus/resolve(_:)-(String)``).
  public func resolve(_ keypath: String) throws(OrdoError) -> Handle {
    try with(keypath) { bus throws(OrdoError) in try bus.resolve(keypath) }
  }

  /// A typed property (``Bus/property(_:as:)-(String,_)``).
  public func property<T: PropertyValue>(_ keypath: String, as type: T.Type = T.self) throws(OrdoError) -> Property<T> {
    try with(keypath) { bus throws(OrdoError) in try bus.property(keypath, as: T.self) }
  }

  /// Runs `hook` once when this pass ends, after every contract
  /// (``Bus/atEndOfPass(_:)``).
  public func atEndOfPass(_ hook: @escaping @Sendable () -> Void) throws(OrdoError) {
    try with("atEndOfPass") { bus in bus.atEndOfPass(hook) }
  }

  /// Unregisters this contract: it is not called again, even later in this
  /// pass.
  public func unregister() throws(OrdoError) {
    let id = notification.contract
    try with("unregister") { bus throws(OrdoError) in try bus.unregister(id) }
  }

  /// The bus, for what the context does not forward. Holding it beyond the
  /// call (in something the callback keeps) forms the retain cycle the
  /// context avoids.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` when the bus is gone.
  public func bus() throws(OrdoError) -> Bus {
    guard let bus = link.bus else { throw BusLink.gone("the context of contract \(notification.contract)") }
    return bus
  }
}

/// A contract's callback that receives a ``ContractContext``. It runs like
/// a ``ContractCallback``: synchronously on the committing thread; a thrown
/// error is reported to the failure handler and does not stop the pass.
public typealias ContractBody = @Sendable (ContractContext) throws -> Void

extension Bus {
  /// Registers a contract whose callback receives a ``ContractContext``:
  /// it reads and writes through the context and need not capture the bus.
  /// Otherwise like ``register(name:reads:writes:priority:flags:callback:)-(_,[String],_,_,_,_)``.
  ///
  /// ```swift
  /// try bus.register(name: "total", reads: ["cart.items.**"], writes: ["cart.total"]) { ctx in
  ///   let items = try ctx.snapshot(["cart.items.**"]).values
  ///   try ctx.set("cart.total", .int64(Int64(items.count)))
  /// }
  /// ```
  ///
  /// - Throws: like ``register(_:)``.
  @_disfavoredOverload
  @discardableResult
  public func register(
    name: String, reads: [String], writes: [String] = [], priority: Int32? = nil, flags: ContractFlags = [],
    _ body: @escaping ContractBody
  ) throws(OrdoError) -> ContractHandle {
    let link = self.link
    return try register(name: name, reads: reads, writes: writes, priority: priority, flags: flags, callback: { note in
      try body(ContractContext(note, link))
    })
  }
}
