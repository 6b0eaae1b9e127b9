#if canImport(Glibc)
import Glibc
#endif
import Ordo

/// The floor of the delivery scenario: the least work that SPEC §2–§5 ask
/// of a bus for one delivered change, written for this one workload (every
/// keypath known by its index, one reader per keypath, readers registered
/// in the order their keypaths are written, so no hashing, no patterns, no
/// priorities, no rules to check). Per change it does what any conforming
/// bus must do, and nothing else:
///
/// - the write: compare with the current value (an equal value is no
///   change, SPEC §2), save the start value on the first write of the
///   transaction, store the new value, remember the keypath as written;
/// - at the commit, the pass: for each written keypath whose value still
///   differs from the start, schedule its reader once (SPEC §5.1); at its
///   turn, check again that the keypath still counts as changed (§5.2),
///   call it with the transaction id and the changed keypath (a `String`,
///   no list: less than any bus that hands over a collection);
/// - the commit: the keypath's counter rises and its changed-at is set
///   (SPEC §2, §10); the transaction's records are dropped.
///
/// With `locked`, it also follows Ordo's threading design (SPEC §3: any
/// thread may read the committed state while a transaction is open): a
/// write goes to a buffer of the writing thread's, which other threads
/// never read, with no lock (Ordo holds such writes back the same way,
/// docs/semantics.md, "Writes held back"); the commit takes the bus's
/// mutex, applies them, and releases the mutex around each callback (so
/// that the callback may call back into the bus, and other threads read
/// meanwhile). (Until 2026-12-03 it took the mutex for each write, as Ordo
/// did.) Without, it is single-threaded and writes in place.
///
/// It is a floor, not a competitor: a target that this cannot reach is out
/// of reach for Ordo's design.
final class MinimalPass {
  private let locked: Bool
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  let keys: [String]
  private let n: Int
  // Plain buffers (no copy-on-write or exclusivity checks), int64 values
  // with a presence flag: cheaper than any bus that stores typed values.
  private let values: UnsafeMutableBufferPointer<Int64>
  private let present: UnsafeMutableBufferPointer<Bool>
  private let counters: UnsafeMutableBufferPointer<UInt64>
  private let changedAt: UnsafeMutableBufferPointer<UInt64>
  /// Per keypath: the transaction serial of its first write (its record).
  private let written: UnsafeMutableBufferPointer<UInt32>
  /// The written keypaths and their start values, in first-write order.
  private let journalKey: UnsafeMutableBufferPointer<Int>
  private let journalValue: UnsafeMutableBufferPointer<Int64>
  private let journalPresent: UnsafeMutableBufferPointer<Bool>
  private var journalCount = 0
  /// `locked`: the writes of the open transaction, not applied yet (the
  /// writer's own; as large as the workload needs, never settled early:
  /// less than Ordo's 16-entry buffer).
  private let pendingKey: UnsafeMutableBufferPointer<Int>
  private let pendingValue: UnsafeMutableBufferPointer<Int64>
  private var pendingCount = 0
  /// The reader of each keypath, and per reader its pass stamp.
  private let reader: UnsafeMutableBufferPointer<Int>
  private let scheduled: UnsafeMutableBufferPointer<UInt32>
  private let trigger: UnsafeMutableBufferPointer<Int>
  private let schedule: UnsafeMutableBufferPointer<Int>
  private var scheduleCount = 0
  private let callbacks: [(UInt64, String) -> Void]
  private var serial: UInt32 = 0
  private var lastTransaction: UInt64 = 0

  init(keys: [String], locked: Bool, callback: @escaping (Int) -> Void) {
    self.keys = keys
    self.locked = locked
    pthread_mutex_init(mutex, nil)
    n = keys.count
    func buffer<T>(_ x: T) -> UnsafeMutableBufferPointer<T> {
      let b = UnsafeMutableBufferPointer<T>.allocate(capacity: keys.count)
      b.initialize(repeating: x)
      return b
    }
    values = buffer(0)
    present = buffer(false)
    counters = buffer(0)
    changedAt = buffer(0)
    written = buffer(0)
    journalKey = buffer(0)
    journalValue = buffer(0)
    journalPresent = buffer(false)
    pendingKey = buffer(0)
    pendingValue = buffer(0)
    reader = buffer(0)
    for i in 0..<keys.count { reader[i] = i }
    scheduled = buffer(0)
    trigger = buffer(0)
    schedule = buffer(0)
    callbacks = (0..<keys.count).map { i in { _, _ in callback(i) } }
  }

  deinit {
    pthread_mutex_destroy(mutex)
    mutex.deallocate()
    for b in [values, journalValue, pendingValue] { b.deallocate() }
    for b in [present, journalPresent] { b.deallocate() }
    for b in [counters, changedAt] { b.deallocate() }
    for b in [journalKey, pendingKey, reader, trigger, schedule] { b.deallocate() }
    for b in [written, scheduled] { b.deallocate() }
  }

  @inline(__always) private func lock() { if locked { pthread_mutex_lock(mutex) } }
  @inline(__always) private func unlock() { if locked { pthread_mutex_unlock(mutex) } }

  func begin() { serial &+= 1 }

  @inline(__always)
  func set(_ k: Int, _ v: Int64) {
    if locked {
      precondition(pendingCount < n, "MinimalPass: more writes in a transaction than keypaths")
      pendingKey[pendingCount] = k
      pendingValue[pendingCount] = v
      pendingCount += 1
    } else {
      apply(k, v)
    }
  }

  @inline(__always)
  private func apply(_ k: Int, _ v: Int64) {
    if present[k] && values[k] == v { return }
    if written[k] != serial {
      written[k] = serial
      journalKey[journalCount] = k
      journalValue[journalCount] = values[k]
      journalPresent[journalCount] = present[k]
      journalCount += 1
    }
    values[k] = v
    present[k] = true
  }

  /// Whether journal entry `j`'s keypath differs from its start value.
  @inline(__always) private func changed(_ j: Int) -> Bool {
    let k = journalKey[j]
    return present[k] != journalPresent[j] || (present[k] && values[k] != journalValue[j])
  }

  func commit() {
    lock()
    for i in 0..<pendingCount { apply(pendingKey[i], pendingValue[i]) }
    pendingCount = 0
    let txn = lastTransaction + 1
    for j in 0..<journalCount where changed(j) {
      let c = reader[journalKey[j]]
      if scheduled[c] != serial {
        scheduled[c] = serial
        trigger[c] = j
        schedule[scheduleCount] = c
        scheduleCount += 1
      }
    }
    // Readers come in pass order in this workload: a check, no sort.
    var inOrder = true
    for i in 1..<max(scheduleCount, 1) where schedule[i] < schedule[i - 1] { inOrder = false }
    if !inOrder {
      var part = UnsafeMutableBufferPointer(rebasing: schedule[0..<scheduleCount])
      part.sort()
    }
    for i in 0..<scheduleCount {
      let c = schedule[i]
      let j = trigger[c]
      guard changed(j) else { continue }
      unlock()
      callbacks[c](txn, keys[journalKey[j]])
      lock()
    }
    scheduleCount = 0
    var any = false
    for j in 0..<journalCount where changed(j) {
      let k = journalKey[j]
      counters[k] += 1
      changedAt[k] = txn
      any = true
    }
    if any { lastTransaction = txn }
    journalCount = 0
    unlock()
  }

  /// The counter of keypath `k` (for the scenario's check).
  func counter(_ k: Int) -> UInt64 { counters[k] }
}
