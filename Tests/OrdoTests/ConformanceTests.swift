import Foundation
import OrdoConformance
import Testing

@testable import Ordo

/// Runs the conformance scenarios (docs/conformance.md) through the Swift API:
/// the project's own (Tests/Conformance) and, when present beside the
/// checkout, the shared ones.
@Suite struct ConformanceTests {
  static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
  static let own = repository.appendingPathComponent("Tests/Conformance").path
  static let shared = repository.deletingLastPathComponent().appendingPathComponent("shared/conformance").path

  static func files(_ dir: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".json") }.sorted()
      .map { dir + "/" + $0 }
  }

  static var allFiles: [String] { files(own) + files(shared) }

  @Test func ownScenariosArePresent() {
    #expect(Self.files(Self.own).count >= 60)
  }

  @Test(arguments: allFiles)
  func scenario(_ path: String) throws {
    let s = try Scenario(json: Data(contentsOf: URL(fileURLWithPath: path)), source: path)
    #expect(!s.about.isEmpty, "\(path) says which rule it shows")
    let failure = ConformanceRunner.run(s)
    #expect(failure == nil, "\(failure ?? "")")
  }

  /// SPEC §13: handles obey every rule exactly as keypath strings do — each
  /// scenario passes through handles and makes the same calls.
  @Test(arguments: allFiles)
  func scenarioThroughHandles(_ path: String) throws {
    let s = try Scenario(json: Data(contentsOf: URL(fileURLWithPath: path)), source: path)
    let failure = ConformanceRunner.runBothWays(s)
    #expect(failure == nil, "\(failure ?? "")")
  }

  /// Pass traces agree with the calls the contracts saw (order, "because").
  @Test(arguments: allFiles)
  func scenarioTraced(_ path: String) throws {
    let s = try Scenario(json: Data(contentsOf: URL(fileURLWithPath: path)), source: path)
    let failure = ConformanceRunner.traceCheck(s)
    #expect(failure == nil, "\(failure ?? "")")
  }

  @Test func runnerOverDirectories() throws {
    var dirs = [Self.own]
    if FileManager.default.fileExists(atPath: Self.shared) { dirs.append(Self.shared) }
    let outcomes = try ConformanceRunner.run(directories: dirs)
    #expect(outcomes.count == Self.allFiles.count)
    #expect(outcomes.allSatisfy { $0.failure == nil }, "\(outcomes.compactMap(\.failure))")
    let own = try Scenario.load(directory: Self.own)
    #expect(Set(own.map(\.name)).count == own.count, "scenario names are unique")
  }

  /// The runner is not vacuous: a scenario whose expectation is wrong fails
  /// with a message that names the step.
  @Test(arguments: [
    #"{"op": "commit", "expect_txn": 2}"#,
    #"{"op": "commit", "expect_calls": []}"#,
    #"{"op": "commit", "expect_calls": [{"contract": "w", "changed": ["other"]}]}"#,
    #"{"op": "commit", "expect_calls": [{"contract": "w", "txn": 5}]}"#,
    #"{"op": "counter", "key": "k", "expect": 0}"#,
    #"{"op": "get", "key": "k", "expect": {"double": 1}}"#,
    #"{"op": "set", "key": "k", "value": {"int64": 1}, "expect_error": "STABILITY"}"#,
  ])
  func wrongExpectationsFail(_ step: String) throws {
    let setup = #"{"op": "register", "name": "w", "reads": ["k"], "writes": []}, {"op": "begin"}, {"op": "set", "key": "k", "value": {"int64": 1}}"#
    let steps = step.hasPrefix(#"{"op": "commit""#) ? "\(setup), \(step)" : "\(setup), {\"op\": \"commit\"}, {\"op\": \"begin\"}, \(step)"
    let json = #"{"name": "wrong", "about": "x", "steps": [\#(steps)]}"#
    let s = try Scenario(json: Data(json.utf8), source: "inline")
    let failure = try #require(ConformanceRunner.run(s))
    #expect(failure.contains("step"))
  }

  @Test func malformedScenariosAreRejected() {
    #expect(throws: ScenarioError.self) { try Scenario(json: Data(#"{"name": "x"}"#.utf8), source: "inline") }
    #expect(throws: ScenarioError.self) {
      try Scenario(json: Data(#"{"name": "x", "steps": [{"op": "fly"}]}"#.utf8), source: "inline")
    }
    #expect(throws: ScenarioError.self) {
      try Scenario(json: Data(#"{"name": "x", "steps": [{"op": "commit", "expect_error": "NOPE"}]}"#.utf8), source: "inline")
    }
  }
}
