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
  }

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
  }
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
  let m = try measure(variants, s).mapValues { $0 / Double(n) }
  swift.verify("c-abi swift")
  check(cCalls == n * cTransactions, "c-abi: C made \(cCalls) calls for \(cTransactions) transactions")
  var r = BenchResult(scenario: "c-abi", metric: "ns_per_change", ordo: m["c"]!, target: target, met: m["c"]! / m["swift"]! <= 1.3)
  r.comparators = [("swift", m["swift"]!)]
  r.ratios = [("vs swift", m["c"]! / m["swift"]!)]
  return [r]
}

/// Scenario 5: D-Bus notifications.
func runDBus(_ s: Settings) throws -> [BenchResult] {
  [
    BenchResult.unavailable("dbus", "notify_per_s", target: "none", reason: "D-Bus bridge not built"),
    BenchResult.unavailable("dbus", "roundtrip_us", target: "none", reason: "D-Bus bridge not built"),
  ]
}
