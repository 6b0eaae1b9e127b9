import Ordo

/// Scenario 6: memory per registered contract and registration time.
/// `n` contracts, each reading 3 keypaths (`model.item<i>.a`, `.b`, `.c`);
/// the names and keypath strings are made in the loop, as a program
/// registering them would, so they count. Memory is the growth of the
/// resident set (/proc/self/statm) with freed heap given back first
/// (`malloc_trim`), so it counts live memory. The comparator is the least a
/// dispatcher can keep: an array of (name, reads, callback).
func runMemory(_ s: Settings) throws -> [BenchResult] {
  let n = s.quick ? 100_000 : 1_000_000
  let sink = Sink()

  progress("memory: \(n) contracts in a plain array")
  var plainBytes = 0.0
  var plainNS = 0.0
  do {
    trimHeap()
    let r0 = residentBytes()
    let t0 = nowNS()
    var plain: [ScanDispatcher.Entry] = []
    for i in 0..<n {
      let item = "model.item\(i)"
      plain.append(ScanDispatcher.Entry(name: "c\(i)", reads: [item + ".a", item + ".b", item + ".c"]) { sink.calls &+= 1 })
    }
    let t1 = nowNS()
    trimHeap()
    let r1 = residentBytes()
    check(plain.count == n, "memory: plain array")
    plainBytes = Double(r1 - r0) / Double(n)
    plainNS = Double(t1 - t0) / Double(n)
  }

  progress("memory: registering \(n) contracts on a bus")
  trimHeap()
  let r0 = residentBytes()
  let bus = Bus()
  let t0 = nowNS()
  for i in 0..<n {
    let item = "model.item\(i)"
    try bus.register(name: "c\(i)", reads: [item + ".a", item + ".b", item + ".c"]) { _ in sink.calls &+= 1 }
  }
  let t1 = nowNS()
  trimHeap()
  let r1 = residentBytes()
  // The bus works at that size: one change reaches its one reader.
  sink.calls = 0
  try bus.transaction { try bus.set("model.item\(n / 2).b", .int64(1)) }
  check(sink.calls == 1, "memory: \(sink.calls) calls after one change")
  check(bus.statistics.contracts == n, "memory: contract count")

  let bytes = Double(r1 - r0) / Double(n)
  let ns = Double(t1 - t0) / Double(n)
  progress("memory: releasing the bus")
  var mem = BenchResult(scenario: "memory-\(n)", metric: "bytes_per_contract", ordo: bytes, target: "ordo <= 512", met: bytes <= 512)
  mem.comparators = [("plain-array", plainBytes)]
  mem.ratios = [("vs plain-array", bytes / plainBytes)]
  var reg = BenchResult(scenario: "memory-\(n)", metric: "ns_per_registration", ordo: ns, target: "none", met: nil)
  reg.comparators = [("plain-array", plainNS)]
  reg.ratios = [("vs plain-array", ns / plainNS)]
  withExtendedLifetime(bus) {}
  return [mem, reg]
}
