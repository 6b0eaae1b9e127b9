/// Segment names interned as small integers, per bus, so that keypaths and
/// patterns compare and hash as integers. Id 0 is `*`; an id the table never
/// handed out (``unknown``) stands for a segment no pattern names.
struct SegmentTable {
  static let any: UInt32 = 0
  static let unknown: UInt32 = .max
  private var ids: [String: UInt32] = ["*": 0]
  private(set) var names: [String] = ["*"]

  mutating func intern(_ s: String) -> UInt32 {
    if let id = ids[s] { return id }
    let id = UInt32(names.count)
    ids[s] = id
    names.append(s)
    return id
  }

  /// The name of an id ("*" for 0).
  func name(_ id: UInt32) -> String { Int(id) < names.count ? names[Int(id)] : "?" }

  /// The id of a segment, or ``unknown`` when it was never interned.
  func lookup(_ s: String) -> UInt32 { ids[s] ?? SegmentTable.unknown }
}

/// A pattern compiled against a bus's segment table. Up to four segment ids
/// are stored inline (no allocation); longer patterns keep the rest in an
/// array. The text is rebuilt from the segment table when needed.
struct CPattern {
  private let inline: SIMD4<UInt32>
  private let overflow: [UInt32]
  private let length: UInt8
  /// Whether it ends in `**`.
  let isTree: Bool

  init(ids: [UInt32], isTree: Bool) {
    var v = SIMD4<UInt32>(repeating: 0)
    for i in 0..<min(4, ids.count) { v[i] = ids[i] }
    inline = v
    overflow = ids.count > 4 ? Array(ids[4...]) : []
    length = UInt8(ids.count)
    self.isTree = isTree
  }

  /// The number of segment ids before a final `**`.
  var count: Int { Int(length) }

  /// The segment id at `i`; 0 is `*`.
  subscript(i: Int) -> UInt32 { i < 4 ? inline[i] : overflow[i - 4] }

  /// The segment ids, as an array.
  var ids: [UInt32] { (0..<count).map { self[$0] } }

  var isConcrete: Bool { !isTree && !(0..<count).contains { self[$0] == SegmentTable.any } }

  @inline(__always) private static func same(_ p: UInt32, _ k: UInt32) -> Bool { p == k || p == SegmentTable.any }

  /// Whether the pattern matches keypath `k` itself.
  func matches(_ k: [UInt32]) -> Bool {
    if isTree ? k.count < count : k.count != count { return false }
    for i in 0..<count where !CPattern.same(self[i], k[i]) { return false }
    return true
  }

  /// Whether a write to `k` affects a reader of this pattern (SPEC §1).
  func isAffected(by k: [UInt32]) -> Bool {
    if !isTree && k.count > count { return false }
    for i in 0..<min(k.count, count) where !CPattern.same(self[i], k[i]) { return false }
    return true
  }

  /// Whether some keypath this write pattern allows affects `reader`.
  func mayAffect(reader: CPattern) -> Bool {
    if !reader.isTree && count > reader.count { return false }
    for i in 0..<min(count, reader.count) {
      let a = self[i], b = reader[i]
      if a != b && a != SegmentTable.any && b != SegmentTable.any { return false }
    }
    return true
  }

  /// Whether this write pattern allows `removeTree(k)`: `k` and all its
  /// descendants.
  func coversTree(_ k: [UInt32]) -> Bool { isTree && matches(k) }

  /// Whether this pattern matches every keypath `b` matches.
  func covers(_ b: CPattern) -> Bool {
    if b.isTree && !isTree { return false }
    if isTree ? b.count < count : b.count != count { return false }
    for i in 0..<count where self[i] != SegmentTable.any && self[i] != b[i] { return false }
    return true
  }

  /// The pattern as text, with the table's segment names.
  func text(_ table: SegmentTable) -> String {
    var parts = (0..<count).map { table.name(self[$0]) }
    if isTree { parts.append("**") }
    return parts.joined(separator: ".")
  }
}
