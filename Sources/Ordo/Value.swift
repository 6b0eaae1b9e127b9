#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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
  /// A UTF-8 string without U+0000: a write of one that holds a NUL
  /// character is refused with ``OrdoError/Code/invalidArgument``, since C
  /// (`ordo_get_string`) and D-Bus strings cannot carry it.
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

  /// A type name as messages say it, with its article: "an int64",
  /// "a string", "bytes".
  package static func withArticle(_ typeName: String) -> String {
    switch typeName {
    case "int64": "an int64"
    case "bytes": "bytes"
    default: "a \(typeName)"
    }
  }

  /// Bit-for-bit equality (SPEC §2).
  public static func == (a: Value, b: Value) -> Bool {
    switch (a, b) {
    case (.bool(let x), .bool(let y)): x == y
    case (.int64(let x), .int64(let y)): x == y
    case (.double(let x), .double(let y)): x.bitPattern == y.bitPattern
    case (.string(let x), .string(let y)): Value.sameBytes(x, y)
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
    case .string(let x):
      h.combine(3)
      var copy = x
      copy.withUTF8 { h.combine(bytes: UnsafeRawBufferPointer($0)) }
    case .bytes(let x): h.combine(4); h.combine(x)
    }
  }

  /// Whether two optional values are equal (nil equals nil), as `==`. The
  /// store compares values on every write and in every pass; this decides
  /// the scalar cases inline and calls `==` only for strings and bytes.
  @inline(__always)
  static func same(_ a: Value?, _ b: Value?) -> Bool {
    switch a {
    case .none: return b == nil
    case .some(.int64(let x)): if case .some(.int64(let y)) = b { return x == y } else { return false }
    case .some(.bool(let x)): if case .some(.bool(let y)) = b { return x == y } else { return false }
    case .some(.double(let x)): if case .some(.double(let y)) = b { return x.bitPattern == y.bitPattern } else { return false }
    case .some(let x): if let b { return x == b } else { return false }
    }
  }

  /// Byte-for-byte equality of two strings' UTF-8 (no Unicode
  /// normalization), with one memory comparison.
  static func sameBytes(_ a: String, _ b: String) -> Bool {
    guard a.utf8.count == b.utf8.count else { return false }
    var x = a, y = b
    return x.withUTF8 { p in y.withUTF8 { q in p.count == 0 || memcmp(p.baseAddress!, q.baseAddress!, p.count) == 0 } }
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

/// A value packed the way the store keeps it: a bool, int64 or double
/// inline (kind and 64 bits), a string or bytes only marked (``Kind/boxed``)
/// and kept beside it as a ``Value``. A key node holds its value so, and
/// the journal its start values: a scalar write compares, saves and stores
/// plain bits, with no reference counting and no enum copy.
struct PackedValue: Equatable {
  enum Kind: UInt8 {
    /// Not saved (the journal's start value before the first alteration).
    case none
    /// No value.
    case absent
    case bool, int64, double
    /// A string or bytes, kept beside (`bits` is the journal's index).
    case boxed
  }
  // Bits first: the struct is then 9 bytes, and a node's flags fit in the
  // rest of its 16 (see ``KeyNode``).
  var bits: UInt64 = 0
  var kind = Kind.none

  static let absent = PackedValue(kind: .absent)

  /// A scalar packed, or a string or bytes marked boxed (bits 0).
  @inline(__always)
  init(_ v: Value) {
    switch v {
    case .bool(let x): self.init(kind: .bool, bits: x ? 1 : 0)
    case .int64(let x): self.init(kind: .int64, bits: UInt64(bitPattern: x))
    case .double(let x): self.init(kind: .double, bits: x.bitPattern)
    case .string, .bytes: self.init(kind: .boxed)
    }
  }

  @inline(__always)
  init(kind: Kind, bits: UInt64 = 0) {
    self.kind = kind
    self.bits = bits
  }

  /// A scalar as a value (nil for none, absent and boxed).
  @inline(__always)
  var scalar: Value? {
    switch kind {
    case .none, .absent, .boxed: nil
    case .bool: .bool(bits != 0)
    case .int64: .int64(Int64(bitPattern: bits))
    case .double: .double(Double(bitPattern: bits))
    }
  }
}

/// The error a write of `s` to `keypath` gets when `s` holds U+0000 (see
/// ``Value/string(_:)``), nil when it does not: the core's write paths and
/// the D-Bus merging writer give the same one.
package func nulCharacterError(_ s: String, keypath: @autoclosure () -> String) -> OrdoError? {
  guard let at = s.nulOffset else { return nil }
  return OrdoError(.invalidArgument, "the string for \"\(keypath())\" holds a NUL character (U+0000) at byte \(at): C and D-Bus strings cannot carry one")
}

extension String {
  /// The byte offset of the first U+0000 in the UTF-8 form, nil if none
  /// (see ``Value/string(_:)``).
  package var nulOffset: Int? {
    var s = self
    return s.withUTF8 { b in
      guard let base = b.baseAddress, let p = memchr(base, 0, b.count) else { return nil }
      return UnsafeRawPointer(p) - UnsafeRawPointer(base)
    }
  }
}
