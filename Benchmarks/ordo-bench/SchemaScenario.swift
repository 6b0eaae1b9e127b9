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
  rows += try scale(s)
  rows.append(try registration(s))
  return rows
}

/// The scale workload with and without a schema: 100 000 keypaths, each
/// read by one contract; a commit writes 10 keypaths spread over the
/// store (through handles, typed properties and strings), so that each
/// write reaches a node state out of cache, where the schema's rule byte
/// lives.
private func scale(_ s: Settings) throws -> [BenchResult] {
  let n = 100_000
  let schema = try Schema(json: #"{"ordo-schema": 1, "keys": {"model.*.value": {"type": "int64"}}}"#)
  let keys = (0..<n).map { "model.item\($0).value" }
  final class Spread {
    let bus: Bus
    let handles: [Handle]
    let properties: [Property<Int64>]
    let sink = Sink()
    var rng = SplitMix(state: 7)
    var value: Int64 = 0
    init(_ bus: Bus, _ keys: [String]) throws {
      self.bus = bus
      let sink = self.sink
      for (i, k) in keys.enumerated() { try bus.register(name: "c\(i)", reads: [k]) { _ in sink.calls &+= 1 } }
      try bus.transaction { for k in keys { try bus.set(k, .int64(-1)) } }
      handles = try keys.map { try bus.resolve($0) }
      properties = try handles.map { try bus.property($0, as: Int64.self) }
    }
    func run(_ ops: Int, _ write: (Int) throws -> Void) throws -> UInt64 {
      let t0 = nowNS()
      for _ in 0..<ops {
        value &+= 1
        bus.begin()
        for _ in 0..<10 { try write(Int(rng.next() % UInt64(handles.count))) }
        try bus.commit()
      }
      return nowNS() - t0
    }
  }
  progress("schema: \(n) keypaths and contracts, with and without a schema")
  let plain = try Spread(Bus(), keys)
  let checked = try Spread(Bus(schema: schema), keys)
  var variants: [Variant] = []
  for (name, spread) in [("", plain), ("schema-", checked)] {
    variants.append(Variant("\(name)handles") { ops in try spread.run(ops) { i in try spread.bus.set(spread.handles[i], .int64(spread.value)) } })
    variants.append(Variant("\(name)typed") { ops in try spread.run(ops) { i in try spread.properties[i].set(spread.value) } })
    variants.append(Variant("\(name)strings") { ops in try spread.run(ops) { i in try spread.bus.set(keys[i], .int64(spread.value)) } })
  }
  let m = try measure(variants, s)
  var rows: [BenchResult] = []
  for (path, limit) in [("strings", 1.1), ("handles", 1.02), ("typed", 1.02)] {
    var r = BenchResult(
      scenario: "schema-scale-\(n)-\(path)", metric: "ns_per_commit", ordo: m["schema-\(path)"], target: "vs no schema <= \(limit)", met: nil)
    r.comparators = [("no schema", m[path])]
    let ratio = m.ratio("schema-\(path)", path)
    r.ratios = [("vs no schema", ratio)]
    r.met = ratio <= limit
    rows.append(r)
  }
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
