/// The schema's JSON form (`docs/schema.md`): reading a document into
/// declarations, each problem named with its entry, and writing the
/// canonical text.
///
/// ```json
/// {"ordo-schema": 1,
///  "keys": {"playlist.mode": {"type": "string", "choices": ["list", "grid"], "default": "list"}}}
/// ```
///
/// Values are JSON values of the declared type; a `bytes` value is a string
/// of hex digits (`"00ff"`), as in the conformance format. A `double` takes
/// any JSON number, an `int64` only one written without fraction or
/// exponent.
enum SchemaFile {
  /// The format version this reader understands.
  static let version: Int64 = 1
  /// The fields of an entry, in the order the canonical text writes them.
  static let fields = ["type", "default", "min", "max", "choices", "max-length", "description"]

  static func declarations(_ doc: JSON) throws(OrdoError) -> [Schema.Declaration] {
    func fail(_ why: String) -> OrdoError { OrdoError(.schema, "schema: \(why)") }
    guard case .object(let top) = doc else { throw fail("the document is \(doc.kind), not an object") }
    var keys: [(key: String, value: JSON)]?
    var version: Int64?
    for (name, value) in top {
      switch name {
      case "ordo-schema":
        guard case .integer(let v) = value else { throw fail("\"ordo-schema\" is \(value.kind), not the format version 1") }
        version = v
      case "keys":
        guard case .object(let k) = value else { throw fail("\"keys\" is \(value.kind), not an object of declarations") }
        keys = k
      default:
        throw fail("unknown field \(JSON.quote(name)) (a schema has \"ordo-schema\" and \"keys\")")
      }
    }
    guard let version else { throw fail("no \"ordo-schema\" field: a schema starts with \"ordo-schema\": 1") }
    guard version == SchemaFile.version else { throw fail("format version \(version) is not supported (this reader understands 1)") }
    guard let keys else { throw fail("no \"keys\" field: a schema declares its keypaths in \"keys\"") }
    var out: [Schema.Declaration] = []
    out.reserveCapacity(keys.count)
    for (keypath, entry) in keys { out.append(try declaration(keypath, entry)) }
    return out
  }

  private static func declaration(_ keypath: String, _ entry: JSON) throws(OrdoError) -> Schema.Declaration {
    func fail(_ why: String) -> OrdoError { Schema.entryError(keypath, why) }
    guard case .object(let members) = entry else { throw fail("the entry is \(entry.kind), not an object with a \"type\"") }
    var fields: [String: JSON] = [:]
    for (name, value) in members {
      guard SchemaFile.fields.contains(name) else {
        throw fail("unknown field \(JSON.quote(name)) (fields: \(SchemaFile.fields.joined(separator: ", ")))")
      }
      fields[name] = value
    }
    guard let typeField = fields["type"] else { throw fail("no \"type\" (one of \(typeNames))") }
    guard case .string(let typeName) = typeField, let type = Schema.ValueType(rawValue: typeName) else {
      throw fail("unknown type \(typeField.text) (one of \(typeNames))")
    }
    for name in SchemaFile.fields where fields[name] != nil {
      if let why = Schema.Declaration.refusal(of: name, for: type) { throw fail(why) }
    }
    func value(_ field: String, _ json: JSON) throws(OrdoError) -> Value {
      switch (type, json) {
      case (.bool, .bool(let b)): return .bool(b)
      case (.int64, .integer(let i)): return .int64(i)
      case (.double, .integer(let i)): return .double(Double(i))
      case (.double, .number(let d)): return .double(d)
      case (.string, .string(let s)):
        guard !s.utf8.contains(0) else { throw fail("\(field) holds a NUL character, which no string value may hold") }
        return .string(s)
      case (.bytes, .string(let hex)):
        guard let b = Value.bytes(hex: hex) else { throw fail("\(field) \(JSON.quote(hex)) is not an even number of hex digits (bytes are written in hex)") }
        return .bytes(b)
      default: throw fail("\(field) \(json.text) is \(json.kind), not \(Schema.article(type.rawValue))")
      }
    }
    let defaultValue = try fields["default"].map { (j) throws(OrdoError) in try value("default", j) }
    let minimum = try fields["min"].map { (j) throws(OrdoError) in try value("min", j) }
    let maximum = try fields["max"].map { (j) throws(OrdoError) in try value("max", j) }
    var choices: [Value] = []
    if let c = fields["choices"] {
      guard case .array(let items) = c, !items.isEmpty else { throw fail("choices is \(c.text), not a non-empty array") }
      for item in items { choices.append(try value("choice", item)) }
    }
    var maxLength: Int?
    if let m = fields["max-length"] {
      guard case .integer(let n) = m, n >= 0, n <= Int64(Int32.max) else { throw fail("max-length \(m.text) is not a whole number from 0 to \(Int32.max)") }
      maxLength = Int(n)
    }
    var description: String?
    if let d = fields["description"] {
      guard case .string(let s) = d else { throw fail("description is \(d.kind), not a string") }
      description = s
    }
    return try Schema.Declaration(
      keypath, type: type, default: defaultValue, min: minimum, max: maximum, choices: choices, maxLength: maxLength,
      description: description)
  }

  private static var typeNames: String { Schema.ValueType.allCases.map(\.rawValue).joined(separator: ", ") }

  // MARK: - Canonical text

  static func text(_ schema: Schema) -> String {
    var out = "{\n  \"ordo-schema\": \(version),\n  \"keys\": {"
    for (i, d) in schema.declarations.enumerated() {
      out += i == 0 ? "\n" : ",\n"
      out += "    \(JSON.quote(d.keypath)): {\"type\": \(JSON.quote(d.type.rawValue))"
      if let v = d.defaultValue { out += ", \"default\": \(literal(v))" }
      if let v = d.minimum { out += ", \"min\": \(literal(v))" }
      if let v = d.maximum { out += ", \"max\": \(literal(v))" }
      if !d.choices.isEmpty { out += ", \"choices\": [\(d.choices.map(literal).joined(separator: ", "))]" }
      if let m = d.maxLength { out += ", \"max-length\": \(m)" }
      if let s = d.description { out += ", \"description\": \(JSON.quote(s))" }
      out += "}"
    }
    return out + (schema.declarations.isEmpty ? "}\n}\n" : "\n  }\n}\n")
  }

  /// A value as a JSON literal that reads back to the same value; a double
  /// always with a fraction or exponent.
  static func literal(_ v: Value) -> String {
    switch v {
    case .bool(let b): String(b)
    case .int64(let i): String(i)
    case .double(let d):
      // Swift prints the shortest text that reads back bit for bit.
      d.description.contains(where: { $0 == "." || $0 == "e" }) ? d.description : d.description + ".0"
    case .string(let s): JSON.quote(s)
    case .bytes(let b): "\"" + Value.hex(b) + "\""
    }
  }
}

extension JSON {
  /// The value as short text for messages.
  var text: String {
    switch self {
    case .null: "null"
    case .bool(let b): String(b)
    case .integer(let i): String(i)
    case .number(let d): String(d)
    case .string(let s): JSON.quote(s)
    case .array: "an array"
    case .object: "an object"
    }
  }
}

extension Value {
  /// Bytes written as hex digits, two per byte, either case (`"00ff"`;
  /// `""` is empty bytes), or nil: the one reading of hex text for the
  /// schema format, the conformance format and `ordoctl`'s values.
  package static func bytes(hex: some StringProtocol) -> [UInt8]? {
    let digits = Array(hex.utf8)
    guard digits.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    out.reserveCapacity(digits.count / 2)
    var i = 0
    while i < digits.count {
      guard let hi = nibble(digits[i]), let lo = nibble(digits[i + 1]) else { return nil }
      out.append(hi << 4 | lo)
      i += 2
    }
    return out
  }

  /// Bytes as lowercase hex digits, two per byte.
  package static func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    var s = ""
    s.reserveCapacity(bytes.count * 2)
    for x in bytes {
      s.append(digits[Int(x >> 4)])
      s.append(digits[Int(x & 15)])
    }
    return s
  }

  private static func nibble(_ c: UInt8) -> UInt8? {
    switch c {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
    default: nil
    }
  }
}
