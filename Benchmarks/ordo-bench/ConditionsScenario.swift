import Ordo

/// Scenario: what conditions and owners cost (SPEC §15). A commit of 10
/// writes (100 keypaths, each read by one contract) with one condition,
/// beside the same commit without it, measured alternately; and the
/// release of an owner of 10 000 values (one transaction removing them,
/// 1 000 in --quick), beside a plain commit of the same 10 000 removals.
func runConditions(_ s: Settings) throws -> [BenchResult] {
  [try conditionalCommit(s), try ownerRelease(s)]
}

private func conditionalCommit(_ s: Settings) throws -> BenchResult {
  final class Workload {
    let bus = Bus()
    let handles: [Handle]
    var value: Int64 = 0
    var counter: UInt64 = 0
    init() throws {
      let keys = (0..<100).map { "cart.item\($0)" }
      let bus = self.bus
      for (i, k) in keys.enumerated() { try bus.register(name: "c\(i)", reads: [k]) { _ in } }
      handles = try keys.map { try bus.resolve($0) }
    }
    func run(_ ops: Int, expecting: Bool) throws -> UInt64 {
      let t0 = nowNS()
      for _ in 0..<ops {
        value &+= 1
        bus.begin()
        if expecting { try bus.expect("cart.item0", counter: counter) }
        for i in 0..<10 { try bus.set(handles[i * 10], .int64(value)) }
        try bus.commit()
        counter += 1
      }
      return nowNS() - t0
    }
  }
  let w = try Workload()
  progress("conditions: commits of 10 writes with and without a condition")
  let m = try measure([
    Variant("plain") { ops in try w.run(ops, expecting: false) },
    Variant("expect") { ops in try w.run(ops, expecting: true) },
  ], s)
  var r = BenchResult(scenario: "conditions-commit", metric: "ns_per_commit", ordo: m["expect"], target: "vs plain commit <= 1.1", met: nil)
  r.comparators = [("plain commit", m["plain"])]
  let ratio = m.ratio("expect", "plain")
  r.ratios = [("vs plain commit", ratio)]
  r.met = ratio <= 1.1
  return r
}

private func ownerRelease(_ s: Settings) throws -> BenchResult {
  let n = s.quick ? 1_000 : 10_000
  let keys = (0..<n).map { "presence.user\($0)" }
  let bus = Bus()
  try bus.register(name: "reader", reads: ["presence.**"]) { _ in }
  func fill(_ owner: Owner?) throws {
    if let owner { try bus.begin(owner: owner) } else { bus.begin() }
    for k in keys { try bus.set(k, .bool(true)) }
    try bus.commit()
  }
  var releases: [Double] = []
  var plain: [Double] = []
  var ratios: [Double] = []
  progress("conditions: releasing an owner of \(n) values, beside a commit of \(n) removals")
  for _ in 0..<s.reps {
    let owner = Owner(bus, name: "provider")
    try fill(owner)
    var t0 = nowNS()
    let before = bus.transactionID
    owner.release()
    let release = Double(nowNS() - t0)
    guard bus.transactionID == before + 1, try bus.value(keys[0]) == nil else {
      throw OrdoError(.internal, "the release was not one transaction removing every value")
    }
    try fill(nil)
    t0 = nowNS()
    bus.begin()
    for k in keys { try bus.remove(k) }
    try bus.commit()
    let removal = Double(nowNS() - t0)
    releases.append(release)
    plain.append(removal)
    ratios.append(release / removal)
  }
  var r = BenchResult(
    scenario: "owner-release-\(n)", metric: "ns_per_transaction", ordo: median(releases),
    target: "vs plain removal <= 2", met: nil)
  r.comparators = [("plain removal", median(plain))]
  let ratio = median(ratios)
  r.ratios = [("vs plain removal", ratio)]
  r.met = ratio <= 2
  return r
}
