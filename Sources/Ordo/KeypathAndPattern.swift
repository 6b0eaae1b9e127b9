/// A validated keypath: 1–32 segments of `[A-Za-z0-9_-]` joined by `.`,
/// at most 256 bytes in all (SPEC §1).
///
/// Keypaths name properties of a model independently of whether the model
/// object that holds them exists. The bus takes keypaths as `String`s and
/// validates them on every call; use this type to validate one ahead of time
/// or to look at its segments.
public struct Keypath: Hashable, Sendable, CustomStringConvertible {
  /// The most segments a keypath may have.
  public static let maxSegments = 32
  /// The most bytes (UTF-8) a keypath or pattern may have.
  public static let maxBytes = 256

  /// The keypath as written, for example `doc.items.3.title`.
  public let string: String

  /// Validates `string` as a concrete keypath (no `*` or `**`).
  ///
  /// - Throws: ``OrdoError`` with code ``OrdoError/Code/invalidKeypath`` and a
  ///   message naming the keypath and the offending byte position.
  public init(_ string: String) throws(OrdoError) {
    _ = try Keypath.parse(string, allowWildcards: false)
    self.string = string
  }

  init(unchecked string: String) { self.string = string }

  /// The segments of the keypath, in order.
  public var segments: [Substring] { string.split(separator: ".", omittingEmptySubsequences: false) }

  /// The keypath as written.
  public var description: String { string }

  /// Checks the syntax of a keypath or pattern in one pass over its bytes.
  /// Returns its segments before a final `**` (`*` stays `"*"`) and whether
  /// it ends in `**`.
  static func parse(_ s: String, allowWildcards: Bool) throws(OrdoError) -> (segments: [String], isTree: Bool) {
    let result: Result<([String], Bool), OrdoError>
    if let r = s.utf8.withContiguousStorageIfAvailable({ parseBytes($0, s, allowWildcards) }) {
      result = r
    } else {
      result = Array(s.utf8).withUnsafeBufferPointer { parseBytes($0, s, allowWildcards) }
    }
    switch result {
    case .success(let (segments, tree)): return (segments, tree)
    case .failure(let e): throw e
    }
  }

  private static func parseBytes(_ buf: UnsafeBufferPointer<UInt8>, _ s: String, _ wildcards: Bool) -> Result<([String], Bool), OrdoError> {
    let what = wildcards ? "pattern" : "keypath"
    func fail(_ m: String) -> Result<([String], Bool), OrdoError> {
      .failure(OrdoError(.invalidKeypath, "invalid \(what) \"\(printable(String(s.prefix(80))))\"\(s.count > 80 ? "…" : ""): \(m)"))
    }
    if buf.isEmpty { return fail("a keypath needs at least one segment") }
    if buf.count > maxBytes { return fail("\(buf.count) bytes, the limit is \(maxBytes) (byte \(maxBytes) is past it)") }
    var segments: [String] = []
    segments.reserveCapacity(4)
    var tree = false
    var start = 0
    var stars = 0
    var other = false
    var i = 0
    let n = buf.count
    while i <= n {
      let byte: UInt8 = i < n ? buf[i] : UInt8(ascii: ".")
      switch byte {
      case UInt8(ascii: "."):
        if i == start { return fail("empty segment at byte \(start)") }
        if stars > 0 {
          if stars > 2 { return fail("'***' at byte \(start): '*' and '**' must be whole segments") }
          if !wildcards { return fail("'*' at byte \(start): wildcards are not allowed here") }
          if stars == 2 {
            if i != n { return fail("'**' at byte \(start) is allowed only as the last segment") }
            tree = true
          } else {
            segments.append("*")
          }
        } else {
          segments.append(String(decoding: UnsafeBufferPointer(rebasing: buf[start..<i]), as: UTF8.self))
        }
        if segments.count + (tree ? 1 : 0) > maxSegments {
          return fail("more than \(maxSegments) segments: segment \(maxSegments + 1) starts at byte \(start)")
        }
        start = i + 1
        stars = 0
        other = false
      case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
        if stars > 0 { return fail("'*' at byte \(start) must be a whole segment") }
        other = true
      case UInt8(ascii: "*"):
        if other { return fail("'*' at byte \(i) must be a whole segment") }
        stars += 1
      default:
        return fail("byte \(i) (\(describe(byte))) is not allowed; segments are [A-Za-z0-9_-]")
      }
      i += 1
    }
    return .success((segments, tree))
  }

  static func describe(_ byte: UInt8) -> String {
    if byte >= 0x20 && byte < 0x7f { return "'\(Character(Unicode.Scalar(byte)))'" }
    return "0x" + String(byte, radix: 16)
  }

  /// The string with control characters escaped, for messages.
  static func printable(_ s: String) -> String {
    var out = ""
    for scalar in s.unicodeScalars {
      if scalar.value < 0x20 || scalar.value == 0x7f { out += "\\u{\(String(scalar.value, radix: 16))}" } else { out.unicodeScalars.append(scalar) }
    }
    return out
  }
}

/// A keypath pattern as used in read and write sets: a keypath whose segments
/// may also be `*` (exactly one segment) and whose last segment may be `**`
/// (the node itself and every descendant). `**` alone matches every keypath.
public struct Pattern: Hashable, Sendable, CustomStringConvertible {
  /// One segment of a pattern.
  enum Segment: Hashable, Sendable {
    case literal(String)
    case any
  }

  /// The pattern as written.
  public let string: String
  /// The segments before a final `**`.
  let fixed: [Segment]
  /// Whether the pattern ends in `**`.
  public let isTree: Bool

  /// Validates `string` as a pattern.
  ///
  /// - Throws: ``OrdoError`` with code ``OrdoError/Code/invalidKeypath``.
  public init(_ string: String) throws(OrdoError) {
    let (parts, tree) = try Keypath.parse(string, allowWildcards: true)
    self.string = string
    self.fixed = parts.map { $0 == "*" ? .any : .literal($0) }
    self.isTree = tree
  }

  /// Whether the pattern has no `*` or `**`: a concrete keypath.
  public var isConcrete: Bool {
    !isTree && !fixed.contains(.any)
  }

  /// The pattern as written.
  public var description: String { string }

  /// Whether the pattern matches the keypath `k` itself.
  public func matches(_ k: String) -> Bool {
    matches(segments: k.split(separator: ".", omittingEmptySubsequences: false))
  }

  func matches(segments k: [Substring]) -> Bool {
    if isTree { if k.count < fixed.count { return false } } else if k.count != fixed.count { return false }
    for i in 0..<fixed.count {
      if case .literal(let l) = fixed[i], l != k[i] { return false }
    }
    return true
  }

  /// Whether a write to `k` affects a reader of this pattern (SPEC §1): the
  /// pattern matches `k`, or `k` is a proper ancestor of a keypath the pattern
  /// can match.
  public func isAffected(byWriteTo k: String) -> Bool {
    isAffected(by: k.split(separator: ".", omittingEmptySubsequences: false))
  }

  func isAffected(by k: [Substring]) -> Bool {
    if !isTree && k.count > fixed.count { return false }
    for i in 0..<min(k.count, fixed.count) {
      if case .literal(let l) = fixed[i], l != k[i] { return false }
    }
    return true
  }

  /// Whether some keypath this write pattern may write affects the read
  /// pattern `reader` (SPEC §4: a possible writer of `k` is a possible writer
  /// for every reader a write to `k` affects).
  func mayAffect(reader: Pattern) -> Bool {
    if !reader.isTree && fixed.count > reader.fixed.count { return false }
    for i in 0..<min(fixed.count, reader.fixed.count) {
      if case .literal(let a) = fixed[i], case .literal(let b) = reader.fixed[i], a != b { return false }
    }
    return true
  }

  /// Whether this write pattern allows `removeTree(k)`: it matches `k` and
  /// every descendant of `k`.
  func coversTree(_ k: [Substring]) -> Bool {
    isTree && fixed.count <= k.count && matches(segments: k)
  }
}
