#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What one notification pass did (see ``Bus/onTrace(_:)``): every
/// contract it scheduled, in the order it reached them, whether it called
/// each, and why.
public struct PassTrace: Sendable, Hashable {
  /// The transaction id (the last committed id for the initial call that
  /// opened a pass and changed nothing).
  public var transaction: UInt64
  /// Every keypath the transaction changed, as written.
  public var changed: [String]
  /// The scheduled contracts, in pass order.
  public var steps: [TraceStep]
  /// The pass's duration in nanoseconds (callbacks included).
  public var durationNS: UInt64
  /// Whether the transaction committed with its id. False for the pass of
  /// an initial call that changed nothing (it gets no id) and for a
  /// transaction a persistence layer refused. A transaction whose own pass
  /// cancelled every change out keeps its id and commits (SPEC §2): true,
  /// with an empty ``changed``.
  public var committed: Bool
}

/// One scheduled contract in a ``PassTrace``.
public struct TraceStep: Sendable, Hashable {
  /// What happened to the contract at its turn.
  public enum Outcome: String, Sendable, Hashable {
    /// Its callback ran (and returned).
    case called
    /// Its callback ran and threw (``TraceStep/failure`` says what).
    case failed
    /// Not called: nothing that scheduled it still counted as changed at
    /// its turn (an earlier contract wrote it back).
    case unchanged
    /// Not called: unregistered before its turn.
    case unregistered
  }

  /// The contract's id.
  public var contract: ContractID
  /// Its name.
  public var name: String
  /// The transaction id its callback received (an initial call that opens
  /// a pass receives the last committed id).
  public var transaction: UInt64
  /// What happened.
  public var outcome: Outcome
  /// The keypaths, as written, that scheduled it ("because"); every
  /// changed keypath for an every-transaction contract; empty for an
  /// initial call.
  public var because: [String]
  /// Whether it was an initial call (NOTIFY_INITIAL).
  public var initial: Bool
  /// The keypaths its callback wrote.
  public var writes: [String]
  /// The writes its callback tried and the bus refused, with the reason
  /// (`CODE: message`).
  public var refused: [String]
  /// What the callback threw, for ``Outcome/failed``.
  public var failure: String?
  /// The callback's duration in nanoseconds (0 when not called).
  public var durationNS: UInt64
}

/// Collects a ``PassTrace`` while a pass runs; exists only when someone
/// listens, so a pass without a listener pays one nil check per step.
final class TraceRecorder {
  private let start = monotonicNS()
  private(set) var steps: [TraceStep] = []
  /// The step whose callback runs (writes and refusals go to it).
  private var running: [Int] = []

  func skipped(_ c: ContractState, _ outcome: TraceStep.Outcome, because: [String], transaction: UInt64) {
    steps.append(TraceStep(contract: c.id, name: c.name, transaction: transaction, outcome: outcome, because: because, initial: false, writes: [], refused: [], failure: nil, durationNS: 0))
  }

  /// Opens the step of a call; returns its index.
  func calling(_ c: ContractState, because: [String], initial: Bool, transaction: UInt64) -> Int {
    steps.append(TraceStep(contract: c.id, name: c.name, transaction: transaction, outcome: .called, because: because, initial: initial, writes: [], refused: [], failure: nil, durationNS: 0))
    running.append(steps.count - 1)
    return steps.count - 1
  }

  func called(_ i: Int, durationNS: UInt64, failure: String?) {
    steps[i].durationNS = durationNS
    if let failure {
      steps[i].outcome = .failed
      steps[i].failure = failure
    }
    if running.last == i { running.removeLast() }
  }

  func wrote(_ keypath: String) {
    if let i = running.last { steps[i].writes.append(keypath) }
  }

  func refused(_ keypath: String, _ error: OrdoError) {
    if let i = running.last { steps[i].refused.append("\(keypath): \(error)") }
  }

  func finish(_ txn: UInt64, changed: [String], committed: Bool) -> PassTrace {
    PassTrace(transaction: txn, changed: changed, steps: steps, durationNS: monotonicNS() - start, committed: committed)
  }
}

/// Nanoseconds of the monotonic clock.
func monotonicNS() -> UInt64 {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
