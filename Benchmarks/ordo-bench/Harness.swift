#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Timing, repetition and machine description shared by every scenario.

/// Monotonic time in nanoseconds.
@inline(__always) func nowNS() -> UInt64 {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

/// The median of `xs` (the mean of the two middle values for an even count).
func median(_ xs: [Double]) -> Double {
  precondition(!xs.isEmpty, "median of nothing")
  let s = xs.sorted()
  let m = s.count / 2
  return s.count % 2 == 1 ? s[m] : (s[m - 1] + s[m]) / 2
}

/// Settings of one run.
struct Settings {
  /// `--quick`: smaller sizes and fewer repetitions.
  var quick = false
  /// Repetitions per measurement; each scenario reports the median.
  var reps = 15
  /// Time one batch (one repetition of one variant) should take, in ns.
  var batchNS: UInt64 = 20_000_000
  /// Scenarios to run (all when empty).
  var only: Set<String> = []
  /// Where to write JSON, if anywhere.
  var jsonPath: String?
  /// The C benchmark program (scenario c-abi).
  var cBench: String?
  /// `ordod` and the C D-Bus benchmark program (scenario dbus).
  var ordod: String?
  var dbusBench: String?
  /// The C program publishing its own bus (scenario dbus, `notify_per_s`).
  var hostBench: String?
  /// The C client's program (scenario dbus-c-client, with `ordod`).
  var clientBench: String?
  /// `--profile WORKLOAD`: only Ordo's side of one workload.
  var profile: String?

  func wants(_ scenario: String) -> Bool { only.isEmpty || only.contains(scenario) }
}

/// One variant of a measurement: runs `ops` operations and returns the
/// elapsed nanoseconds. The variant decides what one operation is (a commit,
/// a transaction); `opsPerBatch` is calibrated so one batch lasts about
/// `Settings.batchNS`.
final class Variant {
  let name: String
  let run: (Int) throws -> UInt64
  var opsPerBatch = 1
  var samples: [Double] = []
  /// Upper bound for the calibrated batch size.
  let maxOps: Int

  init(_ name: String, maxOps: Int = 1_000_000, run: @escaping (Int) throws -> UInt64) {
    self.name = name
    self.maxOps = maxOps
    self.run = run
  }

  /// Runs once for warm-up and sizes the batch from that.
  func calibrate(_ settings: Settings) throws {
    var ops = 1
    // Grow until one batch takes at least a tenth of the target, then scale.
    while true {
      let t = try run(ops)
      if t >= settings.batchNS / 10 || ops >= maxOps {
        let per = Double(max(t, 1)) / Double(ops)
        opsPerBatch = max(1, min(maxOps, Int(Double(settings.batchNS) / per)))
        return
      }
      ops = min(maxOps, ops * 4)
    }
  }

  /// The median time per operation, in ns.
  var nsPerOp: Double { median(samples) }
}

/// Measures the variants together: warms each up, then runs `reps` rounds in
/// which every variant runs one batch, so that slow phases of a loaded
/// machine hit all of them alike.
func measure(_ variants: [Variant], _ settings: Settings, reps: Int? = nil) throws -> Measurement {
  for v in variants { try v.calibrate(settings) }
  for _ in 0..<(reps ?? settings.reps) {
    for v in variants {
      let t = try v.run(v.opsPerBatch)
      v.samples.append(Double(t) / Double(v.opsPerBatch))
    }
  }
  return Measurement(variants: Dictionary(uniqueKeysWithValues: variants.map { ($0.name, $0) }))
}

/// What `measure` found: per variant, the median time per operation; per
/// pair, the median of the ratios of the two variants' times in each round
/// (both measured within a fraction of a second of each other), which is
/// steadier than the ratio of the medians on a loaded machine.
struct Measurement {
  let variants: [String: Variant]
  /// Operations per reported unit (1 000 changes per transaction: 1 000).
  var unit = 1.0

  /// The median time of the variant, in ns per operation ÷ `unit`.
  subscript(_ name: String) -> Double {
    variants[name]!.nsPerOp / unit
  }

  /// The median over rounds of time(a) ÷ time(b).
  func ratio(_ a: String, _ b: String) -> Double {
    let x = variants[a]!.samples, y = variants[b]!.samples
    return median(zip(x, y).map { $0 / $1 })
  }

  /// The same figures per `n`-th of an operation.
  func per(_ n: Int) -> Measurement {
    Measurement(variants: variants, unit: unit * Double(n))
  }
}

/// Stops the run: a benchmark whose work did not happen measures nothing.
func check(_ ok: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
  if !ok() {
    eprint("ordo-bench: check failed: \(message())\n")
    stopChildren()
    exit(2)
  }
}

/// Counts callback invocations. Shared with `@Sendable` callbacks; the
/// benchmark is single-threaded.
final class Sink: @unchecked Sendable {
  var calls = 0
}

/// The machine, for the report: CPU model, cores, kernel.
func machineDescription() -> String {
  var model = "unknown CPU"
  if let text = readText("/proc/cpuinfo") {
    for line in text.split(separator: "\n") where line.hasPrefix("model name") {
      if let colon = line.firstIndex(of: ":") {
        model = line[line.index(after: colon)...].trimmingSpaces()
      }
      break
    }
  }
  let cores = sysconf(Int32(_SC_NPROCESSORS_ONLN))
  var u = utsname()
  uname(&u)
  func field<T>(_ t: T) -> String {
    withUnsafeBytes(of: t) { raw in String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self) }
  }
  var memory = ""
  if let text = readText("/proc/meminfo"), let line = text.split(separator: "\n").first(where: { $0.hasPrefix("MemTotal:") }) {
    let kb = line.split(separator: " ").compactMap { Int($0) }.first ?? 0
    memory = ", \(kb / 1024 / 1024) GiB RAM"
  }
  return "\(model), \(cores) cores\(memory), \(field(u.sysname)) \(field(u.release)) \(field(u.machine))"
}

/// A whole (small) file as text, or nil.
func readText(_ path: String) -> String? {
  guard let f = fopen(path, "r") else { return nil }
  defer { fclose(f) }
  var bytes: [UInt8] = []
  var buf = [UInt8](repeating: 0, count: 65536)
  while true {
    let n = fread(&buf, 1, buf.count, f)
    if n <= 0 { break }
    bytes.append(contentsOf: buf[0..<n])
  }
  return String(decoding: bytes, as: UTF8.self)
}

extension Substring {
  func trimmingSpaces() -> String {
    var s = self
    while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
    while let c = s.last, c == " " || c == "\t" { s.removeLast() }
    return String(s)
  }
}

/// Resident set size of this process, in bytes (/proc/self/statm).
func residentBytes() -> Int {
  guard let text = readText("/proc/self/statm") else { return 0 }
  let fields = text.split(separator: " ")
  guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
  return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// Gives freed heap memory back to the system (glibc `malloc_trim(0)`), so
/// that RSS tracks live memory. Looked up at run time: Glibc's Swift module
/// does not export <malloc.h>.
func trimHeap() {
  typealias Trim = @convention(c) (Int) -> Int32
  if let sym = dlsym(nil, "malloc_trim") {
    _ = unsafeBitCast(sym, to: Trim.self)(0)
  }
}

/// A small deterministic pseudo-random generator (SplitMix64).
struct SplitMix {
  var state: UInt64
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
  mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// Writes to standard error (unbuffered).
func eprint(_ s: String) {
  var s = s
  s.withUTF8 { buf in
    var off = 0
    while off < buf.count {
      let n = write(2, buf.baseAddress! + off, buf.count - off)
      if n <= 0 { return }
      off += n
    }
  }
}
