// The limits that protect a published bus from hostile or broken peers, and
// the size estimate replies and Notify signals are held to.
import Ordo

/// Limits that protect a published bus from hostile or broken peers. A call
/// beyond a limit gets `dev.ordo.Error.Limit` and changes nothing.
public struct ServiceLimits: Sendable, Hashable {
  /// Entries in one call: `Commit`'s set + touch + remove, `Snapshot`'s
  /// patterns, a contract's reads + writes.
  public var maxKeypathsPerCall = 4096
  /// Contracts one peer may have registered at once.
  public var maxContractsPerPeer = 256
  /// Contracts on the bus at once (all peers and the host).
  public var maxContracts = 65_536
  /// Bytes in one string or bytes value.
  public var maxValueBytes = 1 << 20
  /// Estimated size of a reply or `Notify` the service builds: a reply over
  /// it becomes `dev.ordo.Error.Limit`; a `Notify` over it is sent without
  /// values (and without keypaths if those alone are over it) so that the
  /// client resynchronizes with `Snapshot`.
  public var maxMessageBytes = 32 << 20
  /// When the service's own outgoing queue (to the bus daemon) holds more
  /// than this, further `Notify` signals are dropped and counted
  /// (`notify-dropped`); replies are never dropped.
  public var maxOutgoingBytes = 64 << 20
  /// How long the pass waits for a writer contract's `Complete` when its
  /// `Register` gives no `timeout-ms` option.
  public var defaultWriterTimeoutMs: UInt32 = 2000
  /// The largest `timeout-ms` a writer contract may ask for. A peer whose
  /// writers do not answer delays a pass by at most its largest timeout,
  /// once: then its writers are suspended until it calls the service again
  /// (SPEC §12, docs/reliability.md).
  public var maxWriterTimeoutMs: UInt32 = 5000

  /// The defaults.
  public init() {}
}

extension DBusService {
  /// The bytes a value adds to a reply or `Notify`, as held to
  /// ``ServiceLimits/maxMessageBytes``.
  static func estimate(_ v: Value) -> Int {
    switch v {
    case .string(let s): 16 + s.utf8.count
    case .bytes(let b): 16 + b.count
    default: 24
    }
  }
}
