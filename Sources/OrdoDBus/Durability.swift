// What the service needs to acknowledge only durable transactions
// (`Durability`, filled by ordod --state) and what a sync reports.
/// What a published bus uses to make its transactions durable before it
/// acknowledges them (SPEC §11). `ordod --state` fills it with the
/// `OrdoStore` `DurableState` of its bus; OrdoDBus itself does no I/O of
/// its own and does not depend on OrdoStore.
///
/// With a durability set, the service holds every `Commit` reply and every
/// observer's `Notify` of a transaction until a ``sync()`` returned an
/// outcome whose `durable` is at or past the transaction's id (group
/// commit: every `Commit` handled in one dispatch iteration, and those
/// queued behind a waiting writer, share one `sync()`).
public protocol Durability: AnyObject, Sendable {
  /// Makes every transaction committed so far durable. Called on the
  /// service thread, outside any transaction, once per dispatch iteration
  /// that left acknowledgements held.
  func sync() -> DurabilityOutcome

  /// Called on the service thread right after the `Commit` replies and
  /// `Notify` signals a ``sync()`` allowed were sent: work that makes
  /// nothing durable but should not delay an acknowledgement goes here
  /// (`ordod --state` moves its commit log into the database). The default
  /// does nothing.
  func acknowledged()
}

extension Durability {
  /// Does nothing.
  public func acknowledged() {}
}

/// The result of ``Durability/sync()``.
public struct DurabilityOutcome: Sendable, Equatable {
  /// Every transaction with an id ≤ this is durable.
  public var durable: UInt64
  /// Transactions committed in memory that are gone (not stored, and the
  /// bus's memory restored without them): their `Commit`s get
  /// `dev.ordo.Error.Storage` with `reason`, their held `Notify`s are
  /// dropped. nil when none were lost.
  public var lost: ClosedRange<UInt64>?
  /// Why the sync failed (nil when it succeeded).
  public var reason: String?

  public init(durable: UInt64, lost: ClosedRange<UInt64>? = nil, reason: String? = nil) {
    self.durable = durable
    self.lost = lost
    self.reason = reason
  }
}
