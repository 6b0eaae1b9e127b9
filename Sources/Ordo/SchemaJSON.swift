/// A JSON document as the schema reader sees it: objects keep their members
/// in order (a duplicate member is refused while reading), numbers keep
/// whether they were written as integers. The core reads schema text with it
/// and needs nothing else of JSON, so it carries no Foundation dependency.
package enum JSON: Equatable {
  case null
  case bool(Bool)
  /// A number written without fraction or exponent that fits an `Int64`.
  case integer(Int64)
  case number(Double)
  case string(String)
  case array([JSON])
  case object([(key: String, value: JSON)])

  package static func == (a: JSON, b: JSON) -> Bool {
    switch (a, b) {
    case (.null, .null): true
    case (.bool(let x), .bool(let y)): x == y
    case (.integer(let x), .integer(let y)): x == y
    case (.number(let x), .number(let y)): x.bitPattern == y.bitPattern
    case (.string(let x), .string(let y)): x == y
    case (.array(let x), .array(let y)): x == y
    case (.object(let x), .object(let y)): x.elementsEqual(y) { $0.key == $1.key && $0.value == $1.value }
    default: false
    }
  }

  /// What the value is, for messages: `a string`, `an object`, …
  var kind: String {
    switch self {
    case .null: "null"
    case .bool: "a boolean"
    case .integer, .number: "a number"
    case .string: "a string"
    case .array: "an array"
    case .object: "an object"
    }
  }

  /// Parses one JSON document (RFC 8259), nesting at most 64 deep.
  ///
  /// - Throws: a message naming the byte offset and what was expected.
  static func parse(_ bytes: some Sequence<UInt8>) throws(JSONError) -> JSON {
    var reader = JSONReader(Array(bytes))
    reader.skipSpace()
    let value = try reader.value(depth: 0)
    reader.skipSpace()
    guard reader.atEnd else { throw reader.error("text after the end of the document") }
    return value
  }

  /// Writes a string as a JSON string literal (control characters
  /// escaped, everything else as is).
  package static func quote(_ s: String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\r": out += "\\r"
      case "\t": out += "\\t"
      case _ where scalar.value < 0x20:
        let hex = String(scalar.value, radix: 16)
        out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
      default: out.unicodeScalars.append(scalar)
      }
    }
    return out + "\""
  }
}

/// Why a JSON text does not parse.
struct JSONError: Error {
  let message: String
}

/// The cursor of ``JSON/parse(_:)``.
private struct JSONReader {
  let bytes: [UInt8]
  var at = 0

  init(_ bytes: [UInt8]) { self.bytes = bytes }

  var atEnd: Bool { at >= bytes.count }
  var peek: UInt8? { at < bytes.count ? bytes[at] : nil }

  func error(_ what: String) -> JSONError {
    JSONError(message: "JSON error at byte \(at): \(what)")
  }

  mutating func skipSpace() {
    while let b = peek, b == 0x20 || b == 0x0a || b == 0x0d || b == 0x09 { at += 1 }
  }

  mutating func expect(_ word: String) throws(JSONError) {
    for b in word.utf8 {
      guard peek == b else { throw error("expected \(word)") }
      at += 1
    }
  }

  mutating func value(depth: Int) throws(JSONError) -> JSON {
    guard depth < 64 else { throw error("nested more than 64 deep") }
    guard let b = peek else { throw error("expected a value, found the end of the text") }
    switch b {
    case UInt8(ascii: "{"): return try object(depth: depth)
    case UInt8(ascii: "["): return try array(depth: depth)
    case UInt8(ascii: "\""): return .string(try string())
    case UInt8(ascii: "t"): try expect("true"); return .bool(true)
    case UInt8(ascii: "f"): try expect("false"); return .bool(false)
    case UInt8(ascii: "n"): try expect("null"); return .null
    case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
    default: throw error("unexpected \(Keypath.describe(b))")
    }
  }

  mutating func object(depth: Int) throws(JSONError) -> JSON {
    at += 1
    var members: [(key: String, value: JSON)] = []
    var seen: Set<String> = []
    skipSpace()
    if peek == UInt8(ascii: "}") { at += 1; return .object(members) }
    while true {
      skipSpace()
      guard peek == UInt8(ascii: "\"") else { throw error("expected a member name in quotes") }
      let start = at
      let key = try string()
      guard seen.insert(key).inserted else {
        at = start
        throw error("member \(JSON.quote(key)) appears twice in one object")
      }
      skipSpace()
      guard peek == UInt8(ascii: ":") else { throw error("expected ':' after member \(JSON.quote(key))") }
      at += 1
      skipSpace()
      members.append((key, try value(depth: depth + 1)))
      skipSpace()
      switch peek {
      case UInt8(ascii: ","): at += 1
      case UInt8(ascii: "}"): at += 1; return .object(members)
      default: throw error("expected ',' or '}' in an object")
      }
    }
  }

  mutating func array(depth: Int) throws(JSONError) -> JSON {
    at += 1
    var items: [JSON] = []
    skipSpace()
    if peek == UInt8(ascii: "]") { at += 1; return .array(items) }
    while true {
      skipSpace()
      items.append(try value(depth: depth + 1))
      skipSpace()
      switch peek {
      case UInt8(ascii: ","): at += 1
      case UInt8(ascii: "]"): at += 1; return .array(items)
      default: throw error("expected ',' or ']' in an array")
      }
    }
  }

  mutating func hex4() throws(JSONError) -> UInt32 {
    var v: UInt32 = 0
    for _ in 0..<4 {
      guard let b = peek else { throw error("a \\u escape needs four hex digits") }
      let d: UInt32
      switch b {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(b - UInt8(ascii: "0"))
      case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(b - UInt8(ascii: "a") + 10)
      case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(b - UInt8(ascii: "A") + 10)
      default: throw error("a \\u escape needs four hex digits")
      }
      v = v << 4 | d
      at += 1
    }
    return v
  }

  mutating func string() throws(JSONError) -> String {
    at += 1
    var out: [UInt8] = []
    while true {
      guard let b = peek else { throw error("a string is not closed") }
      switch b {
      case UInt8(ascii: "\""):
        at += 1
        guard let s = String(validating: out, as: UTF8.self) else { throw error("a string is not valid UTF-8") }
        return s
      case UInt8(ascii: "\\"):
        at += 1
        guard let e = peek else { throw error("a string is not closed") }
        at += 1
        switch e {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0c)
        case UInt8(ascii: "n"): out.append(0x0a)
        case UInt8(ascii: "r"): out.append(0x0d)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
          var scalar = try hex4()
          if (0xD800..<0xDC00).contains(scalar) {
            guard peek == UInt8(ascii: "\\") else { throw error("a lone surrogate in a \\u escape") }
            at += 1
            guard peek == UInt8(ascii: "u") else { throw error("a lone surrogate in a \\u escape") }
            at += 1
            let low = try hex4()
            guard (0xDC00..<0xE000).contains(low) else { throw error("a lone surrogate in a \\u escape") }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
          } else if (0xDC00..<0xE000).contains(scalar) {
            throw error("a lone surrogate in a \\u escape")
          }
          guard let u = Unicode.Scalar(scalar) else { throw error("an invalid \\u escape") }
          out.append(contentsOf: Array(String(Character(u)).utf8))
        default: throw error("unknown escape \\\(Keypath.describe(e))")
        }
      case 0..<0x20:
        throw error("a control character inside a string must be escaped")
      default:
        out.append(b)
        at += 1
      }
    }
  }

  mutating func number() throws(JSONError) -> JSON {
    let start = at
    if peek == UInt8(ascii: "-") { at += 1 }
    func digits(_ r: inout JSONReader) -> Int {
      var n = 0
      while let b = r.peek, b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") { r.at += 1; n += 1 }
      return n
    }
    let intStart = at
    let intDigits = digits(&self)
    guard intDigits > 0 else { throw error("expected a digit") }
    if intDigits > 1 && bytes[intStart] == UInt8(ascii: "0") { throw error("a number may not start with 0") }
    var integral = true
    if peek == UInt8(ascii: ".") {
      at += 1
      integral = false
      guard digits(&self) > 0 else { throw error("expected a digit after '.'") }
    }
    if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
      at += 1
      integral = false
      if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { at += 1 }
      guard digits(&self) > 0 else { throw error("expected a digit in the exponent") }
    }
    let text = String(decoding: bytes[start..<at], as: UTF8.self)
    if integral, let i = Int64(text) { return .integer(i) }
    guard let d = Double(text), d.isFinite else { throw error("the number \(text) is out of range") }
    return .number(d)
  }
}
