// Differential testing: random scenarios run through the model (which writes
// every expectation into them) and then through the real bus by the
// conformance runner, which must meet every expectation: each call's order,
// changed set and transaction id, each error code, each value and counter.
//
// Environment:
//   ORDO_DIFF_SEQUENCES  number of random sequences (default 100)
//   ORDO_DIFF_SEED       first seed (default 1); sequence i uses seed + i
//   ORDO_DIFF_STEPS      top-level steps per sequence before the final reads (default 60)
//
// On disagreement the test prints the seed and a minimized scenario in the
// conformance format (also written to $TMPDIR/ordo-differential-<seed>.json)
// and fails. Reproduce with ORDO_DIFF_SEED=<seed> ORDO_DIFF_SEQUENCES=1.

import Foundation
import Ordo
import OrdoConformance
import Testing

enum Env {
  static func int(_ name: String, _ fallback: Int) -> Int {
    ProcessInfo.processInfo.environment[name].flatMap { Int($0) } ?? fallback
  }
}

enum Differential {
  /// Runs the scenario through the model and then the real bus; the
  /// runner's first difference, or nil when they agree (or the model cannot
  /// run it).
  static func disagreement(_ steps: [GStep], name: String = "differential") -> String? {
    guard let annotated = try? Model.annotate(steps) else { return nil }
    return disagreement(annotated: annotated, name: name)
  }

  static func disagreement(annotated: [GStep], name: String) -> String? {
    let text = JSONText.scenario(name: name, about: "generated", steps: annotated)
    do {
      let scenario = try Scenario(json: Data(text.utf8), source: name)
      return ConformanceRunner.run(scenario)
    } catch {
      return "scenario does not parse: \(error)"
    }
  }

  // MARK: - Paths in a step tree

  static func paths(_ steps: [GStep]) -> [[Int]] {
    var out: [[Int]] = []
    func walk(_ s: GStep, _ p: [Int]) {
      out.append(p)
      for (j, a) in s.onNotify.enumerated() { walk(a, p + [j]) }
    }
    for (i, s) in steps.enumerated() { walk(s, [i]) }
    return out
  }

  static func modify(_ steps: [GStep], at path: [Int], _ f: (inout [GStep], Int) -> Void) -> [GStep] {
    var steps = steps
    if path.count == 1 {
      f(&steps, path[0])
    } else {
      steps[path[0]].onNotify = modify(steps[path[0]].onNotify, at: Array(path.dropFirst()), f)
    }
    return steps
  }

  static func step(_ steps: [GStep], at path: [Int]) -> GStep {
    path.count == 1 ? steps[path[0]] : step(steps[path[0]].onNotify, at: Array(path.dropFirst()))
  }

  // MARK: - Shrinking

  /// Deletes steps, actions and contract details while the scenario still
  /// fails.
  static func shrink(_ steps: [GStep], fails: ([GStep]) -> Bool) -> [GStep] {
    var best = steps
    var progress = true
    while progress {
      progress = false
      // Chunks of top-level steps, large to small.
      var chunk = max(1, best.count / 2)
      while chunk >= 1 {
        var i = best.count - chunk
        while i >= 0 {
          var candidate = best
          candidate.removeSubrange(i..<min(i + chunk, candidate.count))
          if fails(candidate) {
            best = candidate
            progress = true
          }
          i -= chunk
          if i + chunk > best.count { i = best.count - chunk }
        }
        chunk /= 2
      }
      // Single actions, innermost and last first.
      for p in paths(best).reversed() where p.count > 1 {
        guard let candidate = removing(best, p) else { continue }
        if fails(candidate) {
          best = candidate
          progress = true
        }
      }
      // Contract details.
      for p in paths(best).reversed() {
        let s = step(best, at: p)
        guard s.op == "register" else { continue }
        var variants: [(inout GStep) -> Void] = []
        for r in s.reads.indices.reversed() { variants.append { $0.reads.remove(at: r) } }
        for w in s.writes.indices.reversed() { variants.append { $0.writes.remove(at: w) } }
        if s.priority != nil { variants.append { $0.priority = nil } }
        if s.notifyInitial { variants.append { $0.notifyInitial = false } }
        for v in variants {
          let current = step(best, at: p)
          guard current.op == "register" else { break }
          let candidate = modify(best, at: p) { list, i in v(&list[i]) }
          if fails(candidate) {
            best = candidate
            progress = true
          }
        }
      }
    }
    return best
  }

  static func removing(_ steps: [GStep], _ path: [Int]) -> [GStep]? {
    func valid(_ s: [GStep], _ p: [Int]) -> Bool {
      guard let i = p.first, i < s.count else { return false }
      return p.count == 1 || valid(s[i].onNotify, Array(p.dropFirst()))
    }
    guard valid(steps, path) else { return nil }
    return modify(steps, at: path) { list, i in list.remove(at: i) }
  }

  // MARK: - Statistics

  struct Tally {
    var sequences = 0
    var skipped = 0
    var steps = 0
    var calls = 0
    var transactions: UInt64 = 0
    var errors: [String: Int] = [:]

    mutating func add(_ annotated: [GStep]) {
      sequences += 1
      func walk(_ s: GStep) {
        steps += 1
        if let e = s.expectError { errors[e, default: 0] += 1 }
        if let c = s.expectCalls { calls += c.count }
        if let t = s.expectTxn { transactions = max(transactions, t) }
        s.onNotify.forEach(walk)
      }
      annotated.forEach(walk)
    }

    var summary: String {
      "\(sequences) sequences (\(skipped) skipped), \(steps) steps and actions, \(calls) contract calls; errors: "
        + errors.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
  }
}

@Suite("Differential: model vs bus")
struct DifferentialTests {
  @Test("random sequences agree with the model")
  func randomSequences() throws {
    let count = Env.int("ORDO_DIFF_SEQUENCES", 100)
    let firstSeed = UInt64(Env.int("ORDO_DIFF_SEED", 1))
    let length = Env.int("ORDO_DIFF_STEPS", 60)
    var tally = Differential.Tally()
    let started = Date()
    for i in 0..<count {
      let seed = firstSeed + UInt64(i)
      var gen = Generator(seed: seed)
      guard let steps = gen.make(length: length), let annotated = try? Model.annotate(steps) else {
        tally.skipped += 1
        continue
      }
      tally.add(annotated)
      if ProcessInfo.processInfo.environment["ORDO_DIFF_DUMP"] != nil {
        print(JSONText.scenario(name: "seed-\(seed)", about: "generated", steps: annotated))
      }
      guard let failure = Differential.disagreement(annotated: annotated, name: "seed-\(seed)") else { continue }
      let minimized = Differential.shrink(steps) { Differential.disagreement($0) != nil }
      let final = (try? Model.annotate(minimized)) ?? minimized
      let text = JSONText.scenario(
        name: "differential-seed-\(seed)", about: "Minimized from differential seed \(seed): \(failure)", steps: final)
      let file = FileManager.default.temporaryDirectory.appendingPathComponent("ordo-differential-\(seed).json")
      try? Data(text.utf8).write(to: file)
      print("""
        DIFFERENTIAL FAILURE at seed \(seed) (reproduce: ORDO_DIFF_SEED=\(seed) ORDO_DIFF_SEQUENCES=1)
        full sequence: \(failure)
        minimized (\(Differential.disagreement(final, name: "minimized") ?? "?")):
        \(text)
        written to \(file.path)
        """)
      Issue.record("model and bus disagree at seed \(seed): \(failure)")
      return
    }
    let seconds = Date().timeIntervalSince(started)
    print("differential: \(tally.summary); \(String(format: "%.1f", seconds)) s")
    #expect(tally.skipped * 10 <= count, "too many sequences the model could not run")
    if count >= 100 {
      // The generator must reach the rules it is meant to test.
      for code in ["STABILITY", "CONTRACT_VIOLATION", "ORDER_CONFLICT", "CYCLE", "NO_TRANSACTION", "NOT_FOUND", "DUPLICATE_NAME", "INVALID_ARGUMENT"] {
        #expect(tally.errors[code, default: 0] > 0, "no \(code) in \(count) sequences")
      }
    }
  }
}

extension Differential {
  /// Minimal parser of conformance JSON into GSteps (with expectations).
  static func parse(_ any: Any) throws -> GStep {
    guard let o = any as? [String: Any], let op = o["op"] as? String else { throw Unsupported(description: "bad step") }
    var s = GStep(op, key: o["key"] as? String, name: o["name"] as? String)
    if let v = o["value"] { s.value = try parseValue(v) }
    s.reads = o["reads"] as? [String] ?? []
    s.writes = o["writes"] as? [String] ?? []
    s.priority = (o["priority"] as? NSNumber)?.int32Value
    s.notifyInitial = (o["flags"] as? [String] ?? []).contains("notify_initial")
    s.onlyTxn = (o["only_txn"] as? NSNumber)?.uint64Value
    s.counter = (o["counter"] as? NSNumber)?.uint64Value
    s.onNotify = try (o["on_notify"] as? [Any] ?? []).map(parse)
    s.expectError = o["expect_error"] as? String
    if op == "get", let v = o["expect"] { s.expectValue = try parseValue(v) }
    if op == "counter" { s.expectCounter = (o["expect"] as? NSNumber)?.uint64Value }
    if op == "commit" {
      if let n = o["expect_txn"] as? NSNumber { s.expectTxn = n.uint64Value }
      if o["expect_txn"] as? String == "nonzero" { s.expectTxn = UInt64.max }
    }
    if let calls = o["expect_calls"] as? [[String: Any]] {
      s.expectCalls = calls.map {
        Call(
          contract: $0["contract"] as? String ?? "", changed: ($0["changed"] as? [String]) ?? ["*unchecked*"],
          txn: ($0["txn"] as? NSNumber)?.uint64Value ?? UInt64.max)
      }
    }
    return s
  }

  static func parseValue(_ any: Any) throws -> Value {
    guard let o = any as? [String: Any], let (type, raw) = o.first else { throw Unsupported(description: "bad value") }
    switch type {
    case "bool": if let n = raw as? NSNumber { return .bool(n.boolValue) }
    case "int64": if let n = raw as? NSNumber { return .int64(n.int64Value) }
    case "double": if let n = raw as? NSNumber { return .double(n.doubleValue) }
    case "string": if let s = raw as? String { return .string(s) }
    case "bytes":
      if let s = raw as? String {
        var bytes: [UInt8] = []
        var i = s.startIndex
        while i < s.endIndex {
          let j = s.index(i, offsetBy: 2)
          bytes.append(UInt8(s[i..<j], radix: 16) ?? 0)
          i = j
        }
        return .bytes(bytes)
      }
    default: break
    }
    throw Unsupported(description: "bad value")
  }

  /// Compares the model's outcomes with a curated scenario's expectations;
  /// the differences.
  static func compareModel(with steps: [GStep]) -> [String] {
    let m = Model()
    var problems: [String] = []
    for (i, s) in steps.enumerated() {
      do { try m.perform(s, path: [i]) } catch { return ["model cannot run step \(i + 1): \(error)"] }
    }
    for p in paths(steps) {
      let s = step(steps, at: p)
      for o in m.outcomes[p] ?? [] {
        let at = "step \(p.map { String($0 + 1) }.joined(separator: "/")) (\(s.op) \(s.key ?? s.name ?? ""))"
        if o.error != s.expectError { problems.append("\(at): model error \(o.error ?? "none"), file \(s.expectError ?? "none")") }
        if let v = s.expectValue, o.error == nil, !Model.same(v, o.value) { problems.append("\(at): model value \(String(describing: o.value)), file \(v)") }
        if let c = s.expectCounter, o.error == nil, c != o.counter { problems.append("\(at): model counter \(o.counter ?? 0), file \(c)") }
        if let t = s.expectTxn, o.error == nil {
          if t == UInt64.max ? o.txn == 0 : t != o.txn { problems.append("\(at): model txn \(o.txn ?? 0), file \(t)") }
        }
        if let want = s.expectCalls, let got = o.calls {
          let ok = want.count == got.count && zip(want, got).allSatisfy { w, g in
            w.contract == g.contract && (w.changed == ["*unchecked*"] || Set(w.changed) == Set(g.changed))
              && (w.txn == UInt64.max || w.txn == g.txn)
          }
          if !ok { problems.append("\(at): model calls \(got), file \(want)") }
        }
      }
    }
    return problems
  }

  static var repositoryRoot: URL {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
  }
}

@Suite("Differential: the model itself")
struct ModelTests {
  /// The model must agree with the hand-written scenarios, or it checks
  /// nothing.
  @Test("the model meets every curated conformance scenario")
  func curatedScenarios() throws {
    var dirs = [Differential.repositoryRoot.appendingPathComponent("Tests/Conformance")]
    let shared = Differential.repositoryRoot.deletingLastPathComponent().appendingPathComponent("shared/conformance")
    if FileManager.default.fileExists(atPath: shared.path) { dirs.append(shared) }
    var checked = 0
    for dir in dirs {
      let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".json") }.sorted()
      for f in files {
        let data = try Data(contentsOf: dir.appendingPathComponent(f))
        guard let o = try JSONSerialization.jsonObject(with: data) as? [String: Any], let raw = o["steps"] as? [Any] else {
          Issue.record("\(f): not a scenario")
          continue
        }
        // Scenarios with a schema (SPEC §14) have their own model
        // (SchemaDifferential.swift).
        if o["schema"] != nil { continue }
        let steps = try raw.map(Differential.parse)
        let problems = Differential.compareModel(with: steps)
        #expect(problems.isEmpty, "\(dir.lastPathComponent)/\(f): \(problems.joined(separator: "; "))")
        checked += 1
      }
    }
    #expect(checked >= 8)
  }

  @Test("naive pattern relations on hand-picked cases")
  func naiveRelations() {
    #expect(Naive.affects(write: "doc", read: "doc.title"))
    #expect(!Naive.affects(write: "doc.title", read: "doc"))
    #expect(Naive.affects(write: "doc.items", read: "doc.items.*.name"))
    #expect(Naive.affects(write: "doc.items.3.name", read: "doc.items.*.name"))
    #expect(!Naive.affects(write: "doc.items.3.size", read: "doc.items.*.name"))
    #expect(Naive.affects(write: "doc.items", read: "doc.items.**"))
    #expect(Naive.affects(write: "doc", read: "doc.items.**"))
    #expect(Naive.affects(write: "anything.at.all", read: "**"))
    #expect(Naive.mayAffect(writer: "g", reader: "g.a.*"))
    #expect(Naive.mayAffect(writer: "x.*", reader: "x.y.z"))
    #expect(!Naive.mayAffect(writer: "x.y.z", reader: "x.y"))
    #expect(Naive.coversTree("k.**", "k"))
    #expect(!Naive.coversTree("k.*", "k"))
    #expect(!Naive.coversTree("k.a.**", "k"))
    #expect(Naive.isPattern("**") && !Naive.isPattern("**.x") && !Naive.isKeypath("x.*"))
  }
}
