/// Typed ``Keypath`` and ``Pattern`` values, accepted wherever the bus
/// takes keypath and pattern strings (SPEC §13). Each forwards to the
/// string form; a value validated ahead of time cannot fail with
/// ``OrdoError/Code/invalidKeypath`` here.
extension Bus {
  /// Sets the value of `keypath`. See ``set(_:_:)``.
  public func set(_ keypath: Keypath, _ value: Value) throws(OrdoError) { try set(keypath.string, value) }
  /// Marks `keypath` changed. See ``touch(_:)``.
  public func touch(_ keypath: Keypath) throws(OrdoError) { try touch(keypath.string) }
  /// Removes the value of `keypath`. See ``remove(_:)``.
  public func remove(_ keypath: Keypath) throws(OrdoError) { try remove(keypath.string) }
  /// Removes the values of `keypath` and its descendants. See ``removeTree(_:)``.
  public func removeTree(_ keypath: Keypath) throws(OrdoError) { try removeTree(keypath.string) }
  /// The value of `keypath`, or nil. See ``value(_:)``.
  public func value(_ keypath: Keypath) throws(OrdoError) -> Value? { try value(keypath.string) }
  /// The counter of `keypath`. See ``counter(_:)``.
  public func counter(_ keypath: Keypath) throws(OrdoError) -> UInt64 { try counter(keypath.string) }
  /// The changed-at of `keypath`. See ``changedAt(_:)``.
  public func changedAt(_ keypath: Keypath) throws(OrdoError) -> UInt64 { try changedAt(keypath.string) }
  /// Declares a read of a host-owned value. See ``access(_:)``.
  public func access(_ keypath: Keypath) throws(OrdoError) { try access(keypath.string) }
  /// Resolves `keypath` into a handle. See ``resolve(_:)``.
  public func resolve(_ keypath: Keypath) throws(OrdoError) -> Handle { try resolve(keypath.string) }
  /// A typed property for `keypath`. See ``property(_:as:)-(String,_)``.
  public func property<T: PropertyValue>(_ keypath: Keypath, as type: T.Type = T.self) throws(OrdoError) -> Property<T> {
    try property(keypath.string, as: T.self)
  }
  /// A scope for the keypaths under `prefix`. See ``scope(_:)-(String)``.
  public func scope(_ prefix: Keypath) throws(OrdoError) -> KeypathScope { try scope(prefix.string) }

  /// A snapshot of the keypaths matching the patterns. See ``snapshot(_:)-([String])``.
  public func snapshot(_ patterns: some Sequence<Pattern>) throws(OrdoError) -> Snapshot { try snapshot(patterns.map(\.string)) }
  /// What changed after `since`. See ``changes(since:_:)-(_,[String])``.
  public func changes(since: UInt64, _ patterns: some Sequence<Pattern>) throws(OrdoError) -> Changes {
    try changes(since: since, patterns.map(\.string))
  }

  /// Registers a contract. See ``register(name:reads:writes:priority:flags:callback:)-(_,[String],_,_,_,_)``.
  @discardableResult
  public func register(
    name: String, reads: some Sequence<Pattern>, writes: [Pattern] = [], priority: Int32? = nil, flags: ContractFlags = [],
    callback: @escaping ContractCallback
  ) throws(OrdoError) -> ContractHandle {
    try register(name: name, reads: reads.map(\.string), writes: writes.map(\.string), priority: priority, flags: flags, callback: callback)
  }

  /// Registers a contract whose callback receives a context. See
  /// ``register(name:reads:writes:priority:flags:_:)-(_,[String],_,_,_,_)``.
  @_disfavoredOverload
  @discardableResult
  public func register(
    name: String, reads: some Sequence<Pattern>, writes: [Pattern] = [], priority: Int32? = nil, flags: ContractFlags = [],
    _ body: @escaping ContractBody
  ) throws(OrdoError) -> ContractHandle {
    try register(name: name, reads: reads.map(\.string), writes: writes.map(\.string), priority: priority, flags: flags, body)
  }

  /// Registers an owner-bound contract. See
  /// ``register(owner:name:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``.
  @discardableResult
  public func register<Object: AnyObject & Sendable>(
    owner: Object, name: String, reads: some Sequence<Pattern>, writes: [Pattern] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping @Sendable (Object, ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    try register(owner: owner, name: name, reads: reads.map(\.string), writes: writes.map(\.string), priority: priority, flags: flags, body)
  }

  /// Registers an owner-bound contract under a derived name. See
  /// ``register(owner:role:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``.
  @discardableResult
  public func register<Object: AnyObject & Sendable>(
    owner: Object, role: String, reads: some Sequence<Pattern>, writes: [Pattern] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping @Sendable (Object, ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    try register(owner: owner, role: role, reads: reads.map(\.string), writes: writes.map(\.string), priority: priority, flags: flags, body)
  }

  /// Registers a main-actor contract. See
  /// ``registerOnMainActor(name:reads:writes:priority:flags:_:)-(_,[String],_,_,_,_)``.
  @MainActor
  @discardableResult
  public func registerOnMainActor(
    name: String, reads: some Sequence<Pattern>, writes: [Pattern] = [], priority: Int32? = nil, flags: ContractFlags = [],
    _ body: @escaping @MainActor (ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    try registerOnMainActor(name: name, reads: reads.map(\.string), writes: writes.map(\.string), priority: priority, flags: flags, body)
  }

  /// An observer stream. See ``observe(name:reads:priority:flags:bufferLimit:)-(_,[String],_,_,_)``.
  public func observe(
    name: String, reads: some Sequence<Pattern>, priority: Int32? = nil, flags: ContractFlags = [], bufferLimit: Int = 256
  ) throws(OrdoError) -> ChangeStream {
    try observe(name: name, reads: reads.map(\.string), priority: priority, flags: flags, bufferLimit: bufferLimit)
  }
}

extension ContractSpec {
  /// Makes a contract declaration from typed patterns.
  public init(
    name: String, reads: some Sequence<Pattern>, writes: [Pattern] = [], priority: Int32? = nil,
    flags: ContractFlags = [], callback: @escaping ContractCallback
  ) {
    self.init(name: name, reads: reads.map(\.string), writes: writes.map(\.string), priority: priority, flags: flags, callback: callback)
  }
}

extension ContractContext {
  /// The value of `keypath`, or nil. See ``value(_:)-(String)``.
  public func value(_ keypath: Keypath) throws(OrdoError) -> Value? { try value(keypath.string) }
  /// Sets `keypath`. See ``set(_:_:)-(String,_)``.
  public func set(_ keypath: Keypath, _ value: Value) throws(OrdoError) { try set(keypath.string, value) }
  /// Touches `keypath`. See ``touch(_:)-(String)``.
  public func touch(_ keypath: Keypath) throws(OrdoError) { try touch(keypath.string) }
  /// Removes the value of `keypath`. See ``remove(_:)-(String)``.
  public func remove(_ keypath: Keypath) throws(OrdoError) { try remove(keypath.string) }
  /// Removes the values of `keypath` and its descendants. See ``removeTree(_:)-(String)``.
  public func removeTree(_ keypath: Keypath) throws(OrdoError) { try removeTree(keypath.string) }
  /// The counter of `keypath`. See ``counter(_:)-(String)``.
  public func counter(_ keypath: Keypath) throws(OrdoError) -> UInt64 { try counter(keypath.string) }
  /// A snapshot. See ``snapshot(_:)-([String])``.
  public func snapshot(_ patterns: some Sequence<Pattern>) throws(OrdoError) -> Snapshot { try snapshot(patterns.map(\.string)) }
}
