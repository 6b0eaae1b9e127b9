import Foundation
import OrdoConformance

// ordo-conformance DIR... : runs every *.json scenario of the directories
// against a fresh bus each, prints one line per scenario, exits 1 on failure.
let args = Array(CommandLine.arguments.dropFirst())
if args.isEmpty || args.contains("--help") || args.contains("-h") {
  print("usage: ordo-conformance DIR [DIR...]\nRuns every *.json conformance scenario in the directories (format: conformance/README.md).")
  exit(args.isEmpty ? 2 : 0)
}
do {
  let outcomes = try ConformanceRunner.run(directories: args)
  var failed = 0
  for o in outcomes {
    if let f = o.failure {
      failed += 1
      print("FAIL \(o.name) (\(o.source))\n     \(f)")
    } else {
      print("ok   \(o.name)")
    }
  }
  print("\(outcomes.count - failed) of \(outcomes.count) scenarios passed")
  exit(failed == 0 && !outcomes.isEmpty ? 0 : 1)
} catch {
  FileHandle.standardError.write(Data("ordo-conformance: \(error)\n".utf8))
  exit(2)
}
