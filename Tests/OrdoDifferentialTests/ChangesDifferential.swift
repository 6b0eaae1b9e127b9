// Differential testing of resynchronization (SPEC §10): random scenarios run
// step by step through the model and through the real bus (the conformance
// runner's step executor, on a bus this test holds), and after every
// top-level step `changes(since:, patterns)` — values, tombstones, counters,
// the last id — must agree for several `since` values and patterns,
// `since` beyond the last id must fail with INVALID_ARGUMENT on both, and
// every keypath's changed-at must agree.
//
// Environment: ORDO_DIFF_SEQUENCES, ORDO_DIFF_SEED, ORDO_DIFF_STEPS as for
// Differential.swift (default 100 sequences here too).

import Foundation
import Ordo
@testable import OrdoConformance
import Testing

enum ChangesDifferential {
  /// Runs the annotated steps on both; the first disagreement, or nil.
  static func disagreement(_ annotated: [GStep], seed: UInt64, tally: inout Tally) -> String? {
    let text = JSONText.scenario(name: "changes-\(seed)", about: "generated", steps: annotated)
    let scenario: Scenario
    do {
      scenario = try Scenario(json: Data(text.utf8), source: "changes-\(seed)")
    } catch {
      return "scenario does not parse: \(error)"
    }
    guard scenario.steps.count == annotated.count else { return "the scenario has \(scenario.steps.count) steps, not \(annotated.count)" }
    let bus = Bus()
    let runner = RunState(bus: bus)
    let model = Model()
    var g = SplitMix64(seed: seed ^ 0x5EED)
    var gen = Generator(seed: seed ^ 0xC4A5)
    for (i, step) in annotated.enumerated() {
      do {
        try model.perform(step, path: [i])
      } catch {
        return "the model cannot run step \(i + 1): \(error)"
      }
      do {
        try runner.perform(scenario.steps[i], inCallback: false)
      } catch {
        return "step \(i + 1): \(error)"
      }
      if let d = compare(model, bus, at: i + 1, &g, &gen, &tally) { return d }
    }
    return nil
  }

  /// Compares `changes(since:)` and changed-at after step `at`.
  static func compare(
    _ model: Model, _ bus: Bus, at: Int, _ g: inout SplitMix64, _ gen: inout Generator, _ tally: inout Tally
  ) -> String? {
    let last = model.lastTxn
    var sinces: Set<UInt64> = [0, last, last / 2, UInt64.random(in: 0...last, using: &g)]
    if last > 0 { sinces.insert(last - 1) }
    var patternSets: [[String]] = [["**"], [gen.pattern()], [gen.pattern(), gen.pattern()]]
    if Int.random(in: 0...9, using: &g) == 0 { patternSets.append(["bad..pattern"]) }
    for since in sinces.sorted() + [last + 1] {
      for patterns in patternSets {
        let want: Result<Changes, Fail>
        do { want = .success(try model.changes(since: since, patterns)) } catch let f as Fail { want = .failure(f) } catch {
          return "model: \(error)"
        }
        let got: Result<Changes, OrdoError>
        do { got = .success(try bus.changes(since: since, patterns)) } catch { got = .failure(error) }
        switch (want, got) {
        case (.success(let w), .success(let b)):
          tally.compared += 1
          tally.tombstones += w.removed.count
          tally.values += w.values.count
          if w != b {
            return "after step \(at): changes(since: \(since), \(patterns)): model \(render(w)), bus \(render(b))"
          }
        case (.failure(let f), .failure(let e)):
          tally.errors += 1
          if f.code != e.code.name {
            return "after step \(at): changes(since: \(since), \(patterns)): model \(f.code), bus \(e.code.name): \(e.message)"
          }
        case (.success(let w), .failure(let e)):
          return "after step \(at): changes(since: \(since), \(patterns)): model \(render(w)), bus \(e)"
        case (.failure(let f), .success(let b)):
          return "after step \(at): changes(since: \(since), \(patterns)): model \(f.code), bus \(render(b))"
        }
      }
    }
    for (k, at) in model.changedAt {
      guard let b = try? bus.changedAt(k) else { return "bus.changedAt(\(k)) failed" }
      if b != at { return "after step \(at): changed-at of \(k): model \(at), bus \(b)" }
    }
    return nil
  }

  static func render(_ c: Changes) -> String {
    let values = c.values.keys.sorted().map { "\($0)=\(c.values[$0]!)" }.joined(separator: ", ")
    let counters = c.counters.keys.sorted().map { "\($0):\(c.counters[$0]!)" }.joined(separator: ", ")
    return "{values [\(values)] removed \(c.removed.sorted()) counters [\(counters)] txn \(c.transaction)}"
  }

  struct Tally {
    var sequences = 0
    var skipped = 0
    var compared = 0
    var errors = 0
    var values = 0
    var tombstones = 0
  }
}

@Suite("Differential: changes(since:) vs the model")
struct ChangesDifferentialTests {
  @Test("changes(since:) agrees with the model after every step of random sequences")
  func randomSequences() throws {
    let count = Env.int("ORDO_DIFF_SEQUENCES", 100)
    let firstSeed = UInt64(Env.int("ORDO_DIFF_SEED", 1))
    let length = Env.int("ORDO_DIFF_STEPS", 60)
    var tally = ChangesDifferential.Tally()
    for i in 0..<count {
      let seed = firstSeed + UInt64(i)
      var gen = Generator(seed: seed)
      guard let steps = gen.make(length: length), let annotated = try? Model.annotate(steps) else {
        tally.skipped += 1
        continue
      }
      tally.sequences += 1
      if let failure = ChangesDifferential.disagreement(annotated, seed: seed, tally: &tally) {
        Issue.record(
          "changes(since:) disagrees at seed \(seed) (reproduce: ORDO_DIFF_SEED=\(seed) ORDO_DIFF_SEQUENCES=1): \(failure)")
        return
      }
    }
    print(
      "changes differential: \(tally.sequences) sequences (\(tally.skipped) skipped), \(tally.compared) comparisons, \(tally.values) values and \(tally.tombstones) tombstones reported, \(tally.errors) refusals"
    )
    #expect(tally.skipped * 10 <= count, "too many sequences the model could not run")
    if count >= 100 {
      // The comparison must reach what it is meant to test.
      #expect(tally.tombstones > 0 && tally.values > 0 && tally.errors > 0)
    }
  }
}
