/// A value held by a keypath: bool, int64, double, UTF-8 string or bytes
/// (SPEC §2).
///
/// Equality is the bus's notion of "no change": the same type and the same
/// content, doubles compared bit for bit (so `0.0 != -0.0` and a NaN equals
/// the same NaN).
public enum Value: Hashable, Sendable, CustomStringConvertible {
  /// A boolean.
  case bool(Bool)
  /// A signed 64-bit integer.
  case int64(Int64)
  /// An IEEE 754 double, compared bit for bit.
  case double(Double)
  /// A UTF-8 string.
  case string(String)
  /// Arbitrary bytes.
  case bytes([UInt8])

  /// The name of the value's type as used in messages and the conformance
  /// format: `bool`, `int64`, `double`, `string` or `bytes`.
  public var typeName: String {
    switch self {
    case .bool: "bool"
    case .int64: "int64"
    case .double: "double"
    case .string: "string"
    case .bytes: "bytes"
    }
  }

  /// Bit-for-bit equality (SPEC §2).
  public static func == (a: Value, b: Value) -> Bool {
    switch (a, b) {
    case (.bool(let x), .bool(let y)): x == y
    case (.int64(let x), .int64(let y)): x == y
    case (.double(let x), .double(let y)): x.bitPattern == y.bitPattern
    case (.string(let x), .string(let y)): x.utf8.elementsEqual(y.utf8)
    case (.bytes(let x), .bytes(let y)): x == y
    default: false
    }
  }

  /// Hashes consistently with bit-for-bit equality.
  public func hash(into h: inout Hasher) {
    switch self {
    case .bool(let x): h.combine(0); h.combine(x)
    case .int64(let x): h.combine(1); h.combine(x)
    case .double(let x): h.combine(2); h.combine(x.bitPattern)
    case .string(let x): h.combine(3); for b in x.utf8 { h.combine(b) }
    case .bytes(let x): h.combine(4); h.combine(x)
    }
  }

  /// A short human-readable rendering, e.g. `int64 5` or `string "a"`.
  public var description: String {
    switch self {
    case .bool(let x): "bool \(x)"
    case .int64(let x): "int64 \(x)"
    case .double(let x): "double \(x)"
    case .string(let x): "string \"\(x)\""
    case .bytes(let x): "bytes \(x.count)"
    }
  }
}
