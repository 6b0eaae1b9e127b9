import Foundation

/// One line of the report: this project's figure next to its comparators,
/// measured in the same run.
///
/// Ratios: against a competitor (NotificationCenter, Observation, the scan)
/// the ratio is competitor ÷ Ordo, "how many times better Ordo is"; against a
/// baseline of the same work (Ordo with 10 contracts, the Swift API for the C
/// ABI, the bare loop of indirect calls, a plain array, raw libdbus, a plain
/// D-Bus method call) it is Ordo ÷ baseline: "how many times the baseline it
/// costs", or for a rate (notify_per_s) the share of the baseline's rate. Each ratio
/// is named after its comparator ("vs scan-all"). Ratios of timed figures
/// are medians of the per-round ratios (see `Measurement.ratio`), so they may
/// differ a little from the ratio of the two medians shown.
struct BenchResult {
  var scenario: String
  var metric: String
  var ordo: Double?
  var comparators: [(String, Double)] = []
  var ratios: [(String, Double)] = []
  var target: String
  /// nil when the line has no target or could not be measured.
  var met: Bool?

  /// A scenario that could not run, with the reason.
  static func unavailable(_ scenario: String, _ metric: String, target: String, reason: String) -> BenchResult {
    BenchResult(scenario: scenario, metric: metric, ordo: nil, target: "\(target); not available (\(reason))", met: nil)
  }
}

/// Formats a figure with about three significant digits.
func fmt(_ x: Double) -> String {
  if !x.isFinite { return "-" }
  let a = abs(x)
  if a == 0 { return "0" }
  if a >= 1e6 { return String(format: "%.3g", x).replacingOccurrences(of: "e+0", with: "e").replacingOccurrences(of: "e+", with: "e") }
  if a >= 100 { return String(format: "%.0f", x) }
  if a >= 10 { return String(format: "%.1f", x) }
  if a >= 1 { return String(format: "%.2f", x) }
  return String(format: "%.3g", x)
}

/// The report as an aligned text table.
func table(_ results: [BenchResult]) -> String {
  let header = ["scenario", "metric", "ordo", "comparators", "ratios", "target", "met"]
  var rows: [[String]] = [header]
  for r in results {
    rows.append([
      r.scenario, r.metric, r.ordo.map(fmt) ?? "n/a",
      r.comparators.isEmpty ? "-" : r.comparators.map { "\($0.0) \(fmt($0.1))" }.joined(separator: ", "),
      r.ratios.isEmpty ? "-" : r.ratios.map { "\($0.0) \(fmt($0.1))x" }.joined(separator: ", "),
      r.target,
      r.met.map { $0 ? "yes" : "NO" } ?? "-",
    ])
  }
  var widths = Array(repeating: 0, count: header.count)
  for row in rows { for (i, c) in row.enumerated() { widths[i] = max(widths[i], c.count) } }
  var out = ""
  for (n, row) in rows.enumerated() {
    var line = ""
    for (i, c) in row.enumerated() {
      line += i == row.count - 1 ? c : c + String(repeating: " ", count: widths[i] - c.count + 2)
    }
    out += line + "\n"
    if n == 0 { out += String(repeating: "-", count: widths.reduce(0, +) + 2 * (widths.count - 1)) + "\n" }
  }
  return out
}

/// The report as JSON: `{"machine": …, "results": [{scenario, metric, ordo,
/// comparators, ratios, target, met}, …]}`.
func json(machine: String, _ results: [BenchResult]) -> String {
  func str(_ s: String) -> String {
    var out = "\""
    for u in s.unicodeScalars {
      switch u {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\t": out += "\\t"
      default:
        if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
      }
    }
    return out + "\""
  }
  func num(_ x: Double?) -> String {
    guard let x, x.isFinite else { return "null" }
    return "\(x)"
  }
  func object(_ pairs: [(String, Double)]) -> String {
    "{" + pairs.map { "\(str($0.0)): \(num($0.1))" }.joined(separator: ", ") + "}"
  }
  var lines: [String] = []
  for r in results {
    let met = r.met.map { $0 ? "true" : "false" } ?? "null"
    lines.append(
      "    {\"scenario\": \(str(r.scenario)), \"metric\": \(str(r.metric)), \"ordo\": \(num(r.ordo)), "
        + "\"comparators\": \(object(r.comparators)), \"ratios\": \(object(r.ratios)), "
        + "\"target\": \(str(r.target)), \"met\": \(met)}")
  }
  return "{\n  \"machine\": \(str(machine)),\n  \"results\": [\n" + lines.joined(separator: ",\n") + "\n  ]\n}\n"
}
