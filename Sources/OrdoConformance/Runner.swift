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

  /// How a run reaches keypaths.
  public enum Access: Sendable {
    /// Every keypath as a string.
    case strings
    /// `set`, `touch`, `remove`, `remove_tree`, `get` and `counter` resolve
    /// the keypath into a ``Handle`` and go through it (SPEC §13).
    case handles
  }

  /// Runs one scenario; returns nil when it passes, or the first difference.
  public static func run(_ scenario: Scenario, access: Access = .strings) -> String? {
    record(scenario, access: access).failure
  }

  /// Runs one scenario; returns the first difference (nil when it passes)
  /// and every contract call made, as `name [changed] txn` lines.
  public static func record(_ scenario: Scenario, access: Access) -> (failure: String?, calls: [String]) {
    let state = RunState(bus: scenario.makeBus(), access: access)
    do {
      for step in scenario.steps {
        try state.perform(step, inCallback: false)
      }
    } catch {
      return ("\(error)", state.allCalls)
    }
    return (nil, state.allCalls)
  }

  /// Runs a scenario with a trace handler (``Bus/onTrace(_:)``) and checks
  /// the traces against the calls the contracts saw: the traced calls, in
  /// order, are the calls made in passes (the others are initial calls made
  /// inside an open transaction, outside any pass, with an empty list);
  /// each traced call's transaction is the one the contract received and
  /// its "because" holds every keypath the contract was told of. Returns
  /// nil, or what differed.
  public static func traceCheck(_ scenario: Scenario) -> String? {
    let bus = scenario.makeBus()
    let traces = TraceLog()
    bus.onTrace { traces.add($0) }
    let state = RunState(bus: bus, access: .strings)
    do {
      for step in scenario.steps { try state.perform(step, inCallback: false) }
    } catch {
      return "\(error)"
    }
    let calls = state.recorded
    var next = 0
    for trace in traces.all {
      for s in trace.steps where s.outcome == .called || s.outcome == .failed {
        // Calls between two traced ones are initial calls outside passes.
        while next < calls.count, calls[next].contract != s.name || calls[next].txn != s.transaction {
          if !calls[next].changed.isEmpty { return "call \(next) (\(calls[next].contract) txn \(calls[next].txn)) made in a pass is missing from the trace" }
          next += 1
        }
        guard next < calls.count else { return "traced call of \(s.name) in transaction \(trace.transaction) was not made" }
        let told = Set(calls[next].changed)
        if !s.initial && !told.isSubset(of: Set(s.because)) {
          return "\(s.name) in transaction \(trace.transaction) was told \(calls[next].changed) but the trace says because \(s.because)"
        }
        if s.initial && !told.isEmpty { return "\(s.name)'s initial call in transaction \(trace.transaction) was told \(calls[next].changed)" }
        next += 1
      }
    }
    for c in calls[next...] where !c.changed.isEmpty {
      return "call of \(c.contract) in transaction \(c.txn) made in a pass is missing from the trace"
    }
    return nil
  }

  /// Runs a scenario through keypath strings and through handles: both must
  /// pass and make the same calls. Returns nil, or what differed.
  public static func runBothWays(_ scenario: Scenario) -> String? {
    let strings = record(scenario, access: .strings)
    if let f = strings.failure { return "through keypath strings: \(f)" }
    let handles = record(scenario, access: .handles)
    if let f = handles.failure { return "through handles: \(f)" }
    if strings.calls != handles.calls {
      return "the calls through handles differ from those through strings:\n  strings: \(strings.calls)\n  handles: \(handles.calls)"
    }
    return nil
  }

  /// Runs every scenario of the directories; returns the outcomes.
  public static func run(directories: [String]) throws -> [Outcome] {
    var out: [Outcome] = []
    for dir in directories {
      for s in try Scenario.load(directory: dir) {
        out.append(Outcome(name: s.name, source: s.source, failure: runBothWays(s)))
      }
    }
    return out
  }
}

/// Traces collected by a run.
final class TraceLog: @unchecked Sendable {
  private let lock = NSLock()
  private var traces: [PassTrace] = []
  func add(_ t: PassTrace) { lock.withLock { traces.append(t) } }
  var all: [PassTrace] { lock.withLock { traces } }
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
  /// The owners the scenario made (`owner`), by name.
  var owners: [String: Owner] = [:]
  let access: ConformanceRunner.Access

  init(bus: Bus, access: ConformanceRunner.Access = .strings) {
    self.bus = bus
    self.access = access
  }

  /// Every call recorded so far.
  var recorded: [RecordedCall] { lock.withLock { calls } }

  /// Every call recorded so far, one line each.
  var allCalls: [String] {
    lock.withLock { calls.map { "\($0.contract) \($0.changed) \($0.txn)" } }
  }

  /// The owner a step names (`name`), made by an earlier `owner` step.
  private func owner(_ step: Step) throws -> Owner {
    let name = try step.string("name")
    guard let o = owners[name] else { throw ScenarioError("\(step.location): no owner named \"\(name)\" was made by this scenario") }
    return o
  }

  /// The handle of a keypath, when this run goes through handles.
  private func handle(_ key: String) throws -> Handle? {
    access == .handles ? try bus.resolve(key) : nil
  }

  /// ``handle(_:)`` for a read: a keypath its schema does not declare has
  /// no handle (resolving it is refused), so it is read by its string.
  private func readHandle(_ key: String) throws -> Handle? {
    do { return try handle(key) } catch let e as OrdoError where e.code == .schema { return nil }
  }

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
      if let want = (step.fields["expect_stored"] as? NSNumber)?.boolValue, try bus.isStored(try step.string("key")) != want {
        throw ScenarioError("\(step.location): expected a \(want ? "stored value" : "default"), got \(want ? "a default" : "a stored value")")
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
      let key = try step.string("key")
      let v = try step.value("value")
      if let h = try handle(key) { try bus.set(h, v) } else { try bus.set(key, v) }
      return nil
    case "touch":
      let key = try step.string("key")
      if let h = try handle(key) { try bus.touch(h) } else { try bus.touch(key) }
      return nil
    case "remove":
      let key = try step.string("key")
      if let h = try handle(key) { try bus.remove(h) } else { try bus.remove(key) }
      return nil
    case "remove_tree":
      let key = try step.string("key")
      if let h = try handle(key) { try bus.removeTree(h) } else { try bus.removeTree(key) }
      return nil
    case "get":
      let key = try step.string("key")
      let v = try readHandle(key).map { try bus.value($0) } ?? bus.value(key)
      guard let v else { throw OrdoError(.notFound, "\"\(key)\" holds no value") }
      return v
    case "counter":
      let key = try step.string("key")
      if let h = try readHandle(key) { return try bus.counter(h) }
      return try bus.counter(key)
    case "expect":
      guard let n = (step.fields["counter"] as? NSNumber)?.uint64Value else {
        throw ScenarioError("\(step.location): expect needs a numeric \"counter\"")
      }
      try bus.expect(try step.string("key"), counter: n)
      return nil
    case "owner":
      let name = try step.string("name")
      owners[name] = Owner(bus, name: name)
      return nil
    case "begin_owned":
      try bus.begin(owner: try owner(step))
      return nil
    case "release":
      try owner(step).release()
      return nil
    default:
      throw ScenarioError("\(step.location): unknown op")
    }
  }
}
