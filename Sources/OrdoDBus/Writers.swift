// The wait for a remote writer's `Complete`: how it ends (`WriterOutcome`)
// and the slot the awaiting thread and the service thread share.
import Ordo

#if canImport(Glibc)
import Glibc
#endif

/// How the wait for a remote writer contract's `Complete` ended.
enum WriterOutcome {
  /// A `Complete` for the awaited call: the writes to apply and the call to
  /// answer once they are applied (or refused).
  case writes([Write], DBusMessageRef)
  /// A `Complete` for the awaited call that could not be read (already
  /// answered with an error): the pass goes on without writes.
  case refused(String)
  /// No `Complete` within the contract's timeout.
  case timedOut
  /// The owner left the bus while awaited (counted as a timeout).
  case ownerLeft
  /// The contract was unregistered while awaited.
  case unregistered
  /// The service thread cannot serve this pass (it waits for the bus, which
  /// this pass holds): counted as a timeout at once.
  case serviceBusy
  /// The service stopped or lost its connection.
  case stopped
}

/// One awaited call of a remote writer contract.
final class WriterAwait {
  let contract: ContractID
  let transaction: UInt64
  let owner: String
  let name: String
  let deadline: Int64
  /// The pass runs on a thread other than the service thread.
  let foreign: Bool
  /// Guarded by the ``WaitSlot``'s lock.
  fileprivate(set) var outcome: WriterOutcome?

  init(contract: ContractID, transaction: UInt64, owner: String, name: String, deadline: Int64, foreign: Bool) {
    self.contract = contract
    self.transaction = transaction
    self.owner = owner
    self.name = name
    self.deadline = deadline
    self.foreign = foreign
  }
}

/// The awaited writer call, shared by the committing thread and the service
/// thread. Passes are serialized and a pass calls one contract at a time, so
/// at most one call is awaited at any moment.
final class WaitSlot: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  private var current: WriterAwait?

  init() {
    pthread_mutex_init(mutex, nil)
    var attr = pthread_condattr_t()
    pthread_condattr_init(&attr)
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
    pthread_cond_init(cond, &attr)
    pthread_condattr_destroy(&attr)
  }

  deinit {
    pthread_cond_destroy(cond)
    pthread_mutex_destroy(mutex)
    cond.deallocate()
    mutex.deallocate()
  }

  /// The awaited call, if any.
  var active: WriterAwait? {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return current
  }

  func begin(_ a: WriterAwait) {
    pthread_mutex_lock(mutex)
    current = a
    pthread_mutex_unlock(mutex)
  }

  /// Ends `a`'s wait with `o` unless it already ended. Returns whether `o`
  /// was taken.
  @discardableResult
  func post(_ a: WriterAwait, _ o: WriterOutcome) -> Bool {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    guard current === a, a.outcome == nil else { return false }
    a.outcome = o
    pthread_cond_broadcast(cond)
    return true
  }

  /// Whether `a`'s wait has ended.
  func ended(_ a: WriterAwait) -> Bool {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return a.outcome != nil
  }

  /// Waits (on the committing thread) until `a` has an outcome, its deadline
  /// passes, or `busy()` says the service thread cannot serve it (checked
  /// every 20 ms).
  func wait(_ a: WriterAwait, busy: () -> Bool) {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    while a.outcome == nil {
      let now = Connection.nowMs()
      if now >= a.deadline { break }
      if busy() {
        a.outcome = .serviceBusy
        break
      }
      let until = min(a.deadline, now + 20)
      var ts = timespec()
      ts.tv_sec = Int(until / 1000)
      ts.tv_nsec = Int(until % 1000) * 1_000_000
      pthread_cond_timedwait(cond, mutex, &ts)
    }
  }

  /// Clears the slot and returns `a`'s outcome (``WriterOutcome/timedOut``
  /// if none came): a `Complete` arriving later is stale.
  func end(_ a: WriterAwait) -> WriterOutcome {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    if a.outcome == nil { a.outcome = .timedOut }
    if current === a { current = nil }
    return a.outcome!
  }
}

/// Reported (to `onFailure`, the log and `Stats`) when a remote writer
/// contract does not complete its call.
struct RemoteWriterFailure: Error, CustomStringConvertible {
  let description: String
}
