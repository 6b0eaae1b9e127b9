// ordoctl lint: the order conflicts a live bus's contracts leave to the run
// time (Bus.lint(), docs/swift.md).
import Ordo
import OrdoDBus

#if canImport(Glibc)
import Glibc
#endif

extension Devtools {
  /// `ordoctl lint [--json]`, its arguments checked before connecting.
  static func lintCommand(_ argv: [String]) -> (OrdoClient) -> Void {
    let (options, operands) = parseArguments(argv, command: "lint", flags: ["--json"])
    guard operands.isEmpty else { fail("usage: ordoctl lint [--json]", code: 2) }
    let json = options["--json"] != nil
    return { Devtools(client: $0).lint(json: json) }
  }

  /// One line per pair where a later contract's write pattern may write
  /// what an earlier contract reads, in pass order (as JSON objects with
  /// `--json`); exits 1 when there is any, 0 when there is none.
  func lint(json: Bool) {
    let contracts = contractFields().map { (name: $0.str("name"), reads: $0.list("reads"), writes: $0.list("writes")) }
    let findings = LintFinding.find(in: contracts)
    for f in findings {
      if json {
        out(
          "{\"earlier\":\(ValueText.json(f.earlier)),\"reads\":\(ValueText.json(f.reads)),\"later\":\(ValueText.json(f.later)),\"writes\":\(ValueText.json(f.writes)),\"keypath\":\(ValueText.json(f.keypath))}"
        )
      } else {
        out(f.description)
      }
    }
    client.close()
    exit(findings.isEmpty ? 0 : 1)
  }
}
