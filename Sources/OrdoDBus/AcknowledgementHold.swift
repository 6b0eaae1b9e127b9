// Acknowledgements held for durability (SPEC §11): Commit replies and
// observers' Notify signals wait until a sync makes their transaction
// durable; group commit makes one sync cover a dispatch iteration's Commits.
import CDBus
import Ordo
import Synchronization

/// The acknowledgements a service holds while a ``Durability`` is set: what
/// is held, in the order it was produced, the durability that releases it,
/// and the counters of syncs and losses. Any thread holds; the service
/// thread releases.
final class AcknowledgementHold: @unchecked Sendable {
  /// An acknowledgement waiting for its transaction to be durable.
  private enum Held {
    /// An observer's Notify of transaction `txn`.
    case notify(UInt64, DBusMessageRef)
    /// The reply to a Commit (`call`) of transaction `txn`.
    case reply(UInt64, call: DBusMessageRef, reply: DBusMessageRef)

    var transaction: UInt64 {
      switch self {
      case .notify(let t, _), .reply(let t, _, _): t
      }
    }
  }

  private let durability = PThreadLocked<Durability?>(nil)
  private let on = Atomic<Bool>(false)
  private let held = PThreadLocked<[Held]>([])

  /// Syncs made.
  let syncs = Atomic<UInt64>(0)
  /// Syncs that reported a failure.
  let syncFailures = Atomic<UInt64>(0)
  /// Commits answered `dev.ordo.Error.Storage` (their transaction was lost).
  let storageErrors = Atomic<UInt64>(0)
  /// Held Notify signals dropped: their transaction was lost or not applied.
  let notifyLost = Atomic<UInt64>(0)

  /// Whether acknowledgements are held (a durability is set).
  var isOn: Bool { on.load(ordering: .relaxed) }

  /// Whether anything is held.
  var isHolding: Bool { held.withLock { !$0.isEmpty } }

  /// Sets the durability that releases what is held (nil: hold nothing more).
  func set(_ d: Durability?) {
    durability.withLock { $0 = d }
    on.store(d != nil, ordering: .relaxed)
  }

  /// Holds an observer's Notify of transaction `txn`.
  func hold(notify m: DBusMessageRef, of txn: UInt64) {
    held.withLock { $0.append(.notify(txn, m)) }
  }

  /// Holds the reply to the Commit `call` of transaction `txn`.
  func hold(reply: DBusMessageRef, to call: DBusMessageRef, of txn: UInt64) {
    held.withLock { $0.append(.reply(txn, call: call, reply: reply)) }
  }

  /// Drops the held Notify signals of transactions after `last`: their pass
  /// ran but the transaction was not applied, so they must never go out.
  func dropNotifies(after last: UInt64) {
    held.withLock { h in
      let before = h.count
      h.removeAll { if case .notify(let t, _) = $0 { t > last } else { false } }
      notifyLost.add(UInt64(before - h.count), ordering: .relaxed)
    }
  }

  /// Makes what is held durable with one sync, then hands to `send` the
  /// Commit replies and Notify signals (`droppable`) of durable
  /// transactions in the order they were produced; a lost transaction's
  /// Commit gets `dev.ordo.Error.Storage` (sent too) and its Notify signals
  /// are dropped. Returns the Notify signals and the error replies sent,
  /// nil when nothing was held (no sync).
  func release(
    send: (DBusMessageRef, _ droppable: Bool) -> Void, logError: (String) -> Void
  ) -> (notified: UInt64, refused: UInt64)? {
    guard isOn, let durability = durability.withLock({ $0 }), isHolding else { return nil }
    let outcome = durability.sync()
    syncs.add(1, ordering: .relaxed)
    if let reason = outcome.reason {
      syncFailures.add(1, ordering: .relaxed)
      let what = outcome.lost.map { $0.count == 1 ? "transaction \($0.lowerBound)" : "transactions \($0.lowerBound)…\($0.upperBound)" } ?? "no transaction"
      logError("storage failure, \(what) lost (not applied): \(reason)")
    }
    let items = held.withLock { h -> [Held] in
      let x = h
      h.removeAll()
      return x
    }
    var keep: [Held] = []
    var notified: UInt64 = 0
    var refused: UInt64 = 0
    for item in items {
      let t = item.transaction
      if let lost = outcome.lost, lost.contains(t) {
        switch item {
        case .notify:
          notifyLost.add(1, ordering: .relaxed)
        case .reply(_, let call, _):
          storageErrors.add(1, ordering: .relaxed)
          refused += 1
          let message = "transaction \(t) was not stored, nothing of it was applied: \(outcome.reason ?? "the sync failed")"
          if let e = call.error(DBusErrorName.ordo(.storage), message) { send(e, false) }
        }
      } else if t <= outcome.durable {
        switch item {
        case .notify(_, let m):
          notified += 1
          send(m, true)
        case .reply(_, _, let reply):
          send(reply, false)
        }
      } else {
        keep.append(item)
      }
    }
    if !keep.isEmpty { held.withLock { $0.insert(contentsOf: keep, at: 0) } }
    durability.acknowledged()
    return (notified, refused)
  }
}

extension DBusService {
  /// Whether acknowledgements wait for a transaction not yet committed (by
  /// another thread): the loop then polls instead of blocking.
  var heldWaiting: Bool { hold.isOn && hold.isHolding }

  /// Group commit: while acknowledgements are held, handles the calls
  /// already waiting on the socket (libdbus reads about 2 KiB per step)
  /// before the one sync that covers them all.
  func drainForGroupCommit() {
    guard hold.isOn, loopWaits == 0 else { return }
    var rounds = 0
    while rounds < 64, !stopFlag.load(ordering: .relaxed), hold.isHolding {
      let before = statistics.methodCalls.load(ordering: .relaxed)
      guard link.step(timeoutMs: 0), statistics.methodCalls.load(ordering: .relaxed) != before else { return }
      rounds += 1
    }
  }

  /// Releases what is held (``AcknowledgementHold/release(send:logError:)``).
  /// Service thread, outside any pass. Returns whether a sync ran.
  @discardableResult
  func releaseHeld() -> Bool {
    guard hold.isOn, loopWaits == 0, !closed, slot.active == nil, !bus.isInTransaction else { return false }
    guard
      let (notified, refused) = hold.release(
        send: { m, droppable in link.send(m, droppable: droppable) }, logError: { log(.error, $0) })
    else { return false }
    if notified > 0 { statistics.notifySent.add(notified, ordering: .relaxed) }
    if refused > 0 { statistics.errorReplies.add(refused, ordering: .relaxed) }
    return true
  }
}
