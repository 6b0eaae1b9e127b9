#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What a bus does with a callback's failure besides counting it
/// (``Bus/failurePolicy``).
public enum FailurePolicy: Sendable, Hashable {
  /// Tell the ``Bus/onFailure(_:)`` handler, or, without one, write a line
  /// to standard error (at most 10 lines a second; the next line written
  /// says how many were left out). The default.
  case report
  /// Report as ``report`` does, then stop the program in a debug build of
  /// Ordo (an assertion failure): a failing contract is a bug to fix at
  /// once during development. A release build only reports.
  case trapInDebug
}

/// The standard-error report of failures with no handler, rate-limited.
/// Guarded by the bus's lock.
struct FailureLog {
  /// The most lines written in one second.
  static let linesPerSecond = 10
  private var windowStart: UInt64 = 0
  private var written = 0
  private var leftOut = 0

  /// The text to write for `failure` now (with, first, the count of those
  /// left out before it), or nil when this second's lines are used up.
  mutating func lines(for failure: ContractFailure, at now: UInt64) -> String? {
    if now &- windowStart >= 1_000_000_000 {
      windowStart = now
      written = 0
    }
    guard written < Self.linesPerSecond else {
      leftOut += 1
      return nil
    }
    written += 1
    var text = ""
    if leftOut > 0 {
      text = "ordo: \(leftOut) more callback failure\(leftOut == 1 ? " was" : "s were") not written (at most \(Self.linesPerSecond) a second)\n"
      leftOut = 0
    }
    return text + "ordo: contract \"\(failure.name)\" failed in transaction \(failure.transaction): \(failure.message) (set Bus.onFailure to handle failures)\n"
  }

  /// Writes `text` to standard error.
  static func emit(_ text: String) {
    var text = text
    text.withUTF8 { buf in _ = write(2, buf.baseAddress, buf.count) }
  }
}
