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
    _ = try Keypath.scan(string, allowWildcards: false)
    self.string = string
  }

  init(unchecked string: String) { self.string = string }

  /// The segments of the keypath, in order.
  public var segments: [Substring] { string.split(separator: ".", omittingEmptySubsequences: false) }

  /// The keypath as written.
  public var description: String { string }

  /// Checks the syntax of a keypath or pattern and returns its segments.
  /// With `allowWildcards`, `*` is accepted as a whole segment and `**` as the
  /// last one.
  static func scan(_ s: String, allowWildcards: Bool) throws(OrdoError) -> [Substring] {
    let what = allowWildcards ? "pattern" : "keypath"
    let utf8 = s.utf8
    if utf8.isEmpty {
      throw OrdoError(.invalidKeypath, "invalid \(what) \"\": a keypath needs at least one segment")
    }
    if utf8.count > maxBytes {
      throw OrdoError(.invalidKeypath, "invalid \(what) \"\(s.prefix(40))…\": \(utf8.count) bytes, the limit is \(maxBytes)")
    }
    // Validate byte by byte: segments are ASCII only.
    var segmentStart = 0
    var position = 0
    var segmentCount = 0
    var starCount = 0
    var other = false
    func endSegment(at end: Int) throws(OrdoError) {
      let length = end - segmentStart
      if length == 0 {
        throw OrdoError(.invalidKeypath, "invalid \(what) \"\(s)\": empty segment at byte \(segmentStart)")
      }
      if starCount > 0 {
        if other || starCount > 2 || !allowWildcards {
          let hint = allowWildcards ? "'*' and '**' must be whole segments" : "wildcards are not allowed here"
          throw OrdoError(.invalidKeypath, "invalid \(what) \"\(s)\": '*' at byte \(segmentStart): \(hint)")
        }
        if starCount == 2 && end != utf8.count {
          throw OrdoError(.invalidKeypath, "invalid \(what) \"\(s)\": '**' at byte \(segmentStart) is allowed only as the last segment")
        }
      }
      segmentCount += 1
      if segmentCount > maxSegments {
        throw OrdoError(.invalidKeypath, "invalid \(what) \"\(s)\": more than \(maxSegments) segments")
      }
    }
    for byte in utf8 {
      switch byte {
      case UInt8(ascii: "."):
        try endSegment(at: position)
        segmentStart = position + 1
        starCount = 0
        other = false
      case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
        other = true
        if starCount > 0 {
          throw OrdoError(.invalidKeypath, "invalid \(what) \"\(s)\": '*' at byte \(segmentStart) must be a whole segment")
        }
      case UInt8(ascii: "*"):
        if other {
          throw OrdoError(.invalidKeypath, "invalid \(what) \"\(s)\": '*' at byte \(position) must be a whole segment")
        }
        starCount += 1
      default:
        throw OrdoError(.invalidKeypath, "invalid \(what) \"\(printable(s))\": byte \(position) (\(describe(byte))) is not allowed; segments are [A-Za-z0-9_-]")
      }
      position += 1
    }
    try endSegment(at: position)
    return s.split(separator: ".", omittingEmptySubsequences: false)
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
    let parts = try Keypath.scan(string, allowWildcards: true)
    var fixed: [Segment] = []
    fixed.reserveCapacity(parts.count)
    var tree = false
    for part in parts {
      if part == "**" { tree = true } else if part == "*" { fixed.append(.any) } else { fixed.append(.literal(String(part))) }
    }
    self.string = string
    self.fixed = fixed
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
