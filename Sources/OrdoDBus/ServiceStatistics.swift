// The service's own counters (the `Stats` method adds the bus's and the
// connection's): one struct, each counter relaxed-atomic, since the service
// thread and committing threads both count.
import Synchronization

/// The counters of a ``DBusService``: stored inline in the service (no
/// allocation, no indirection); any thread adds to them.
struct ServiceStatistics: ~Copyable, Sendable {
  /// Method calls received (a queued call counts once).
  let methodCalls = Atomic<UInt64>(0)
  /// Error replies sent (or due, for calls that expect none).
  let errorReplies = Atomic<UInt64>(0)
  /// Of those, `dev.ordo.Error.AccessDenied`.
  let accessDenied = Atomic<UInt64>(0)
  /// Method calls queued behind a running pass.
  let queued = Atomic<UInt64>(0)
  /// `Commit`s run.
  let commits = Atomic<UInt64>(0)
  /// Peers that left with contracts.
  let peersLeft = Atomic<UInt64>(0)
  /// `Notify` signals handed to the connection.
  let notifySent = Atomic<UInt64>(0)
  /// `Notify` signals sent without values or keypaths (over max-message-bytes).
  let notifyTruncated = Atomic<UInt64>(0)
  /// Remote writer calls awaited.
  let writerCalls = Atomic<UInt64>(0)
  /// Writer calls skipped: their peer was suspended.
  let writersSkipped = Atomic<UInt64>(0)
  /// Writer calls that ended without an answer.
  let timeouts = Atomic<UInt64>(0)
  /// `Complete`s whose writes were applied.
  let completes = Atomic<UInt64>(0)
  /// `Complete`s refused (none of their writes applied).
  let completesRefused = Atomic<UInt64>(0)
  /// Peers whose writers were suspended.
  let suspensions = Atomic<UInt64>(0)
  /// Suspended peers that called again (their writers are awaited again).
  let resumes = Atomic<UInt64>(0)

  init() {}
}
