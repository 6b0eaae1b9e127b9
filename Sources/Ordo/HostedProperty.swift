/// A value that lives in the host program (a view model's own stored
/// property) but takes part in the bus like a stored value: reading it is
/// checked against the running contract's read set, writing it touches its
/// keypath (so counters rise and readers are notified once per transaction),
/// and a rollback restores it.
///
/// ```swift
/// let title = try HostedProperty(bus: bus, keypath: "doc.title", initial: "")
/// try bus.transaction { try title.set("Songs") }
/// ```
///
/// Setting a value equal to the current one changes nothing and notifies no
/// one (SPEC §2). Readers on other threads see the host's current value,
/// which may be uncommitted; host values have no committed copy.
///
/// Like a ``Property``, a hosted property does not keep its bus alive (a
/// callback may capture it without a retain cycle); once the bus is gone,
/// ``get()`` and ``set(_:)`` throw ``OrdoError/Code/invalidArgument``.
public final class HostedProperty<T: Equatable & Sendable>: @unchecked Sendable {
  /// The bus the property reports to, nil once it was deallocated.
  public var bus: Bus? { link.bus }
  private let link: BusLink
  /// The property's keypath.
  public let keypath: String
  private let lock: MonitorLock
  private var storage: T

  /// Binds a host value to a keypath of a bus.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for a malformed keypath.
  public init(bus: Bus, keypath: String, initial: T) throws(OrdoError) {
    _ = try Keypath(keypath)
    lock = .make()
    self.link = bus.link
    self.keypath = keypath
    self.storage = initial
  }

  deinit { lock.destroy() }

  /// Reads the value; inside a callback the keypath must be in the contract's
  /// read or write set (``OrdoError/Code/contractViolation`` otherwise).
  public func get() throws(OrdoError) -> T {
    let k = keypath
    try link.with("hosted property \"\(k)\"") { bus throws(OrdoError) in try bus.access(k) }
    lock.lock()
    defer { lock.unlock() }
    return storage
  }

  /// Writes the value inside a transaction or a callback, with the write
  /// rules of a stored value; a rollback restores the old value.
  ///
  /// - Throws: ``OrdoError/Code/noTransaction``,
  ///   ``OrdoError/Code/contractViolation``, ``OrdoError/Code/stability``.
  public func set(_ value: T) throws(OrdoError) {
    lock.lock()
    let old = storage
    lock.unlock()
    let k = keypath
    if old == value {
      try link.with("hosted property \"\(k)\"") { bus throws(OrdoError) in try bus.checkWrite(k) }
      return
    }
    try link.with("hosted property \"\(k)\"") { bus throws(OrdoError) in try bus.touch(k) }
    lock.lock()
    storage = value
    lock.unlock()
    try? link.bus?.onRollback { [weak self] in
      guard let self else { return }
      self.lock.lock()
      self.storage = old
      self.lock.unlock()
    }
  }
}
