/// A declared event (SPEC §14): a keypath that holds no value and is only
/// touched, resolved once. Generated accessors (`ordoctl codegen`,
/// docs/schema.md) give one per `event` keypath of a schema.
///
/// ```swift
/// let refresh = try bus.event("ui.refresh")
/// try bus.transaction { try refresh.touch() }
/// ```
///
/// Like a ``Property`` it does not keep its bus alive.
public struct EventProperty: Sendable, Hashable, CustomStringConvertible {
  /// The resolved keypath.
  public let handle: Handle

  /// The keypath.
  public var keypath: String { handle.keypath }
  /// The keypath.
  public var description: String { handle.keypath }
  /// The keypath as a pattern, for a contract's read or write set.
  public var pattern: Pattern { Pattern(concrete: handle.keypath) }

  /// Marks the keypath changed (SPEC §2). Throws like ``Property/set(_:)``.
  public func touch() throws(OrdoError) {
    let h = handle
    try h.link.with("event \"\(h.keypath)\"") { bus throws(OrdoError) in try bus.touch(h) }
  }

  /// The keypath's change counter: how many times it was touched.
  public var counter: UInt64 {
    get throws(OrdoError) {
      let h = handle
      return try h.link.with("event \"\(h.keypath)\"") { bus throws(OrdoError) in try bus.counter(h) }
    }
  }
}

extension Bus {
  /// An event accessor for `keypath` (see ``EventProperty``).
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for a malformed keypath;
  ///   on a bus with a schema, ``OrdoError/Code/schema`` for an undeclared
  ///   keypath and ``OrdoError/Code/typeMismatch`` for one not declared an
  ///   event.
  public func event(_ keypath: String) throws(OrdoError) -> EventProperty {
    try checkSchemaResolve(keypath, as: Schema.ValueType.event.rawValue)
    return EventProperty(handle: try resolve(keypath))
  }
}

extension Property {
  /// The keypath as a pattern, for a contract's read or write set.
  public var pattern: Pattern { Pattern(concrete: keypath) }
}

extension Pattern {
  /// The pattern of one valid keypath (a resolved one: no check needed).
  init(concrete keypath: String) {
    string = keypath
    fixed = keypath.split(separator: ".").map { .literal(String($0)) }
    isTree = false
  }
}
