import Foundation
import Ordo

/// Runs conformance scenarios against a fresh ``Bus`` each.
public enum ConformanceRunner {
  /// The outcome of one scenario.
  public struct Outcome: Sendable {
    /// The scenario's name.
    public let name: String
    /// Where it came from.
    public let source: String
    /// nil when it passed; otherwise what differed.
    public let failure: String?
  }

  /// Runs one scenario; returns nil when it passes, or the first difference.
  public static func run(_ scenario: Scenario) -> String? {
    let state = RunState(bus: Bus())
    do {
      for step in scenario.steps {
        try state.perform(step, inCallback: false)
      }
    } catch {
      return "\(error)"
    }
    return nil
  }

  /// Runs every scenario of the directories; returns the outcomes.
  public static func run(directories: [String]) throws -> [Outcome] {
    var out: [Outcome] = []
    for dir in directories {
      for s in try Scenario.load(directory: dir) {
        out.append(Outcome(name: s.name, source: s.source, failure: run(s)))
      }
    }
    return out
  }
}

/// A recorded contract call.
struct RecordedCall: Sendable {
  let contract: String
  let changed: [String]
  let txn: UInt64
}

/// The mutable state of one scenario run. Callbacks run synchronously on the
/// committing thread, so plain storage under a lock is enough.
final class RunState: @unchecked Sendable {
  let bus: Bus
  private let lock = NSLock()
  private var calls: [RecordedCall] = []
  /// Failures of on_notify actions, reported by the enclosing step.
  private var actionFailures: [String] = []
  var handles: [String: ContractHandle] = [:]

  init(bus: Bus) { self.bus = bus }

  func record(_ call: RecordedCall) {
    lock.withLock { calls.append(call) }
  }

  func fail(_ message: String) {
    lock.withLock { actionFailures.append(message) }
  }

  /// Runs a step: checks its error expectation, and for top-level steps the
  /// calls it caused and the failures of actions inside them.
  func perform(_ step: Step, inCallback: Bool) throws {
    let before = lock.withLock { calls.count }
    let failuresBefore = lock.withLock { actionFailures.count }
    var result: Result<Any?, OrdoError>
    do {
      result = .success(try execute(step))
    } catch let e as OrdoError {
      result = .failure(e)
    }
    switch (result, step.expectError) {
    case (.failure(let e), nil):
      throw ScenarioError("\(step.location): expected success, got \(e.code.name): \(e.message)")
    case (.failure(let e), let want?) where e.code.name != want:
      throw ScenarioError("\(step.location): expected \(want), got \(e.code.name): \(e.message)")
    case (.success, let want?):
      throw ScenarioError("\(step.location): expected \(want), but the step succeeded")
    default:
      break
    }
    if case .success(let got) = result { try checkResult(step, got) }
    guard !inCallback else { return }
    let failures = lock.withLock { Array(actionFailures[failuresBefore...]) }
    if let first = failures.first {
      throw ScenarioError("\(step.location): an on_notify action failed: \(first)")
    }
    if let want = step.expectCalls {
      let got = lock.withLock { Array(calls[before...]) }
      try compare(want, got, at: step.location)
    }
  }

  private func compare(_ want: [ExpectedCall], _ got: [RecordedCall], at location: String) throws {
    func render(_ calls: [RecordedCall]) -> String {
      "[" + calls.map { "\($0.contract) \($0.changed) txn \($0.txn)" }.joined(separator: ", ") + "]"
    }
    guard want.count == got.count else {
      throw ScenarioError("\(location): expected \(want.count) calls \(want.map(\.contract)), got \(got.count): \(render(got))")
    }
    for (i, (w, g)) in zip(want, got).enumerated() {
      if w.contract != g.contract {
        throw ScenarioError("\(location): call \(i + 1) should be \"\(w.contract)\", got \"\(g.contract)\"; all calls: \(render(got))")
      }
      if let changed = w.changed, changed != Set(g.changed) {
        throw ScenarioError("\(location): call \(i + 1) (\(w.contract)) should receive changed \(changed.sorted()), got \(g.changed.sorted())")
      }
      if let txn = w.txn, txn != g.txn {
        throw ScenarioError("\(location): call \(i + 1) (\(w.contract)) should receive txn \(txn), got \(g.txn)")
      }
    }
  }

  private func checkResult(_ step: Step, _ got: Any?) throws {
    switch step.op {
    case "get":
      let want = try step.value("expect")
      guard let v = got as? Value, v == want else {
        throw ScenarioError("\(step.location): expected \(want), got \(got.map { "\($0)" } ?? "nothing")")
      }
    case "counter":
      guard let want = (step.fields["expect"] as? NSNumber)?.uint64Value else {
        throw ScenarioError("\(step.location): counter needs a numeric \"expect\"")
      }
      if got as? UInt64 != want { throw ScenarioError("\(step.location): expected counter \(want), got \(got ?? "nothing")") }
    case "commit":
      guard let raw = step.fields["expect_txn"] else { return }
      let txn = got as? UInt64 ?? 0
      if let s = raw as? String {
        guard s == "nonzero" else { throw ScenarioError("\(step.location): expect_txn is a number or \"nonzero\"") }
        if txn == 0 { throw ScenarioError("\(step.location): expected a nonzero transaction id, got 0") }
      } else if let n = (raw as? NSNumber)?.uint64Value, n != txn {
        throw ScenarioError("\(step.location): expected transaction id \(n), got \(txn)")
      }
    default:
      break
    }
  }

  /// Performs the step's operation on the bus.
  private func execute(_ step: Step) throws -> Any? {
    switch step.op {
    case "register":
      let name = try step.string("name")
      var flags: ContractFlags = []
      for f in try step.strings("flags") {
        guard f == "notify_initial" else { throw ScenarioError("\(step.location): unknown flag \"\(f)\"") }
        flags.insert(.notifyInitial)
      }
      let priority = (step.fields["priority"] as? NSNumber)?.int32Value
      let actions = step.onNotify
      let handle = try bus.register(
        name: name, reads: try step.strings("reads"), writes: try step.strings("writes"), priority: priority, flags: flags
      ) { [unowned self] note in
        self.record(RecordedCall(contract: name, changed: Array(note.changed), txn: note.transaction))
        for action in actions where action.onlyTxn == nil || action.onlyTxn == note.transaction {
          do { try self.perform(action, inCallback: true) } catch { self.fail("\(error)") }
        }
      }
      handles[name] = handle
      return nil
    case "unregister":
      let name = try step.string("name")
      guard let h = handles[name] else {
        throw OrdoError(.notFound, "no contract named \"\(name)\" was registered by this scenario")
      }
      try h.unregister()
      handles[name] = nil
      return nil
    case "begin":
      bus.begin()
      return nil
    case "commit":
      return try bus.commit()
    case "rollback":
      try bus.rollback()
      return nil
    case "set":
      try bus.set(try step.string("key"), try step.value("value"))
      return nil
    case "touch":
      try bus.touch(try step.string("key"))
      return nil
    case "remove":
      try bus.remove(try step.string("key"))
      return nil
    case "remove_tree":
      try bus.removeTree(try step.string("key"))
      return nil
    case "get":
      let k = try step.string("key")
      guard let v = try bus.value(k) else { throw OrdoError(.notFound, "\"\(k)\" holds no value") }
      return v
    case "counter":
      return try bus.counter(try step.string("key"))
    default:
      throw ScenarioError("\(step.location): unknown op")
    }
  }
}
