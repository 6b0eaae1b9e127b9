// libFuzzer target: arbitrary bytes into the conformance scenario decoder
// (`Scenario(json:source:)`) must throw or parse, never crash; a scenario
// that parses is then run against a fresh bus by the conformance runner,
// which must report a result (pass or difference), never crash or hang.
// Built by `make fuzz-build` (mk/hardening.mk); corpus in Fuzz/corpus/scenario.

import CLibFuzzer
import Foundation
import OrdoConformance

@main enum ScenarioFuzz {
  static func main() { exit(ordo_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, scenarioFuzz)) }
}

func scenarioFuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  guard let data else { return 0 }
  let bytes = Data(bytes: data, count: size)
  guard let scenario = try? Scenario(json: bytes, source: "fuzz") else { return 0 }
  // Any outcome is fine; only a crash, a trap or a hang is a finding.
  _ = ConformanceRunner.run(scenario)
  return 0
}
