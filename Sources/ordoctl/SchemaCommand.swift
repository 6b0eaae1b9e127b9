// ordoctl schema: the service's schema as a tree, and the offline check
// of a schema file (docs/schema.md).
import Ordo
import OrdoDBus

#if canImport(Glibc)
import Glibc
#endif

enum SchemaCommand {
  /// `schema [PATTERN…]` or `schema --check FILE` (run at once, without a
  /// bus: it exits).
  static func make(_ args: [String]) -> (OrdoClient) -> Void {
    let (o, patterns) = parseArguments(args, command: "schema", valued: ["--check"])
    if let file = o["--check"] {
      guard patterns.isEmpty else { fail("schema --check FILE takes no patterns", code: 2) }
      check(file)
    }
    for p in patterns {
      do { _ = try Pattern(p) } catch { fail("schema: \(error.message)", code: 2) }
    }
    return { client in
      run { () throws(OrdoRemoteError) in
        guard let schema = try client.schema else {
          out("the service has no schema")
          return
        }
        var shown: [Schema.Declaration] = []
        do throws(OrdoError) {
          for p in patterns.isEmpty ? ["**"] : patterns {
            for d in try schema.declarations(matching: p) where !shown.contains(d) { shown.append(d) }
          }
        } catch {
          fail("schema: \(error.message)", code: 2)
        }
        for line in tree(shown.sorted { $0.keypath < $1.keypath }) { out(line) }
      }
    }
  }

  /// Validates a schema file: prints its number of keypaths and exits 0, or
  /// the problem and exits 1.
  static func check(_ file: String) -> Never {
    out("\(file): a valid schema of \(read(file).declarations.count) keypath(s)")
    exit(0)
  }

  /// The schema in `file`; a file that cannot be read or does not validate
  /// is a failure (exit 1) naming the problem.
  static func read(_ file: String) -> Schema {
    do throws(OrdoError) { return try Schema(contentsOfFile: file) } catch { fail(error.message) }
  }

  /// The declarations as an indented tree, one segment per level, each
  /// declared keypath with its type, default, constraints and description.
  static func tree(_ declarations: [Schema.Declaration]) -> [String] {
    var lines: [String] = []
    var shown: [String] = []
    for d in declarations {
      let parts = d.keypath.split(separator: ".").map(String.init)
      var common = 0
      while common < min(shown.count, parts.count - 1), shown[common] == parts[common] { common += 1 }
      for i in common..<(parts.count - 1) { lines.append(String(repeating: "  ", count: i) + parts[i]) }
      shown = Array(parts.dropLast())
      lines.append(String(repeating: "  ", count: parts.count - 1) + parts.last! + "  " + describe(d))
    }
    return lines
  }

  static func describe(_ d: Schema.Declaration) -> String {
    var fields = [d.type.rawValue]
    if let v = d.defaultValue { fields.append("default=" + literal(v)) }
    if let v = d.minimum { fields.append("min=" + literal(v)) }
    if let v = d.maximum { fields.append("max=" + literal(v)) }
    if !d.choices.isEmpty { fields.append("choices=" + d.choices.map(literal).joined(separator: ",")) }
    if let m = d.maxLength { fields.append("max-length=\(m)") }
    if let s = d.description { fields.append("# " + s) }
    return fields.joined(separator: " ")
  }

  /// A value as the schema file writes it (the type is in its own column).
  static func literal(_ v: Value) -> String {
    switch v {
    case .string(let s): ValueText.json(s)
    case .bytes(let b): b.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    case .bool(let b): String(b)
    case .int64(let i): String(i)
    case .double(let x): String(x)
    }
  }
}
