#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

import Ordo

// `--profile WORKLOAD`: runs only Ordo's side of one workload, for a
// profiler. The measured part of each workload is a function of its own
// whose name starts with `profiled`, so that callgrind can collect it alone:
//
//   valgrind --tool=callgrind --toggle-collect='*profiled*' \
//     ordo-bench --profile commit:100000
//
// Benchmarks/profile.sh does that and prints where the time goes.

/// `commit:N`: 10 000 commits of 10 changes (the scale scenario).
@inline(never) func profiledCommits(_ bus: Bus, _ keys: [String], _ commits: Int) throws {
  var rng = SplitMix(state: 3)
  for v in 0..<commits {
    let g = rng.below(keys.count / 10) * 10
    bus.begin()
    for k in g..<(g + 10) { try bus.set(keys[k], .int64(Int64(v))) }
    try bus.commit()
  }
}

/// `commit-handles:N`: the same commits through handles.
@inline(never) func profiledHandleCommits(_ bus: Bus, _ handles: [Handle], _ commits: Int) throws {
  var rng = SplitMix(state: 3)
  for v in 0..<commits {
    let g = rng.below(handles.count / 10) * 10
    bus.begin()
    for k in g..<(g + 10) { try bus.set(handles[k], .int64(Int64(v))) }
    try bus.commit()
  }
}

/// `commit-typed:N`: the same commits through typed properties.
@inline(never) func profiledTypedCommits(_ bus: Bus, _ properties: [Property<Int64>], _ commits: Int) throws {
  var rng = SplitMix(state: 3)
  for v in 0..<commits {
    let g = rng.below(properties.count / 10) * 10
    bus.begin()
    for k in g..<(g + 10) { try properties[k].set(Int64(v)) }
    try bus.commit()
  }
}

/// `delivery`: transactions of the delivery scenario (1 000 changes each).
@inline(never) func profiledTransactions(_ d: OrdoDelivery, _ n: Int) throws -> UInt64 {
  try d.run(n)
}

/// `delivery-handles`: the same through handles.
@inline(never) func profiledHandleTransactions(_ d: OrdoDelivery, _ n: Int) throws -> UInt64 {
  try d.runHandles(n)
}

/// `delivery-typed`: the same through typed properties.
@inline(never) func profiledTypedTransactions(_ d: OrdoDelivery, _ n: Int) throws -> UInt64 {
  try d.runTyped(n)
}

/// `register:N`: N registrations of contracts reading 3 keypaths (the memory
/// scenario).
@inline(never) func profiledRegistrations(_ bus: Bus, _ n: Int, _ sink: Sink) throws {
  for i in 0..<n {
    let item = "model.item\(i)"
    try bus.register(name: "c\(i)", reads: [item + ".a", item + ".b", item + ".c"]) { _ in sink.calls &+= 1 }
  }
}

/// Runs one workload: commit:N, commit-handles:N, commit-typed:N, delivery,
/// delivery-handles, delivery-typed or register:N.
func runProfile(_ workload: String) throws {
  let parts = workload.split(separator: ":")
  let n = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
  // `schema-WORKLOAD`: the same on a bus whose schema declares the
  // workload's keypaths (`model.*.value`, int64).
  let schema = parts.first?.hasPrefix("schema-") == true
    ? try Schema(json: #"{"ordo-schema": 1, "keys": {"model.*.value": {"type": "int64"}}}"#) : nil
  let kind = (parts.first ?? "").dropFirst(schema == nil ? 0 : "schema-".count)
  switch kind {
  case "commit" where n >= 10, "commit-handles" where n >= 10, "commit-typed" where n >= 10:
    let keys = (0..<n).map { "model.item\($0).value" }
    let bus = schema.map(Bus.init(schema:)) ?? Bus()
    let sink = Sink()
    for i in 0..<n { try bus.register(name: "c\(i)", reads: [keys[i]]) { _ in sink.calls &+= 1 } }
    try bus.transaction { for k in keys { try bus.set(k, .int64(-1)) } }
    let handles = kind == "commit" ? [] : try keys.map { try bus.resolve($0) }
    let properties = kind == "commit-typed" ? try handles.map { try bus.property($0, as: Int64.self) } : []
    sink.calls = 0
    let t0 = nowNS()
    switch kind {
    case "commit-handles": try profiledHandleCommits(bus, handles, 10_000)
    case "commit-typed": try profiledTypedCommits(bus, properties, 10_000)
    default: try profiledCommits(bus, keys, 10_000)
    }
    check(sink.calls == 100_000, "profile \(kind): \(sink.calls) calls")
    progress("profile \(kind):\(n): \(Double(nowNS() - t0) / 10_000) ns per commit")
  case "delivery", "delivery-handles", "delivery-typed":
    let d = try OrdoDelivery(1_000, schema: schema)
    let t: UInt64
    switch kind {
    case "delivery-handles":
      _ = try d.runHandles(5)
      t = try profiledHandleTransactions(d, 200)
    case "delivery-typed":
      _ = try d.runTyped(5)
      t = try profiledTypedTransactions(d, 200)
    default:
      _ = try d.run(5)
      t = try profiledTransactions(d, 200)
    }
    d.verify("profile \(kind)")
    progress("profile \(kind): \(Double(t) / 200_000) ns per change")
  case "register" where n > 0:
    let bus = Bus()
    let sink = Sink()
    let t0 = nowNS()
    try profiledRegistrations(bus, n, sink)
    progress("profile register:\(n): \(Double(nowNS() - t0) / Double(n)) ns per registration")
  default:
    eprint("ordo-bench: unknown profile workload \(workload): commit:N, commit-handles:N, commit-typed:N, delivery, delivery-handles, delivery-typed or register:N, the first six also as schema-WORKLOAD\n")
    exit(64)
  }
}
