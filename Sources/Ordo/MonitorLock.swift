#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

import Synchronization

/// The bus's lock: a mutex for short, non-blocking sections, and a wait
/// for the turn of a thread that asked for the bus (``Gate/acquire()``).
///
/// The mutex is a word locked by one atomic compare-and-swap and unlocked by
/// one release store when nobody contends; a thread that finds it locked
/// sleeps on a pthread condition until the holder's unlock wakes it. An
/// uncontended lock and unlock pair costs about 10 instructions against
/// about 73 for a pthread mutex, and the delivery workload takes two pairs
/// per change (`ordo-bench --profile delivery-handles`, callgrind). Every
/// atomic operation is compiled into this module, so ThreadSanitizer sees
/// the order the lock establishes (`make tsan`); the standard library's
/// `Mutex`, which hands over through the kernel, hides it.
///
/// The unlock is a plain release store of the word, then a relaxed read of
/// `contenders` (no read-modify-write: an atomic exchange there cost the
/// delivery workload about 5 % of its time, two unlocks per change). The
/// read may be ordered before the store reaches other cores, so an unlock
/// can miss a contender that counted itself in `contenders` and tried the
/// word in that window; a contender therefore sleeps at most
/// ``missedWakeupBoundNS`` at a time and tries the word again, so a missed
/// wakeup delays it by that bound, never more. Otherwise the unlocker sees
/// the contender and signals it under `slow`, which the contender holds
/// from its retry until it sleeps.
///
/// Waiting for a broadcast, which only a thread that must wait for
/// another's transaction does, uses a condition of its own: a waiter notes
/// the broadcast generation under the mutex before it lets the mutex go, so
/// no broadcast is missed, and a broadcast with nobody waiting costs nothing.
///
/// The lock is a value made of addresses (locking through it retains
/// nothing); its owner makes it with ``make()`` and frees it with
/// ``destroy()`` in its `deinit`.
struct MonitorLock: @unchecked Sendable {
  /// The lock word (0 free, 1 held) and the number of threads sleeping or
  /// about to sleep for it: atomics only (a plain field beside them would
  /// make every update of it an access to the whole value, for
  /// ThreadSanitizer a race with the atomics).
  struct Word: ~Copyable {
    let state = Atomic<UInt32>(0)
    let contenders = Atomic<UInt32>(0)
  }
  /// The broadcast state.
  struct Turns {
    // Guarded by the lock.
    var generation: UInt64 = 0
    var waiters = 0
    // Guarded by `slow`.
    var signalled: UInt64 = 0
  }
  // One block holds every part, each at a fixed offset in its own cache
  // line; the lock is the block's address. Copying the lock to use it is
  // then one word (five separate addresses cost the delivery workload
  // about 28 instructions per change).
  private let base: UnsafeMutableRawPointer
  /// How long a contender sleeps at most before it tries the word again.
  static let missedWakeupBoundNS = 200_000
  private static let turnsOffset = 64, slowOffset = 128, handoffOffset = 192, condOffset = 256, blockSize = 320

  @inline(__always) private var word: UnsafeMutablePointer<Word> { base.assumingMemoryBound(to: Word.self) }
  @inline(__always) private var turns: UnsafeMutablePointer<Turns> {
    (base + MonitorLock.turnsOffset).assumingMemoryBound(to: Turns.self)
  }
  @inline(__always) private var slow: UnsafeMutablePointer<pthread_mutex_t> {
    (base + MonitorLock.slowOffset).assumingMemoryBound(to: pthread_mutex_t.self)
  }
  /// Contenders for the word sleep here.
  @inline(__always) private var handoff: UnsafeMutablePointer<pthread_cond_t> {
    (base + MonitorLock.handoffOffset).assumingMemoryBound(to: pthread_cond_t.self)
  }
  /// Threads waiting for a broadcast sleep here.
  @inline(__always) private var cond: UnsafeMutablePointer<pthread_cond_t> {
    (base + MonitorLock.condOffset).assumingMemoryBound(to: pthread_cond_t.self)
  }

  private init() {
    precondition(
      MemoryLayout<Word>.size <= MonitorLock.turnsOffset && MemoryLayout<Turns>.size <= 64
        && MemoryLayout<pthread_mutex_t>.size <= 64 && MemoryLayout<pthread_cond_t>.size <= 64,
      "MonitorLock: a part outgrows its 64 bytes")
    base = .allocate(byteCount: MonitorLock.blockSize, alignment: 64)
    base.bindMemory(to: Word.self, capacity: 1).initialize(to: Word())
    (base + MonitorLock.turnsOffset).bindMemory(to: Turns.self, capacity: 1).initialize(to: Turns())
    (base + MonitorLock.slowOffset).bindMemory(to: pthread_mutex_t.self, capacity: 1).initialize(to: pthread_mutex_t())
    (base + MonitorLock.handoffOffset).bindMemory(to: pthread_cond_t.self, capacity: 1).initialize(to: pthread_cond_t())
    (base + MonitorLock.condOffset).bindMemory(to: pthread_cond_t.self, capacity: 1).initialize(to: pthread_cond_t())
    pthread_mutex_init(slow, nil)
    var attributes = pthread_condattr_t()
    pthread_condattr_init(&attributes)
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
    pthread_cond_init(handoff, &attributes)
    pthread_condattr_destroy(&attributes)
    pthread_cond_init(cond, nil)
  }

  /// A new, unlocked lock.
  static func make() -> MonitorLock { MonitorLock() }

  /// Frees the lock; nobody may hold or use it.
  func destroy() {
    pthread_cond_destroy(cond)
    pthread_cond_destroy(handoff)
    pthread_mutex_destroy(slow)
    word.deinitialize(count: 1)
    base.deallocate()
  }

  @inline(__always)
  func lock() {
    if word.pointee.state.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
    contend()
  }

  @inline(__always)
  func unlock() {
    word.pointee.state.store(0, ordering: .releasing)
    if word.pointee.contenders.load(ordering: .relaxed) != 0 { wake() }
  }

  @inline(never)
  private func contend() {
    pthread_mutex_lock(slow)
    word.pointee.contenders.wrappingAdd(1, ordering: .sequentiallyConsistent)
    while !word.pointee.state.compareExchange(expected: 0, desired: 1, ordering: .sequentiallyConsistent).exchanged {
      // A bounded wait: an unlock may miss this contender (see the type's
      // comment), and the retry after the bound takes the word then.
      var deadline = timespec()
      clock_gettime(CLOCK_MONOTONIC, &deadline)
      deadline.tv_nsec += MonitorLock.missedWakeupBoundNS
      if deadline.tv_nsec >= 1_000_000_000 {
        deadline.tv_sec += 1
        deadline.tv_nsec -= 1_000_000_000
      }
      pthread_cond_timedwait(handoff, slow, &deadline)
    }
    word.pointee.contenders.wrappingSubtract(1, ordering: .sequentiallyConsistent)
    pthread_mutex_unlock(slow)
  }

  @inline(never)
  private func wake() {
    pthread_mutex_lock(slow)
    pthread_cond_signal(handoff)
    pthread_mutex_unlock(slow)
  }

  /// Waits for a broadcast (or wakes spuriously: callers recheck their
  /// condition). The lock must be held; it is held again on return.
  func wait() {
    let seen = turns.pointee.generation
    turns.pointee.waiters += 1
    unlock()
    pthread_mutex_lock(slow)
    while turns.pointee.signalled <= seen { pthread_cond_wait(cond, slow) }
    pthread_mutex_unlock(slow)
    lock()
    turns.pointee.waiters -= 1
  }

  /// Wakes every waiter. The lock must be held.
  func broadcast() {
    turns.pointee.generation &+= 1
    guard turns.pointee.waiters > 0 else { return }
    pthread_mutex_lock(slow)
    turns.pointee.signalled = turns.pointee.generation
    pthread_cond_broadcast(cond)
    pthread_mutex_unlock(slow)
  }
}
