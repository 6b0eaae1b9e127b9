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

/// Scenario 4: the work of scenario 2 (1 000 contracts, each transaction
/// changing each of their keypaths once) driven from C through libordo.so,
/// against the same work through the Swift API, measured in the same rounds.
func runCABI(_ s: Settings) throws -> [BenchResult] {
  let target = "vs swift <= 1.3"
  guard let path = s.cBench, !path.isEmpty else {
    return [.unavailable("c-abi", "ns_per_change", target: target, reason: "no C benchmark program: `make bench` builds it when include/ordo.h and `make install` exist")]
  }
  guard access(path, X_OK) == 0 else {
    return [.unavailable("c-abi", "ns_per_change", target: target, reason: "C benchmark program \(path) not found")]
  }
  let n = 1_000
  progress("c-abi: starting \(path)")
  let child = try Child(path, ["\(n)"])
  defer { child.finish() }
  guard child.readLine() == "ready" else {
    return [.unavailable("c-abi", "ns_per_change", target: target, reason: "C benchmark program \(path) did not start")]
  }
  var cTransactions = 0
  var cCalls = 0
  let swift = try OrdoDelivery(n)
  let variants = [
    Variant("c") { ops in
      child.send("\(ops)")
      guard let line = child.readLine() else {
        eprint("ordo-bench: c-abi: the C benchmark program stopped\n")
        stopChildren()
        exit(2)
      }
      let f = line.split(separator: " ").compactMap { UInt64($0) }
      check(f.count == 2, "c-abi: malformed reply \(line)")
      cTransactions += ops
      cCalls = Int(f[1])
      return f[0]
    },
    Variant("swift") { ops in try swift.run(ops) },
  ]
  progress("c-abi: measuring")
  // Two processes take turns here, so load on the machine hits them
  // unevenly: more and shorter rounds keep each pair close in time.
  var settings = s
  settings.reps = s.quick ? s.reps : 2 * s.reps + 1
  settings.batchNS = s.batchNS / 2
  let m = try measure(variants, settings).per(n)
  swift.verify("c-abi swift")
  check(cCalls == n * cTransactions, "c-abi: C made \(cCalls) calls for \(cTransactions) transactions")
  let ratio = m.ratio("c", "swift")
  var r = BenchResult(scenario: "c-abi", metric: "ns_per_change", ordo: m["c"], target: target, met: ratio <= 1.3)
  r.comparators = [("swift", m["swift"])]
  r.ratios = [("vs swift", ratio)]
  return [r]
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
/// signal's trip and a Get call's. See Benchmarks/c/ordo-dbus-bench.c.
func runDBus(_ s: Settings) throws -> [BenchResult] {
  let target = "vs raw-libdbus-signals >= 0.8"
  func unavailable(_ reason: String) -> [BenchResult] {
    [
      .unavailable("dbus", "notify_per_s", target: target, reason: reason),
      .unavailable("dbus", "notify_per_s_via_commit", target: "none", reason: reason),
      .unavailable("dbus", "roundtrip_us", target: "none", reason: reason),
    ]
  }
  guard let ordod = s.ordod, !ordod.isEmpty, access(ordod, X_OK) == 0 else {
    return unavailable("D-Bus bridge not built: no ordod")
  }
  guard let bench = s.dbusBench, !bench.isEmpty, access(bench, X_OK) == 0 else {
    return unavailable("no D-Bus benchmark program: `make bench` builds it with libdbus-1-dev")
  }
  let host = s.hostBench.flatMap { !$0.isEmpty && access($0, X_OK) == 0 ? $0 : nil }
  let name = "dev.ordo.Bench"
  progress("dbus: starting \(ordod) with a private dbus-daemon")
  let daemon = try Child(ordod, ["--private", "--name", name, "--log-level", "warning"])
  defer {
    daemon.process.terminate()
    daemon.finish()
  }
  var address: String?
  while let line = daemon.readLine() {
    if line.hasPrefix("DBUS_SESSION_BUS_ADDRESS=") {
      address = String(line.dropFirst("DBUS_SESSION_BUS_ADDRESS=".count))
      break
    }
  }
  guard let address else { return unavailable("ordod did not start") }
  let (rounds, batch, samples) = s.quick ? (3, 300, 30) : (s.reps, 2_000, 100)
  progress("dbus: measuring (\(rounds) rounds of \(batch) notifications and \(samples) round trips)")
  let client = try Child(bench, [address, name, "\(rounds)", "\(batch)", "\(samples)"] + (host.map { [$0] } ?? []))
  var figures: [String: Double] = [:]
  while let line = client.readLine() {
    let f = line.split(separator: " ")
    if f.count == 2, let v = Double(f[1]) { figures[String(f[0])] = v }
  }
  client.finish()
  guard client.process.terminationStatus == 0,
    let raw = figures["raw_signals_per_s"], let viaCommit = figures["ordo_commit_notify_per_s"],
    let viaCommitRatio = figures["ordo_commit_vs_raw"],
    let rt = figures["ordo_roundtrip_us"], let rawRT = figures["raw_signal_us"], let get = figures["get_roundtrip_us"]
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
  return [notify, commit, latency]
}
