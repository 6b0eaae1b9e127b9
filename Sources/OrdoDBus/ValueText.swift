// The text syntax of values (`TYPE:TEXT`) used by ordoctl.
import Ordo

/// The text syntax of values used by `ordoctl` (and handy for other tools):
/// `TYPE:TEXT`, or a bare text whose type is inferred.
///
/// | prefix | type | text |
/// | --- | --- | --- |
/// | `b:` `bool:` | bool | `true` `false` `1` `0` `yes` `no` |
/// | `x:` `int64:` `int:` | int64 | decimal, or hex with `0x` |
/// | `d:` `double:` | double | `1.5` `-2e10` `nan` `inf` |
/// | `s:` `string:` | string | the rest, as is (may contain `:` and `=`) |
/// | `ay:` `bytes:` | bytes | hex digits, two per byte (`0aff`), may be empty |
///
/// Without a known prefix: `true`/`false` are bools, an integer is an int64,
/// a number with `.` or an exponent is a double, anything else a string.
public enum ValueText {
  /// Whether `text` starts with a type prefix ``parse(_:)`` knows
  /// (`int64:5`): then its type does not depend on a schema.
  public static func hasTypePrefix(_ text: String) -> Bool { typePrefix(text) != nil }

  /// The type a known prefix of `text` names, and the text after it.
  private static func typePrefix(_ text: String) -> (type: Schema.ValueType, rest: String)? {
    guard let colon = text.firstIndex(of: ":") else { return nil }
    let type: Schema.ValueType
    switch text[..<colon] {
    case "b", "bool": type = .bool
    case "x", "int64", "int": type = .int64
    case "d", "double": type = .double
    case "s", "string": type = .string
    case "ay", "bytes": type = .bytes
    default: return nil
    }
    return (type, String(text[text.index(after: colon)...]))
  }

  /// `text` read as a value of the type a schema declares for its keypath
  /// (`ordoctl set playlist.total=5` with `playlist.total` an int64), or
  /// as ``parse(_:)`` reads it when it has a type prefix or the keypath
  /// declares no value type.
  public static func parse(_ text: String, declared: Schema.ValueType?) throws(OrdoError) -> Value {
    guard let declared, declared != .event, !hasTypePrefix(text) else { return try parse(text) }
    return try parse(declared.rawValue + ":" + text)
  }

  /// Parses a value.
  ///
  /// - Throws: ``OrdoError/Code/typeMismatch`` when the text does not fit
  ///   the prefix's type.
  public static func parse(_ text: String) throws(OrdoError) -> Value {
    if let (type, rest) = typePrefix(text) {
      switch type {
      case .bool:
        switch rest.lowercased() {
        case "true", "1", "yes": return .bool(true)
        case "false", "0", "no": return .bool(false)
        default: throw OrdoError(.typeMismatch, "\"\(rest)\" is not a bool (true, false, 1, 0, yes, no)")
        }
      case .int64:
        guard let v = parseInt(rest) else { throw OrdoError(.typeMismatch, "\"\(rest)\" is not an int64") }
        return .int64(v)
      case .double:
        guard let v = Double(rest) else { throw OrdoError(.typeMismatch, "\"\(rest)\" is not a double") }
        return .double(v)
      case .string:
        return .string(rest)
      case .bytes, .event:  // no prefix names an event
        guard let b = parseHex(rest) else {
          throw OrdoError(.typeMismatch, "\"\(rest)\" is not bytes: give hex digits, two per byte, like 0aff")
        }
        return .bytes(b)
      }
    }
    switch text {
    case "true": return .bool(true)
    case "false": return .bool(false)
    default: break
    }
    if let v = Int64(text) { return .int64(v) }
    if text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), text.first.map({ $0.isNumber || $0 == "-" || $0 == "+" || $0 == "." }) == true,
      let d = Double(text)
    {
      return .double(d)
    }
    return .string(text)
  }

  /// Renders a value as `TYPE:TEXT` (`int64:5`, `string:hello`); with
  /// `quoted`, strings are JSON-quoted (`string:"hello world"`).
  public static func format(_ v: Value, quoted: Bool = false) -> String {
    switch v {
    case .bool(let b): "bool:\(b)"
    case .int64(let x): "int64:\(x)"
    case .double(let d): "double:\(d)"
    case .string(let s): quoted ? "string:" + json(s) : "string:" + s
    case .bytes(let b): "bytes:" + hex(b)
    }
  }

  /// A JSON rendering: `{"type":"int64","value":5}`; doubles that JSON
  /// cannot hold (nan, inf) and bytes (hex) are given as strings.
  public static func jsonValue(_ v: Value) -> String {
    let body: String
    switch v {
    case .bool(let b): body = b ? "true" : "false"
    case .int64(let x): body = String(x)
    case .double(let d): body = d.isFinite ? String(d) : json(String(d))
    case .string(let s): body = json(s)
    case .bytes(let b): body = json(hex(b))
    }
    return "{\"type\":\"\(v.typeName)\",\"value\":\(body)}"
  }

  /// A JSON string literal.
  public static func json(_ s: String) -> String { JSON.quote(s) }

  static func hex(_ b: [UInt8]) -> String { Value.hex(b) }

  static func parseHex(_ s: String) -> [UInt8]? {
    Value.bytes(hex: s.hasPrefix("0x") ? Substring(s).dropFirst(2) : Substring(s))
  }

  private static func parseInt(_ s: String) -> Int64? {
    if let v = Int64(s) { return v }
    var t = Substring(s)
    var negative = false
    if t.hasPrefix("-") {
      negative = true
      t = t.dropFirst()
    }
    guard t.hasPrefix("0x"), let m = UInt64(t.dropFirst(2), radix: 16) else { return nil }
    if negative {
      guard m <= UInt64(Int64.max) + 1 else { return nil }
      return m == UInt64(Int64.max) + 1 ? Int64.min : -Int64(m)
    }
    return Int64(exactly: m)
  }
}
