#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// A helper program driven line by line through pipes.
final class Child {
  let process = Process()
  private let input = Pipe()
  private let output = Pipe()
  private var buffer: [UInt8] = []

  init(_ path: String, _ arguments: [String]) throws {
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.standardInput = input
    process.standardOutput = output
    try process.run()
    Child.running.append(process)
  }

  /// Children still running, stopped by `stopChildren` when the run fails.
  nonisolated(unsafe) static var running: [Process] = []

  func send(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    bytes.withUnsafeBytes { raw in
      var off = 0
      while off < raw.count {
        let n = write(input.fileHandleForWriting.fileDescriptor, raw.baseAddress! + off, raw.count - off)
        if n <= 0 { return }
        off += n
      }
    }
  }

  /// The next line of output, or nil at end of file.
  func readLine() -> String? {
    while true {
      if let nl = buffer.firstIndex(of: UInt8(ascii: "\n")) {
        let line = String(decoding: buffer[..<nl], as: UTF8.self)
        buffer.removeSubrange(...nl)
        return line
      }
      var chunk = [UInt8](repeating: 0, count: 4096)
      let n = read(output.fileHandleForReading.fileDescriptor, &chunk, chunk.count)
      if n <= 0 { return nil }
      buffer.append(contentsOf: chunk[..<n])
    }
  }

  /// Reads the output to its end as "name value" lines; waits for the exit.
  func figures() -> [String: Double] {
    var out: [String: Double] = [:]
    while let line = readLine() {
      let f = line.split(separator: " ")
      if f.count == 2, let v = Double(f[1]) { out[String(f[0])] = v }
    }
    finish()
    return out
  }

  func finish() {
    try? input.fileHandleForWriting.close()
    process.waitUntilExit()
    Child.running.removeAll { $0 === process }
  }
}

/// Stops (SIGTERM) the helper programs this run started and did not finish.
func stopChildren() {
  for p in Child.running where p.isRunning { p.terminate() }
  Child.running.removeAll()
}

/// One of the C programs of Benchmarks/c (ordo-c-bench, gobject-bench),
/// started with its arguments and driven by command lines "WORD OPS", each
/// answered with "NS CALLS" (the elapsed ns, the program's total callback
/// calls so far). Counts, per command word, the operations run and the calls
/// they made, for the scenario's checks.
final class CProgram {
  let child: Child
  let label: String
  private var totalCalls = 0
  private(set) var ops: [String: Int] = [:]
  private(set) var calls: [String: Int] = [:]

  /// Starts the program; nil when it does not print "ready".
  init?(_ path: String, _ arguments: [String], label: String) throws {
    self.label = label
    child = try Child(path, arguments)
    guard child.readLine() == "ready" else {
      child.finish()
      return nil
    }
  }

  /// Runs `ops` operations of command `word`; returns the elapsed ns.
  func run(_ word: String, _ ops: Int) -> UInt64 {
    child.send("\(word) \(ops)")
    guard let line = child.readLine() else {
      eprint("ordo-bench: \(label): the program stopped\n")
      stopChildren()
      exit(2)
    }
    let f = line.split(separator: " ").compactMap { UInt64($0) }
    check(f.count == 2, "\(label): malformed reply \(line)")
    self.ops[word, default: 0] += ops
    calls[word, default: 0] += Int(f[1]) - totalCalls
    totalCalls = Int(f[1])
    return f[0]
  }

  /// Variant `name` running command `word`.
  func variant(_ name: String, _ word: String) -> Variant {
    Variant(name) { [self] ops in run(word, ops) }
  }

  /// Checks that command `word` made `perOp` calls per operation.
  func verify(_ word: String, perOp: Int) {
    let o = ops[word, default: 0], c = calls[word, default: 0]
    check(c == perOp * o, "\(label) \(word): \(c) calls for \(o) operations (\(perOp) each expected)")
  }

  func finish() { child.finish() }
}

/// `measure` with the order of the variants rotated every round, so that
/// none of them always runs just after a given other one (a process that
/// has just been switched in, its caches cold, or a helper program's
/// neighbour): for scenarios whose variants live in different processes.
func measureRotating(_ variants: [Variant], _ settings: Settings) throws -> Measurement {
  for v in variants { try v.calibrate(settings) }
  for r in 0..<settings.reps {
    for i in 0..<variants.count {
      let v = variants[(r + i) % variants.count]
      let t = try v.run(v.opsPerBatch)
      v.samples.append(Double(t) / Double(v.opsPerBatch))
    }
  }
  return Measurement(variants: Dictionary(uniqueKeysWithValues: variants.map { ($0.name, $0) }))
}

/// `v` with one untimed operation before each timed batch: a helper
/// program woken from its pipe, perhaps on the other core, starts with cold
/// caches, which would be charged to its batch and not to the variant that
/// runs in ordo-bench itself; every variant of such a measurement gets the
/// same warm-up, so all of them measure the steady cost.
func warmed(_ v: Variant) -> Variant {
  Variant(v.name, maxOps: v.maxOps) { ops in
    _ = try v.run(1)
    return try v.run(ops)
  }
}

/// The first and third quartiles over rounds of time(a) ÷ time(b): the
/// spread of `Measurement.ratio`.
func ratioQuartiles(_ m: Measurement, _ a: String, _ b: String) -> (Double, Double) {
  let x = m.variants[a]!.samples, y = m.variants[b]!.samples
  let r = zip(x, y).map { $0 / $1 }.sorted()
  func q(_ p: Double) -> Double { r[min(r.count - 1, Int((Double(r.count - 1) * p).rounded()))] }
  return (q(0.25), q(0.75))
}

/// Scenario 4: the work of scenario 2 (1 000 contracts, each transaction
/// changing each of their keypaths once) driven from C through libordo.so,
/// through keypath strings (`c-abi`) and through handles (`c-abi-handles`),
/// against the same work through the Swift API, strings and handles,
/// measured in the same rounds.
func runCABI(_ s: Settings) throws -> [BenchResult] {
  let target = "vs swift <= 1.3"
  let hTarget = "vs swift-handles <= 1.3"
  func unavailable(_ reason: String) -> [BenchResult] {
    [.unavailable("c-abi", "ns_per_change", target: target, reason: reason),
     .unavailable("c-abi-handles", "ns_per_change", target: hTarget, reason: reason)]
  }
  guard let path = s.cBench, !path.isEmpty else {
    return unavailable("no C benchmark program: `make bench` builds it when include/ordo.h and `make install` exist")
  }
  guard access(path, X_OK) == 0 else { return unavailable("C benchmark program \(path) not found") }
  let n = 1_000
  progress("c-abi: starting \(path)")
  guard let c = try CProgram(path, ["\(n)"], label: "c-abi") else {
    return unavailable("C benchmark program \(path) did not start")
  }
  defer { c.finish() }
  let swift = try OrdoDelivery(n)
  let variants = [
    c.variant("c", "strings"),
    Variant("swift") { ops in try swift.run(ops) },
    c.variant("c-handles", "handles"),
    Variant("swift-handles") { ops in try swift.runHandles(ops) },
  ].map(warmed)
  progress("c-abi: measuring")
  // Two processes take turns here, so load on the machine hits them
  // unevenly: many short rounds (2 ms: most of them run without being
  // preempted), the order rotated each round, keep each pair close in time
  // and the median of the per-round ratios steady.
  var settings = s
  settings.reps = s.quick ? s.reps : 10 * s.reps + 1
  settings.batchNS = s.batchNS / 10
  let m = try measureRotating(variants, settings).per(n)
  swift.verify("c-abi swift")
  c.verify("strings", perOp: n)
  c.verify("handles", perOp: n)
  let ratio = m.ratio("c", "swift")
  let (q1, q3) = ratioQuartiles(m, "c", "swift")
  var r = BenchResult(scenario: "c-abi", metric: "ns_per_change", ordo: m["c"], target: target, met: ratio <= 1.3)
  r.comparators = [("swift", m["swift"])]
  r.ratios = [("vs swift", ratio), ("vs swift q1", q1), ("vs swift q3", q3)]
  let hRatio = m.ratio("c-handles", "swift-handles")
  let (h1, h3) = ratioQuartiles(m, "c-handles", "swift-handles")
  var h = BenchResult(scenario: "c-abi-handles", metric: "ns_per_change", ordo: m["c-handles"], target: hTarget, met: hRatio <= 1.3)
  h.comparators = [("swift-handles", m["swift-handles"]), ("c", m["c"])]
  h.ratios = [
    ("vs swift-handles", hRatio), ("vs swift-handles q1", h1), ("vs swift-handles q3", h3),
    ("c strings vs handles", m.ratio("c", "c-handles")),
  ]
  return [r, h]
}

/// Scenario 4b: the C ABI against GObject property notification, what a C
/// programmer would otherwise use, each driven by its own C program
/// (Benchmarks/c/ordo-c-bench.c and gobject-bench.c; the latter expected
/// beside the former, where `make bench` builds both), in the same rounds:
///
/// - `c-gobject-delivery` (through handles) and `-strings`: ns per
///   delivered change, 1 000 properties each changed once per transaction
///   (GObject: 1 000 objects, each with a `notify::value` handler; one
///   `g_object_set`, or the typed setter's `g_object_notify_by_pspec`, per
///   change);
/// - `c-gobject-batch`: 1 000 properties each written 10 times in one
///   transaction (GObject: between `g_object_freeze_notify` and
///   `g_object_thaw_notify` on every object, and without them), ns and
///   handler calls per batch;
/// - `c-gobject-scale-N`: a commit changing 10 random properties of N (one
///   transaction through handles; 10 `g_object_set`), at 10 and 100 000,
///   and `c-gobject-scale` the growth from 10 to 100 000 of both (as a
///   ratio, the target, and in nanoseconds added per commit), beside the
///   floor: ordo-c-bench's `floor`, the same commits by the least a
///   thread-safe bus does, without Ordo.
func runCGObject(_ s: Settings) throws -> [BenchResult] {
  let deliveryTarget = "vs gobject-notify-by-pspec >= 3, vs gobject-set >= 3"
  let growthTarget = "ordo <= gobject (growth no worse)"
  let big = 100_000
  func unavailable(_ reason: String) -> [BenchResult] {
    [
      .unavailable("c-gobject-delivery", "ns_per_change", target: deliveryTarget, reason: reason),
      .unavailable("c-gobject-delivery-strings", "ns_per_change", target: "none", reason: reason),
      .unavailable("c-gobject-batch", "ns_per_batch", target: "none", reason: reason),
      .unavailable("c-gobject-batch", "calls_per_batch", target: "ordo == 1000 (each contract once)", reason: reason),
      .unavailable("c-gobject-scale-10", "ns_per_commit", target: "none", reason: reason),
      .unavailable("c-gobject-scale-\(big)", "ns_per_commit", target: "none", reason: reason),
      .unavailable("c-gobject-scale", "growth_10_to_\(big)", target: growthTarget, reason: reason),
    ]
  }
  guard let cPath = executable(s.cBench) else {
    return unavailable("no C benchmark program: `make bench` builds it when include/ordo.h and `make install` exist")
  }
  let gPath = URL(fileURLWithPath: cPath).deletingLastPathComponent().appendingPathComponent("gobject-bench").path
  guard access(gPath, X_OK) == 0 else {
    return unavailable("no GObject benchmark program \(gPath): `make bench` builds it with libglib2.0-dev")
  }
  var settings = s
  settings.reps = s.quick ? s.reps : 2 * s.reps + 1
  settings.batchNS = s.batchNS / 2
  var results: [BenchResult] = []

  // Delivery and batch: 1 000 properties.
  let n = 1_000
  progress("c-gobject: starting \(cPath) and \(gPath) with \(n) properties")
  guard let c = try CProgram(cPath, ["\(n)"], label: "c-gobject ordo-c-bench"),
    let g = try CProgram(gPath, ["\(n)"], label: "c-gobject gobject-bench")
  else { return unavailable("a benchmark program did not start") }
  progress("c-gobject: measuring delivery")
  let d = try measureRotating(
    [
      c.variant("c-handles", "handles"), g.variant("gobject-notify-by-pspec", "pspec"),
      c.variant("c-strings", "strings"), g.variant("gobject-set", "set"),
    ].map(warmed), settings
  ).per(n)
  c.verify("handles", perOp: n)
  c.verify("strings", perOp: n)
  g.verify("pspec", perOp: n)
  g.verify("set", perOp: n)
  let vsPspec = d.ratio("gobject-notify-by-pspec", "c-handles"), vsSet = d.ratio("gobject-set", "c-handles")
  var del = BenchResult(
    scenario: "c-gobject-delivery", metric: "ns_per_change", ordo: d["c-handles"], target: deliveryTarget,
    met: vsPspec >= 3 && vsSet >= 3)
  del.comparators = [("gobject-notify-by-pspec", d["gobject-notify-by-pspec"]), ("gobject-set", d["gobject-set"]), ("c-strings", d["c-strings"])]
  del.ratios = [("vs gobject-notify-by-pspec", vsPspec), ("vs gobject-set", vsSet)]
  var delS = BenchResult(scenario: "c-gobject-delivery-strings", metric: "ns_per_change", ordo: d["c-strings"], target: "none", met: nil)
  delS.comparators = [("gobject-notify-by-pspec", d["gobject-notify-by-pspec"]), ("gobject-set", d["gobject-set"])]
  delS.ratios = [
    ("vs gobject-notify-by-pspec", d.ratio("gobject-notify-by-pspec", "c-strings")),
    ("vs gobject-set", d.ratio("gobject-set", "c-strings")),
  ]
  results += [del, delS]

  progress("c-gobject: measuring batches")
  let b = try measureRotating(
    [c.variant("c-batch", "batch"), g.variant("gobject-freeze", "freeze"), g.variant("gobject-no-freeze", "batch")].map(warmed), settings)
  c.finish()
  g.finish()
  // One call per contract (object) per batch, except GObject without freeze.
  c.verify("batch", perOp: n)
  g.verify("freeze", perOp: n)
  g.verify("batch", perOp: 10 * n)
  func perBatch(_ p: CProgram, _ word: String) -> Double { Double(p.calls[word, default: 0]) / Double(max(1, p.ops[word, default: 0])) }
  var bt = BenchResult(scenario: "c-gobject-batch", metric: "ns_per_batch", ordo: b["c-batch"], target: "none", met: nil)
  bt.comparators = [("gobject-freeze", b["gobject-freeze"]), ("gobject-no-freeze", b["gobject-no-freeze"])]
  bt.ratios = [("vs gobject-freeze", b.ratio("gobject-freeze", "c-batch")), ("vs gobject-no-freeze", b.ratio("gobject-no-freeze", "c-batch"))]
  let cCalls = perBatch(c, "batch"), fCalls = perBatch(g, "freeze"), nfCalls = perBatch(g, "batch")
  var bc = BenchResult(
    scenario: "c-gobject-batch", metric: "calls_per_batch", ordo: cCalls, target: "ordo == \(n) (each contract once)", met: cCalls == Double(n))
  bc.comparators = [("gobject-freeze", fCalls), ("gobject-no-freeze", nfCalls)]
  bc.ratios = [("vs gobject-freeze", fCalls / cCalls), ("vs gobject-no-freeze", nfCalls / cCalls)]
  results += [bt, bc]

  // Scale: 10 random properties per commit, at 10 and at 100 000.
  var programs: [(Int, CProgram, CProgram)] = []
  for size in [10, big] {
    progress("c-gobject: starting both programs with \(size) properties")
    guard let cs = try CProgram(cPath, ["\(size)"], label: "c-gobject ordo-c-bench \(size)"),
      let gs = try CProgram(gPath, ["\(size)"], label: "c-gobject gobject-bench \(size)")
    else { return results + unavailable("a benchmark program did not start").suffix(3) }
    programs.append((size, cs, gs))
  }
  progress("c-gobject: measuring commits of 10 random properties")
  var variants: [Variant] = []
  for (size, cs, gs) in programs {
    variants += [
      cs.variant("c-handles-\(size)", "scale"), cs.variant("c-strings-\(size)", "scale-strings"), gs.variant("gobject-\(size)", "scale"),
      cs.variant("c-floor-\(size)", "floor"),
    ]
  }
  let sc = try measureRotating(variants.map(warmed), settings)
  for (_, cs, gs) in programs {
    cs.finish()
    gs.finish()
    cs.verify("scale", perOp: 10)
    cs.verify("scale-strings", perOp: 10)
    cs.verify("floor", perOp: 10)
    gs.verify("scale", perOp: 10)
  }
  for size in [10, big] {
    var r = BenchResult(scenario: "c-gobject-scale-\(size)", metric: "ns_per_commit", ordo: sc["c-handles-\(size)"], target: "none", met: nil)
    r.comparators = [("gobject", sc["gobject-\(size)"]), ("c-strings", sc["c-strings-\(size)"]), ("c-floor", sc["c-floor-\(size)"])]
    r.ratios = [("vs gobject", sc.ratio("gobject-\(size)", "c-handles-\(size)")), ("c-strings vs gobject", sc.ratio("c-strings-\(size)", "gobject-\(size)"))]
    results.append(r)
  }
  let cGrowth = sc.ratio("c-handles-\(big)", "c-handles-10"), gGrowth = sc.ratio("gobject-\(big)", "gobject-10")
  var gr = BenchResult(scenario: "c-gobject-scale", metric: "growth_10_to_\(big)", ordo: cGrowth, target: growthTarget, met: cGrowth <= gGrowth)
  let floorGrowth = sc.ratio("c-floor-\(big)", "c-floor-10")
  gr.comparators = [("gobject", gGrowth), ("c-strings", sc.ratio("c-strings-\(big)", "c-strings-10")), ("c-floor", floorGrowth)]
  // The growth in nanoseconds beside the ratio: GObject's 10-object commit
  // is several times slower than Ordo's, so the same added memory latency
  // is a smaller multiple of it (docs/measurements/2026-12-01-c-abi-against-gobject.md).
  let cAdded = sc["c-handles-\(big)"] - sc["c-handles-10"], gAdded = sc["gobject-\(big)"] - sc["gobject-10"]
  // The floor of the ratio: Ordo's 10-contract commit plus only what
  // memory latency adds to the floor dispatcher of ordo-c-bench's `floor`
  // (the least a thread-safe bus does: a lock per write, one keypath and
  // one contract record per change, in dense arrays). A bus as fast as Ordo
  // at 10 that reached no more cache lines than that would show this
  // growth; where it is above GObject's, the target is out of reach for
  // it, and the floor proves it.
  let floorAdded = sc["c-floor-\(big)"] - sc["c-floor-10"]
  let floor = (sc["c-handles-10"] + max(0, floorAdded)) / sc["c-handles-10"]
  gr.ratios = [
    ("vs gobject", cGrowth / gGrowth), ("ns added 10 -> \(big), c-handles vs gobject", cAdded / gAdded),
    ("ns added 10 -> \(big), c-handles vs c-floor", cAdded / floorAdded),
    ("floor: c-handles-10 + c-floor's ns added", floor),
  ]
  results.append(gr)
  return results
}

/// `path` when it names an executable file.
func executable(_ path: String?) -> String? {
  guard let path, !path.isEmpty, access(path, X_OK) == 0 else { return nil }
  return path
}

/// Why a scenario is not available.
struct Unavailable: Error {
  let reason: String
}

/// The ordod and the C program a D-Bus scenario runs, when both are
/// executable; else why the scenario is not available (`missing` when the
/// program is not).
func dbusPrograms(_ s: Settings, _ program: String?, missing: String) throws(Unavailable)
  -> (ordod: String, program: String)
{
  guard let ordod = executable(s.ordod) else { throw Unavailable(reason: "D-Bus bridge not built: no ordod") }
  guard let program = executable(program) else { throw Unavailable(reason: missing) }
  return (ordod, program)
}

/// Starts `ordod` serving `name` with a private dbus-daemon; the child and
/// the daemon's address (nil when ordod did not print it).
func startOrdod(_ ordod: String, name: String, scenario: String, listen: String? = nil) throws
  -> (child: Child, address: String?, direct: String?)
{
  progress("\(scenario): starting \(ordod) with a private dbus-daemon")
  let daemon = try Child(ordod, ["--private", "--name", name, "--log-level", "warning"] + (listen.map { ["--listen", $0] } ?? []))
  var address: String?
  var direct: String?
  while let line = daemon.readLine() {
    if line.hasPrefix("DBUS_SESSION_BUS_ADDRESS=") {
      address = String(line.dropFirst("DBUS_SESSION_BUS_ADDRESS=".count))
      if listen == nil { break }
    }
    if line.hasPrefix("ORDO_ADDRESS=") {
      direct = String(line.dropFirst("ORDO_ADDRESS=".count))
      break
    }
  }
  return (daemon, address, direct)
}

/// Scenario 5: D-Bus. Starts `ordod` with a private dbus-daemon, then runs
/// the C program ordo-dbus-bench (a libdbus observer) against it, which
/// starts ordo-host-bench (a C program publishing its own bus through
/// libordo.so) on the same daemon. `notify_per_s`: Notify signals per second
/// reaching the remote observer while the publishing process commits,
/// against raw libdbus signals of the same signature sent by that process
/// (built the usual way, and built body first as OrdoDBus builds Notify).
/// `notify_per_s_via_commit`: the same when every change is a remote
/// `Commit` call to ordod. `roundtrip_us`: Commit→Notify against a raw
/// signal's trip and a Get call's. The `dbus-direct` rows: the same ordod
/// also listens on a socket of its own (`--listen`), and the same rounds
/// measure the `Get` round trip, write-and-wait (`Commit`→reply), the
/// Commit→Notify rate and trip over a direct connection against the bus
/// daemon's. See Benchmarks/c/ordo-dbus-bench.c.
func runDBus(_ s: Settings) throws -> [BenchResult] {
  let target = "vs raw-libdbus-signals >= 0.8"
  func unavailable(_ reason: String) -> [BenchResult] {
    [
      .unavailable("dbus", "notify_per_s", target: target, reason: reason),
      .unavailable("dbus", "notify_per_s_via_commit", target: "none", reason: reason),
      .unavailable("dbus", "roundtrip_us", target: "none", reason: reason),
      .unavailable("dbus-direct", "get_roundtrip_us", target: directGetTarget, reason: reason),
      .unavailable("dbus-direct", "notify_per_s_via_commit", target: directNotifyTarget, reason: reason),
    ]
  }
  let ordod: String, bench: String
  do {
    (ordod, bench) = try dbusPrograms(s, s.dbusBench, missing: "no D-Bus benchmark program: `make bench` builds it with libdbus-1-dev")
  } catch { return unavailable(error.reason) }
  let host = executable(s.hostBench)
  let name = "dev.ordo.Bench"
  let socket = "/tmp/ordo-bench-\(getpid()).socket"
  let (daemon, started, direct) = try startOrdod(ordod, name: name, scenario: "dbus", listen: "unix:path=\(socket)")
  defer {
    daemon.process.terminate()
    daemon.finish()
  }
  guard let address = started, let direct else { return unavailable("ordod did not start") }
  let (rounds, batch, samples) = s.quick ? (3, 300, 30) : (s.reps, 2_000, 100)
  progress("dbus: measuring (\(rounds) rounds of \(batch) notifications and \(samples) round trips)")
  let client = try Child(bench, ["--direct", direct, address, name, "\(rounds)", "\(batch)", "\(samples)"] + (host.map { [$0] } ?? []))
  let figures = client.figures()
  guard client.process.terminationStatus == 0,
    let raw = figures["raw_signals_per_s"], let viaCommit = figures["ordo_commit_notify_per_s"],
    let viaCommitRatio = figures["ordo_commit_vs_raw"],
    let rt = figures["ordo_roundtrip_us"], let rawRT = figures["raw_signal_us"], let get = figures["get_roundtrip_us"],
    let wait = figures["commit_wait_us"], let directRate = figures["direct_commit_notify_per_s"],
    let directRateRatio = figures["direct_vs_daemon_notify"], let directRT = figures["direct_roundtrip_us"],
    let directGet = figures["direct_get_roundtrip_us"], let directWait = figures["direct_commit_wait_us"]
  else {
    // The program checks that every batch delivered what was sent.
    check(false, "dbus: the D-Bus benchmark program failed (exit \(client.process.terminationStatus))")
    return []
  }
  var notify: BenchResult
  if let rate = figures["ordo_notify_per_s"], let ratio = figures["ordo_vs_raw"],
    let bodyFirst = figures["raw_body_first_per_s"], let bodyFirstRatio = figures["ordo_vs_raw_body_first"]
  {
    notify = BenchResult(scenario: "dbus", metric: "notify_per_s", ordo: rate, target: target, met: ratio >= 0.8)
    notify.comparators = [("raw-libdbus-signals", raw), ("raw-libdbus-signals-body-first", bodyFirst)]
    notify.ratios = [("vs raw-libdbus-signals", ratio), ("vs raw-libdbus-signals-body-first", bodyFirstRatio)]
  } else {
    notify = .unavailable("dbus", "notify_per_s", target: target, reason: "no host program: `make bench` builds ordo-host-bench against the installed libordo.so")
  }
  // Without the host, the raw signals come from the observer's own process.
  let rawName = host == nil ? "raw-libdbus-signals-observer-process" : "raw-libdbus-signals"
  var commit = BenchResult(scenario: "dbus", metric: "notify_per_s_via_commit", ordo: viaCommit, target: "none", met: nil)
  commit.comparators = [(rawName, raw)]
  commit.ratios = [("vs \(rawName)", viaCommitRatio)]
  var latency = BenchResult(scenario: "dbus", metric: "roundtrip_us", ordo: rt, target: "none", met: nil)
  latency.comparators = [("raw-libdbus-signal", rawRT), ("get-method-roundtrip", get)]
  latency.ratios = [("vs raw-libdbus-signal", rt / rawRT), ("vs get-method-roundtrip", rt / get)]
  var directGetRow = BenchResult(
    scenario: "dbus-direct", metric: "get_roundtrip_us", ordo: directGet, target: directGetTarget, met: directGet / get <= 0.6)
  directGetRow.comparators = [("daemon", get)]
  directGetRow.ratios = [("vs daemon", directGet / get)]
  var directWaitRow = BenchResult(scenario: "dbus-direct", metric: "commit_wait_us", ordo: directWait, target: "none", met: nil)
  directWaitRow.comparators = [("daemon", wait)]
  directWaitRow.ratios = [("vs daemon", directWait / wait)]
  var directNotifyRow = BenchResult(
    scenario: "dbus-direct", metric: "notify_per_s_via_commit", ordo: directRate, target: directNotifyTarget, met: directRateRatio >= 1.5)
  directNotifyRow.comparators = [("daemon", viaCommit)]
  directNotifyRow.ratios = [("vs daemon", directRateRatio)]
  var directTripRow = BenchResult(scenario: "dbus-direct", metric: "roundtrip_us", ordo: directRT, target: "none", met: nil)
  directTripRow.comparators = [("daemon", rt)]
  directTripRow.ratios = [("vs daemon", directRT / rt)]
  return [notify, commit, latency, directGetRow, directWaitRow, directNotifyRow, directTripRow]
}

/// The direct connection's targets (SPEC §16): a `Get` round trip at most
/// 0.6× the bus daemon's, a Commit→Notify rate at least 1.5× its.
let directGetTarget = "vs daemon <= 0.6"
let directNotifyTarget = "vs daemon >= 1.5"
