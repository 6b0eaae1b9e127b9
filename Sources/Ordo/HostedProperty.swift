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
public final class HostedProperty<T: Equatable & Sendable>: @unchecked Sendable {
  /// The bus the property reports to.
  public let bus: Bus
  /// The property's keypath.
  public let keypath: String
  private let lock = MonitorLock()
  private var storage: T

  /// Binds a host value to a keypath of a bus.
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for a malformed keypath.
  public init(bus: Bus, keypath: String, initial: T) throws(OrdoError) {
    _ = try Keypath(keypath)
    self.bus = bus
    self.keypath = keypath
    self.storage = initial
  }

  /// Reads the value; inside a callback the keypath must be in the contract's
  /// read or write set (``OrdoError/Code/contractViolation`` otherwise).
  public func get() throws(OrdoError) -> T {
    try bus.access(keypath)
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
    if old == value {
      try bus.checkWrite(keypath)
      return
    }
    try bus.touch(keypath)
    lock.lock()
    storage = value
    lock.unlock()
    try? bus.onRollback { [weak self] in
      guard let self else { return }
      self.lock.lock()
      self.storage = old
      self.lock.unlock()
    }
  }
}
