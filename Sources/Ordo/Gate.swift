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
  private static let missedWakeupBoundNS = 200_000
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

/// A callback running on the owning thread: its contract, the nesting of
/// its own `begin`/`commit` pairs (they join what is open), and whether a
/// bridge has suspended its contract checks while it waits for a peer.
struct CallFrame {
  /// Named by its pass state, not retained: the pass's schedule, or
  /// `register` for an initial call, holds the contract for the whole call.
  var contract: ContractRef
  var depth = 0
  var suspended = false
}

/// What the thread that owns the bus is doing (SPEC §3). Exactly one of:
enum Phase {
  /// Nothing is open. (The owner may still hold the bus to register or
  /// unregister.)
  case idle
  /// A transaction is open outside callbacks, `depth` `begin`s deep.
  case open(depth: Int)
  /// An initial call made inside an open transaction (`outer` deep): its
  /// writes join that transaction and its pass.
  case initial(outer: Int, call: CallFrame)
  /// The notification pass of transaction `txn`, with the callback that
  /// runs now, if any. `txn` is 0 during the initial call that opens a pass
  /// of its own (registration outside any transaction): the pass gets its
  /// id when that call has changed something.
  case pass(txn: UInt64, call: CallFrame?)
}

/// What a write by the calling thread is subject to.
enum WriteAccess {
  /// The owner's open transaction, outside callbacks: no contract rules.
  case free
  /// A callback: the running contract's write rules (SPEC §5).
  case contract(ContractState)
  /// Not allowed now: outside any transaction (or from the wrong thread, or
  /// while a bridge suspended the callback).
  case refused
}

/// The transaction gate: the lock that guards the bus, the tickets that hand
/// the bus to one thread at a time in the order they asked, and the one
/// ``Phase`` value from which every "may I" of SPEC §3 is computed here and
/// nowhere else.
final class Gate {
  let lock = MonitorLock.make()
  /// The thread that owns the bus (``currentThread``), 0 for none. Written
  /// only with `lock` held; read with it, and without it by
  /// ``ownsOpenTransaction`` (hence an atomic: a thread that does not own
  /// the bus may read it while another thread takes the bus).
  private let owner = Atomic<UInt>(0)
  /// Written only with `lock` held, and only by the owner (every
  /// transition below runs on the thread that acquired the bus); read with
  /// the lock, and by the owner without it (``ownsOpenTransaction``).
  var phase = Phase.idle
  /// Ownership tickets: the next to hand out, and the one whose turn it is.
  private var nextTicket: UInt64 = 0
  private var serving: UInt64 = 0

  deinit { lock.destroy() }

  /// The calling thread as a word (never 0).
  @inline(__always)
  static var currentThread: UInt {
    #if os(Linux)
    return pthread_self()  // an integer there, compared with ==
    #else
    return UInt(bitPattern: pthread_self())
    #endif
  }

  /// Whether the calling thread owns the bus. Exact with or without the
  /// lock: only the calling thread can make the word name itself or stop
  /// naming it.
  @inline(__always)
  var isOwner: Bool { owner.load(ordering: .relaxed) == Gate.currentThread }

  /// Whether the calling thread owns the bus with a transaction open
  /// outside callbacks (writes are ``WriteAccess/free``), read without the
  /// lock: a held-back write (``WriteBehind``) needs nothing more. Sound
  /// because only the owner changes the phase and only the owner gives the
  /// bus up: when the owner word names the calling thread, neither can
  /// change before this thread changes it. Any other thread reads a word
  /// that is not its own and stops there.
  @inline(__always)
  var ownsOpenTransaction: Bool {
    guard owner.load(ordering: .relaxed) == Gate.currentThread else { return false }
    if case .open = phase { return true }
    return false
  }

  /// Waits until no other thread owns the bus and takes it, in ticket order
  /// (a thread that commits back to back cannot starve one waiting to begin,
  /// register or unregister). Returns false when the calling thread already
  /// owned it. Lock held.
  func acquire() -> Bool {
    if isOwner { return false }
    let ticket = nextTicket
    nextTicket &+= 1
    while owner.load(ordering: .relaxed) != 0 || serving != ticket { lock.wait() }
    owner.store(Gate.currentThread, ordering: .relaxed)
    return true
  }

  /// Gives the bus to the next ticket. Lock held.
  func release() {
    owner.store(0, ordering: .relaxed)
    serving &+= 1
    lock.broadcast()
  }

  /// Ends whatever was open and gives the bus up. Lock held.
  func finish() {
    phase = .idle
    release()
  }

  // MARK: - What the phase allows

  /// What a write by the calling thread is subject to now. Lock held.
  @inline(__always)
  var writeAccess: WriteAccess {
    guard isOwner else { return .refused }
    switch phase {
    case .open: return .free
    case .initial(_, let call), .pass(_, let call?): return call.suspended ? .refused : .contract(call.contract.contract)
    case .idle, .pass(_, nil): return .refused
    }
  }

  /// The contract whose read rules apply to the calling thread's reads: the
  /// running callback's, unless a bridge suspended it. Lock held.
  @inline(__always)
  var reader: ContractState? {
    guard isOwner else { return nil }
    switch phase {
    case .initial(_, let call), .pass(_, let call?): return call.suspended ? nil : call.contract.contract
    default: return nil
    }
  }

  /// The callback running on the calling thread, suspended or not. Lock held.
  var running: ContractState? {
    guard isOwner else { return nil }
    switch phase {
    case .initial(_, let call), .pass(_, let call?): return call.contract.contract
    default: return nil
    }
  }

  /// Whether the calling thread has a transaction open or runs a callback:
  /// writes are accepted and a `begin` joins what is open. Lock held.
  var inTransaction: Bool {
    guard isOwner else { return false }
    if case .idle = phase { return false }
    return true
  }

  /// Whether a notification pass runs (on any thread). Lock held.
  var inPass: Bool {
    if case .pass = phase { return true }
    return false
  }

  /// The id of the running pass if the calling thread runs it, else nil.
  /// Lock held.
  var ownPassTransaction: UInt64? {
    guard isOwner, case .pass(let txn, _) = phase, txn != 0 else { return nil }
    return txn
  }

  // MARK: - Transitions

  /// `begin`: opens a transaction or joins what the calling thread has open.
  /// Lock held; the caller has acquired the bus.
  func enter() {
    switch phase {
    case .idle: phase = .open(depth: 1)
    case .open(let d): phase = .open(depth: d + 1)
    case .initial(let outer, var call):
      call.depth += 1
      phase = .initial(outer: outer, call: call)
    case .pass(let txn, var call):
      call?.depth += 1
      phase = .pass(txn: txn, call: call)
    }
  }

  /// What a `commit` does now.
  enum CommitStep {
    /// Not in a transaction of the calling thread.
    case refused
    /// An inner commit: joined what is open; returns 0.
    case joined
    /// The outermost commit: run the pass.
    case outermost
  }

  /// `commit`: closes one `begin`. Lock held.
  func leave() -> CommitStep {
    guard isOwner else { return .refused }
    switch phase {
    case .idle: return .refused
    case .open(let d):
      if d == 1 { return .outermost }
      phase = .open(depth: d - 1)
      return .joined
    case .initial(let outer, var call):
      guard call.depth > 0 else { return .refused }
      call.depth -= 1
      phase = .initial(outer: outer, call: call)
      return .joined
    case .pass(let txn, var call):
      guard let d = call?.depth, d > 0 else { return call == nil ? .joined : .refused }
      call?.depth = d - 1
      phase = .pass(txn: txn, call: call)
      return .joined
    }
  }

  /// Runs `body` as the callback of `contract`, with a fresh frame (its
  /// `begin`s start at depth 0 and end with it). Lock held on entry and on
  /// return; not held while `body` runs.
  @inline(__always)
  func call(_ contract: ContractRef, _ body: () -> Void) {
    let previous = phase
    let frame = CallFrame(contract: contract)
    switch previous {
    case .pass(let txn, _): phase = .pass(txn: txn, call: frame)
    case .open(let d): phase = .initial(outer: d, call: frame)
    case .initial(let outer, _): phase = .initial(outer: outer, call: frame)
    case .idle: preconditionFailure("a callback runs in a transaction or a pass")
    }
    lock.unlock()
    body()
    lock.lock()
    phase = previous
  }

  /// ``call(_:_:)`` for a step of pass `txn`, where no callback runs (the
  /// phase is `.pass(txn, nil)`): it sets the phase without reading and
  /// switching on the previous one (about 10 instructions per call).
  @inline(__always)
  func callInPass(_ contract: ContractRef, _ txn: UInt64, _ body: () -> Void) {
    assert({ if case .pass(txn, nil) = phase { true } else { false } }(), "a pass step runs with no callback running")
    phase = .pass(txn: txn, call: CallFrame(contract: contract))
    lock.unlock()
    body()
    lock.lock()
    phase = .pass(txn: txn, call: nil)
  }

  /// Sets the running pass's id. Lock held.
  func setPassTransaction(_ txn: UInt64) {
    if case .pass(_, let call) = phase { phase = .pass(txn: txn, call: call) }
  }

  /// Suspends or resumes the contract checks of the calling thread's running
  /// callback; returns the previous setting (nil when no callback runs).
  /// Lock held.
  func setSuspended(_ on: Bool) -> Bool? {
    guard isOwner else { return nil }
    switch phase {
    case .initial(let outer, var call):
      let was = call.suspended
      call.suspended = on
      phase = .initial(outer: outer, call: call)
      return was
    case .pass(let txn, var call?):
      let was = call.suspended
      call.suspended = on
      phase = .pass(txn: txn, call: call)
      return was
    default:
      return nil
    }
  }
}
