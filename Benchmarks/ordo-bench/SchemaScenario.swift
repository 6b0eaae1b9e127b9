import Ordo

/// Scenario: what a schema costs (SPEC §14). The delivery workload (1 000
/// observers, one transaction sets every keypath once) on a bus without a
/// schema and on one whose schema declares the keypaths
/// (`model.*.value`, int64), through strings, handles and typed
/// properties, measured alternately in one run; and the registration of
/// 100 000 contracts (10 000 in --quick) against a 10 000-entry schema,
/// beside the same without a schema.
func runSchema(_ s: Settings) throws -> [BenchResult] {
  let n = 1_000
  let schema = try Schema(json: #"{"ordo-schema": 1, "keys": {"model.*.value": {"type": "int64"}}}"#)
  let plain = try OrdoDelivery(n)
  let checked = try OrdoDelivery(n, schema: schema)
  let variants = [
    Variant("strings") { ops in try plain.run(ops) },
    Variant("schema-strings") { ops in try checked.run(ops) },
    Variant("handles") { ops in try plain.runHandles(ops) },
    Variant("schema-handles") { ops in try checked.runHandles(ops) },
    Variant("typed") { ops in try plain.runTyped(ops) },
    Variant("schema-typed") { ops in try checked.runTyped(ops) },
  ]
  progress("schema: measuring \(n) observers with and without a schema")
  let m = try measure(variants, s).per(n)
  plain.verify("schema scenario, no schema")
  checked.verify("schema scenario, schema")
  var rows: [BenchResult] = []
  for (path, limit) in [("strings", 1.1), ("handles", 1.02), ("typed", 1.02)] {
    var r = BenchResult(scenario: "schema-\(path)", metric: "ns_per_change", ordo: m["schema-\(path)"], target: "vs no schema <= \(limit)", met: nil)
    r.comparators = [("no schema", m[path])]
    let ratio = m.ratio("schema-\(path)", path)
    r.ratios = [("vs no schema", ratio)]
    r.met = ratio <= limit
    rows.append(r)
  }
  rows.append(try registration(s))
  return rows
}

/// Registering contracts against a 10 000-entry schema (declarations
/// `app.s<i>.*.value`), each contract reading one element's value, beside
/// the same registrations on a bus without a schema: the cost per
/// registration, reported.
private func registration(_ s: Settings) throws -> BenchResult {
  let contracts = s.quick ? 10_000 : 100_000
  let entries = 10_000
  let schema = try Schema((0..<entries).map { (i) throws(OrdoError) in try Schema.Declaration("app.s\(i).*.value", type: .int64) })
  func register(on bus: Bus) throws -> Double {
    let t0 = nowNS()
    for i in 0..<contracts {
      try bus.register(name: "c\(i)", reads: ["app.s\(i % entries).e\(i / entries).value"]) { _ in }
    }
    return Double(nowNS() - t0) / Double(contracts)
  }
  progress("schema: registering \(contracts) contracts against a \(entries)-entry schema")
  let without = try register(on: Bus())
  let with = try register(on: Bus(schema: schema))
  var r = BenchResult(
    scenario: "schema-register-\(contracts)", metric: "ns_per_registration", ordo: with,
    target: "reported (a \(entries)-entry schema)", met: nil)
  r.comparators = [("no schema", without)]
  r.ratios = [("vs no schema", with / without)]
  return r
}
