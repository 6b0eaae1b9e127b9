/// A Swift type that a ``Property`` can hold: one of the bus's value types
/// (SPEC §2). `Bool`, `Int64`, `Int` (stored as an int64), `Double`,
/// `String` and `[UInt8]` (bytes) conform; the core adds no others (there is
/// no Foundation in it, so no `Data`).
public protocol PropertyValue: Sendable, Equatable {
  /// The bus's name of the stored type: `bool`, `int64`, `double`, `string`
  /// or `bytes`.
  static var ordoTypeName: String { get }
  /// The Swift value of a stored value, nil when it is of another type.
  init?(ordoValue: Value)
  /// The value as the bus stores it.
  var ordoValue: Value { get }
}

extension Bool: PropertyValue {
  /// `bool`.
  public static var ordoTypeName: String { "bool" }
  /// The value of a `bool`, nil for another type.
  @inlinable public init?(ordoValue: Value) {
    guard case .bool(let x) = ordoValue else { return nil }
    self = x
  }
  /// `.bool(self)`.
  @inlinable public var ordoValue: Value { .bool(self) }
}

extension Int64: PropertyValue {
  /// `int64`.
  public static var ordoTypeName: String { "int64" }
  /// The value of an `int64`, nil for another type.
  @inlinable public init?(ordoValue: Value) {
    guard case .int64(let x) = ordoValue else { return nil }
    self = x
  }
  /// `.int64(self)`.
  @inlinable public var ordoValue: Value { .int64(self) }
}

extension Int: PropertyValue {
  /// `int64`: an `Int` is stored as an int64.
  public static var ordoTypeName: String { "int64" }
  /// The value of an `int64` that fits an `Int`, nil otherwise.
  @inlinable public init?(ordoValue: Value) {
    guard case .int64(let x) = ordoValue, let i = Int(exactly: x) else { return nil }
    self = i
  }
  /// `.int64(Int64(self))`.
  @inlinable public var ordoValue: Value { .int64(Int64(self)) }
}

extension Double: PropertyValue {
  /// `double`.
  public static var ordoTypeName: String { "double" }
  /// The value of a `double`, nil for another type.
  @inlinable public init?(ordoValue: Value) {
    guard case .double(let x) = ordoValue else { return nil }
    self = x
  }
  /// `.double(self)`.
  @inlinable public var ordoValue: Value { .double(self) }
}

extension String: PropertyValue {
  /// `string`.
  public static var ordoTypeName: String { "string" }
  /// The value of a `string`, nil for another type.
  @inlinable public init?(ordoValue: Value) {
    guard case .string(let x) = ordoValue else { return nil }
    self = x
  }
  /// `.string(self)`.
  @inlinable public var ordoValue: Value { .string(self) }
}

extension Array: PropertyValue where Element == UInt8 {
  /// `bytes`.
  public static var ordoTypeName: String { "bytes" }
  /// The value of a `bytes`, nil for another type.
  @inlinable public init?(ordoValue: Value) {
    guard case .bytes(let x) = ordoValue else { return nil }
    self = x
  }
  /// `.bytes(self)`.
  @inlinable public var ordoValue: Value { .bytes(self) }
}

/// A typed property: one keypath of one bus, resolved once, holding values
/// of one Swift type (SPEC §13).
///
/// ```swift
/// let title = try bus.property("doc.title", as: String.self)
/// try bus.transaction { try title.set("Songs") }
/// let now = try title.value   // "Songs"
/// ```
///
/// Reads and writes go through the keypath's ``Handle`` — no parsing, no
/// lookup — and obey every rule of SPEC §2–§5 as the keypath string does:
/// a write needs a transaction or a callback whose write set allows it, a
/// read inside a callback must be in the contract's read or write set.
///
/// A value of another type stored at the keypath (written through another
/// property, a string keypath, C or D-Bus) reads as an
/// ``OrdoError/Code/typeMismatch`` error naming both types; the property
/// never traps on it.
///
/// A property does **not** keep its bus alive, so models made of
/// properties, and callbacks that capture them, form no retain cycle with
/// the bus. Keep the bus alive while you use its properties: once it is
/// deallocated every use throws ``OrdoError/Code/invalidArgument``
/// (releasing the bus on one thread while another uses a property is a data
/// race, as with any unowned reference).
public struct Property<T: PropertyValue>: @unchecked Sendable, Hashable, CustomStringConvertible {
  // Two words, one reference count: the link (retained) and the keypath's
  // node named by the address of its state (``NodeRef``), not retained:
  // the bus's store keeps a
  // property's node (it is pinned, and pinned nodes are never pruned), and
  // the link keeps it once the bus is gone (`BusLink.detach`). Copying a
  // property thus retains one object, as copying a ``Handle`` does, and
  // `set` makes one call (`BusLink.set`), as `Bus.set(handle, value)` does
  // (docs/swift.md, "What the typed API costs"). @unchecked Sendable: the
  // node's state is only touched with its bus's lock held, as a handle's.
  @usableFromInline let link: BusLink
  /// Unretained: docs/reliability.md, "Unretained references", row "a handle's node".
  @usableFromInline let node: UnsafeRawPointer

  /// What the bus's schema asks of a write (``SchemaRule``) once the
  /// property's type is known: nothing for a keypath declared of that type
  /// without further constraints, so that its sets cost what they cost
  /// without a schema.
  @usableFromInline let rule: SchemaRule

  init(node: KeyNode, link: BusLink) {
    self.node = UnsafeRawPointer(node.ref.state)
    self.link = link
    rule = node.schemaRule.left(byType: T.ordoTypeName)
  }

  /// The resolved keypath.
  public var handle: Handle { Handle(node: keyNode, link: link) }

  /// The keypath.
  public var keypath: String { keyNode.key }
  /// The keypath and the type, e.g. `doc.title: String`.
  public var description: String { "\(keypath): \(T.self)" }

  /// The value, or nil when the keypath holds none. Inside a callback the
  /// keypath must be in the contract's read or write set; other threads
  /// than the one running a transaction see the last committed value.
  ///
  /// - Throws: ``OrdoError/Code/typeMismatch`` when the keypath holds a
  ///   value of another type; ``OrdoError/Code/contractViolation`` inside a
  ///   callback that may not read it; ``OrdoError/Code/invalidArgument``
  ///   when the bus is gone.
  public var value: T? {
    get throws(OrdoError) {
      let h = handle
      guard let v = try link.with("property \"\(h.keypath)\"", { bus throws(OrdoError) in try bus.value(h) }) else { return nil }
      guard let typed = T(ordoValue: v) else { throw Property.mismatch(h.keypath, v) }
      return typed
    }
  }

  /// The value, or `fallback` when the keypath holds none. Throws like
  /// ``value``.
  public func value(or fallback: T) throws(OrdoError) -> T { try value ?? fallback }

  /// Sets the value. Needs a transaction, or a callback whose write set
  /// allows the keypath.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction``,
  ///   ``OrdoError/Code/contractViolation``, ``OrdoError/Code/stability``,
  ///   ``OrdoError/Code/invalidArgument`` when the bus is gone.
  @inlinable
  public func set(_ value: T) throws(OrdoError) { try link.set(node, value.ordoValue, rule) }

  /// Marks the keypath changed without changing its value (SPEC §2). Throws
  /// like ``set(_:)``.
  public func touch() throws(OrdoError) { try link.write(node, .touch, rule) }

  /// Removes the value (no change when there is none). Throws like
  /// ``set(_:)``.
  public func remove() throws(OrdoError) { try link.write(node, .remove, rule) }

  /// The keypath's change counter (SPEC §2). Read like ``value``.
  public var counter: UInt64 {
    get throws(OrdoError) {
      let h = handle
      return try link.with("property \"\(h.keypath)\"") { bus throws(OrdoError) in try bus.counter(h) }
    }
  }

  static func mismatch(_ keypath: String, _ v: Value) -> OrdoError {
    OrdoError(.typeMismatch, "\"\(keypath)\" holds \(Value.withArticle(v.typeName)), not \(Value.withArticle(T.ordoTypeName)) (read as \(T.self))")
  }

  /// Properties are equal when they name the same keypath of the same bus.
  public static func == (a: Property, b: Property) -> Bool { a.node == b.node }
  /// Hashes the handle.
  public func hash(into h: inout Hasher) { h.combine(node) }
}

extension Bus {
  /// A typed property for `keypath`, resolved once (see ``Property``).
  /// Resolving creates the keypath's place in the store; it writes nothing.
  ///
  /// ```swift
  /// let count = try bus.property("doc.count", as: Int.self)
  /// ```
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for a malformed keypath
  ///   (patterns are not keypaths).
  public func property<T: PropertyValue>(_ keypath: String, as type: T.Type = T.self) throws(OrdoError) -> Property<T> {
    try checkSchemaResolve(keypath, as: T.ordoTypeName)
    return makeProperty(try resolve(keypath).node, as: T.self)
  }

  /// A typed property for a handle of this bus.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` for a handle of another
  ///   bus.
  public func property<T: PropertyValue>(_ handle: Handle, as type: T.Type = T.self) throws(OrdoError) -> Property<T> {
    guard handle.link === link else {
      throw OrdoError(.invalidArgument, "the handle of \"\(handle.keypath)\" belongs to another bus")
    }
    try checkSchemaResolve(handle.keypath, as: T.ordoTypeName)
    return makeProperty(handle.node, as: T.self)
  }

  /// A scope for the keypaths under `prefix` (see ``KeypathScope``).
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for a malformed prefix.
  public func scope(_ prefix: String) throws(OrdoError) -> KeypathScope {
    _ = try Keypath(prefix)
    return KeypathScope(prefix: prefix, link: link)
  }
}

/// The keypaths under one prefix, for a model whose parts are addressed
/// under it (a document's items under `doc.items`). A scope makes typed
/// properties and handles relative to its prefix and names its subtree as
/// a pattern; like a ``Property`` it does not keep its bus alive.
///
/// ```swift
/// let items = try bus.scope("doc.items")
/// let first = try items.property("0", as: String.self)   // doc.items.0
/// try bus.register(name: "list", reads: [items.tree]) { ctx in … }
/// ```
public struct KeypathScope: Sendable, Hashable, CustomStringConvertible {
  /// The prefix, a keypath.
  public let prefix: String
  let link: BusLink

  init(prefix: String, link: BusLink) {
    self.prefix = prefix
    self.link = link
  }

  /// The prefix.
  public var description: String { prefix }

  /// The keypath of `relative` under the prefix: `prefix.relative`.
  public func keypath(_ relative: String) -> String { prefix + "." + relative }

  /// The pattern of the prefix and everything under it: `prefix.**`.
  public var tree: String { prefix + ".**" }

  /// The pattern of the direct children: `prefix.*`.
  public var children: String { prefix + ".*" }

  /// A typed property for `prefix.relative`.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath``;
  ///   ``OrdoError/Code/invalidArgument`` when the bus is gone.
  public func property<T: PropertyValue>(_ relative: String, as type: T.Type = T.self) throws(OrdoError) -> Property<T> {
    let k = keypath(relative)
    return try link.with("scope \"\(k)\"") { bus throws(OrdoError) in try bus.property(k, as: T.self) }
  }

  /// A scope for `prefix.relative`. Throws like ``property(_:as:)``.
  public func scope(_ relative: String) throws(OrdoError) -> KeypathScope {
    let k = keypath(relative)
    _ = try Keypath(k)
    return KeypathScope(prefix: k, link: link)
  }

  /// The keypaths under the prefix that hold a value, with their values,
  /// relative to the prefix (`["0": .string("Intro")]`), read at one
  /// moment. Inside a callback the contract must be allowed to read
  /// `prefix.**`.
  ///
  /// - Throws: ``OrdoError/Code/contractViolation`` inside a callback that
  ///   may not read the subtree; ``OrdoError/Code/invalidArgument`` when the
  ///   bus is gone.
  public func values() throws(OrdoError) -> [String: Value] {
    let pattern = tree
    let snap = try link.with("scope \"\(prefix)\"") { bus throws(OrdoError) in try bus.snapshot([pattern]) }
    var out: [String: Value] = [:]
    let cut = prefix.utf8.count + 1
    for (k, v) in snap.values where k.utf8.count > cut {
      out[String(k.dropFirst(prefix.count + 1))] = v
    }
    return out
  }

  /// Removes the values of everything under the prefix, the prefix
  /// included (``Bus/removeTree(_:)-(String)``). Throws like ``Property/set(_:)``.
  public func removeAll() throws(OrdoError) {
    let p = prefix
    try link.with("scope \"\(p)\"") { bus throws(OrdoError) in try bus.removeTree(p) }
  }

  /// Scopes are equal when they name the same prefix of the same bus.
  public static func == (a: KeypathScope, b: KeypathScope) -> Bool { a.prefix == b.prefix && a.link === b.link }
  /// Hashes the prefix and the bus.
  public func hash(into h: inout Hasher) {
    h.combine(prefix)
    h.combine(ObjectIdentifier(link))
  }
}
