// libFuzzer target: arbitrary bytes into the conformance scenario decoder
// (`Scenario(json:source:)`) must throw or parse, never crash; a scenario
// that parses is then run against a fresh bus by the conformance runner,
// which must report a result (pass or difference), never crash or hang.
// Built by mk/hardening.mk (make fuzz-build); corpus in Fuzz/corpus/scenario.

import Foundation
import OrdoConformance

@_cdecl("LLVMFuzzerTestOneInput")
public func scenarioFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
  let bytes = Data(bytes: data, count: size)
  guard let scenario = try? Scenario(json: bytes, source: "fuzz") else { return 0 }
  // Any outcome is fine; only a crash, a trap or a hang is a finding.
  _ = ConformanceRunner.run(scenario)
  return 0
}
