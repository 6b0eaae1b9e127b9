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

  /// The id of a segment, or ``unknown`` when it was never interned.
  func lookup(_ s: String) -> UInt32 { ids[s] ?? SegmentTable.unknown }
}

/// A pattern compiled against a bus's segment table.
struct CPattern {
  /// Segment ids before a final `**`; 0 is `*`.
  let ids: [UInt32]
  /// Whether it ends in `**`.
  let isTree: Bool
  /// As written.
  let string: String

  var isConcrete: Bool { !isTree && !ids.contains(SegmentTable.any) }

  @inline(__always) private static func same(_ p: UInt32, _ k: UInt32) -> Bool { p == k || p == SegmentTable.any }

  /// Whether the pattern matches keypath `k` itself.
  func matches(_ k: [UInt32]) -> Bool {
    if isTree ? k.count < ids.count : k.count != ids.count { return false }
    for i in 0..<ids.count where !CPattern.same(ids[i], k[i]) { return false }
    return true
  }

  /// Whether a write to `k` affects a reader of this pattern (SPEC §1).
  func isAffected(by k: [UInt32]) -> Bool {
    if !isTree && k.count > ids.count { return false }
    for i in 0..<min(k.count, ids.count) where !CPattern.same(ids[i], k[i]) { return false }
    return true
  }

  /// Whether some keypath this write pattern allows affects `reader`.
  func mayAffect(reader: CPattern) -> Bool {
    if !reader.isTree && ids.count > reader.ids.count { return false }
    for i in 0..<min(ids.count, reader.ids.count) {
      let a = ids[i], b = reader.ids[i]
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
    if isTree ? b.ids.count < ids.count : b.ids.count != ids.count { return false }
    for i in 0..<ids.count where ids[i] != SegmentTable.any && ids[i] != b.ids[i] { return false }
    return true
  }
}
