#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

import Synchronization

/// A callback running on the owning thread: its contract, the nesting of
/// its own `begin`/`commit` pairs (they join what is open), and whether a
/// bridge has suspended its contract checks while it waits for a peer.
struct CallFrame {
  /// Named by its pass state, not retained: the pass's schedule, or
  /// `register` for an initial call, holds the contract for the whole call.
  /// Unretained: docs/reliability.md, "Unretained references", row "the pass's schedule and the running contract".
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
  /// ``open`` inside a `begin(owner:)`: its sets belong to `scope.owner`
  /// (SPEC §15). A case of its own, so that a plain write tests the phase
  /// for ``open`` alone and pays nothing for owners.
  case openOwned(depth: Int, scope: OwnedScope)
  /// The notification pass of transaction `txn`, with the callback that
  /// runs now, if any. `txn` is 0 during the initial call that opens a pass
  /// of its own (registration outside any transaction): the pass gets its
  /// id when that call has changed something.
  case pass(txn: UInt64, call: CallFrame?)
}

extension Phase {
  /// The depth of the open transaction outside callbacks, owned or not.
  var openDepth: Int? {
    switch self {
    case .open(let d), .openOwned(let d, _): d
    case .idle, .pass: nil
    }
  }
}

/// The `begin(owner:)` whose writes the open transaction makes now: the
/// owner's id, and the depth of that `begin` (its `commit` ends the scope).
struct OwnedScope {
  var owner: UInt64
  var depth: Int
}

/// What a write by the calling thread is subject to.
enum WriteAccess {
  /// The owner's open transaction, outside callbacks: no contract rules.
  case free
  /// The owner's open transaction inside a `begin(owner:)`: no contract
  /// rules; what it stores belongs to the owner with this id.
  case owned(UInt64)
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
  /// The `begin(owner:)` scopes of the open transaction, innermost last
  /// (the phase carries the innermost). Owner's thread, lock held (so
  /// exclusivity is unchecked: every transaction's end reads it; see
  /// ``Ownership``).
  @exclusivity(unchecked) private var ownedScopes: [OwnedScope] = []
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

  /// Takes the bus when no thread owns it or waits for it; returns false,
  /// taking nothing, otherwise. Lock held.
  func tryAcquire() -> Bool {
    guard owner.load(ordering: .relaxed) == 0, serving == nextTicket else { return false }
    nextTicket &+= 1
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
    if !ownedScopes.isEmpty { ownedScopes.removeAll() }
    release()
  }

  // MARK: - What the phase allows

  /// What a write by the calling thread is subject to now. Lock held.
  @inline(__always)
  var writeAccess: WriteAccess {
    guard isOwner else { return .refused }
    switch phase {
    case .open: return .free
    case .openOwned(_, let scope): return .owned(scope.owner)
    case .pass(_, let call?): return call.suspended ? .refused : .contract(call.contract.contract)
    case .idle, .pass(_, nil): return .refused
    }
  }

  /// The contract whose read rules apply to the calling thread's reads: the
  /// running callback's, unless a bridge suspended it. Lock held.
  @inline(__always)
  var reader: ContractState? {
    guard isOwner else { return nil }
    switch phase {
    case .pass(_, let call?): return call.suspended ? nil : call.contract.contract
    default: return nil
    }
  }

  /// The callback running on the calling thread, suspended or not. Lock held.
  var running: ContractState? {
    guard isOwner else { return nil }
    switch phase {
    case .pass(_, let call?): return call.contract.contract
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
    case .openOwned(let d, let scope): phase = .openOwned(depth: d + 1, scope: scope)
    case .pass(let txn, var call):
      call?.depth += 1
      phase = .pass(txn: txn, call: call)
    }
  }

  /// Makes the writes of the calling thread's open transaction, from now
  /// to the commit that closes its innermost `begin`, belong to `owner`.
  /// Returns false outside an open transaction (in a callback). Lock held.
  func own(_ owner: UInt64) -> Bool {
    guard isOwner, let d = phase.openDepth else { return false }
    let scope = OwnedScope(owner: owner, depth: d)
    ownedScopes.append(scope)
    phase = .openOwned(depth: d, scope: scope)
    return true
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
    case .openOwned(let d, let scope):
      if d == 1 { return .outermost }
      guard scope.depth == d else {
        phase = .openOwned(depth: d - 1, scope: scope)
        return .joined
      }
      // The commit of a `begin(owner:)` ends its scope; the scope it was
      // nested in, if any, goes on.
      ownedScopes.removeLast()
      phase = ownedScopes.last.map { .openOwned(depth: d - 1, scope: $0) } ?? .open(depth: d - 1)
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
    guard case .pass(let txn, _) = previous else { preconditionFailure("a callback runs in a pass") }
    phase = .pass(txn: txn, call: CallFrame(contract: contract))
    withLockReleased(body)
    phase = previous
  }

  /// ``call(_:_:)`` for a step of pass `txn`, where no callback runs (the
  /// phase is `.pass(txn, nil)`): it sets the phase without reading and
  /// switching on the previous one (about 10 instructions per call).
  @inline(__always)
  func callInPass(_ contract: ContractRef, _ txn: UInt64, _ body: () -> Void) {
    assert({ if case .pass(txn, nil) = phase { true } else { false } }(), "a pass step runs with no callback running")
    phase = .pass(txn: txn, call: CallFrame(contract: contract))
    withLockReleased(body)
    phase = .pass(txn: txn, call: nil)
  }

  /// Runs `body` with the lock let go: a call out of a section under the
  /// lock (a callback, a handler). Lock held on entry and on return.
  @inline(__always)
  func withLockReleased(_ body: () -> Void) {
    lock.unlock()
    body()
    lock.lock()
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
