/// Segment names interned as small integers, per bus, so that keypaths and
/// patterns compare and hash as integers. Id 0 is `*`; an id the table never
/// handed out (``unknown``) stands for a segment no pattern names.
///
/// The names are kept once, in ``names``; the lookup table holds only ids
/// (with a tag of the hash), 8 bytes a slot.
struct SegmentTable {
  static let any: UInt32 = 0
  static let unknown: UInt32 = .max
  private(set) var names: [String] = ["*"]
  /// Slot: hash tag (high 32 bits) and id + 1 (low 32 bits); 0 is empty.
  private var slots: [UInt64] = []
  private var shift: UInt32 = 32

  init() {
    resize()
  }

  @inline(__always) private static func tag(_ h: UInt64) -> UInt64 { max(1, h >> 32) }

  /// The slot holding `s`, or the empty slot where it goes.
  @inline(__always)
  private func slot(_ s: String, _ h: UInt64) -> (index: Int, id: UInt32?) {
    let t = SegmentTable.tag(h)
    let mask = slots.count - 1
    var i = Int(UInt32(truncatingIfNeeded: t) >> shift)
    while true {
      let x = slots[i]
      if x == 0 { return (i, nil) }
      if x >> 32 == t {
        let id = UInt32(truncatingIfNeeded: x) - 1
        if names[Int(id)] == s { return (i, id) }
      }
      i = (i + 1) & mask
    }
  }

  mutating func intern(_ s: String) -> UInt32 {
    let h = hashString(s)
    let (i, found) = slot(s, h)
    if let found { return found }
    let id = UInt32(names.count)
    names.append(s)
    slots[i] = SegmentTable.tag(h) << 32 | UInt64(id + 1)
    if names.count * 4 > slots.count * 3 { resize() }
    return id
  }

  private mutating func resize() {
    let (size, bits) = tableSize(for: names.count + 1)
    slots = [UInt64](repeating: 0, count: size)
    shift = UInt32(32 - bits)
    for (id, name) in names.enumerated() {
      let h = hashString(name)
      let (i, _) = slot(name, h)
      slots[i] = SegmentTable.tag(h) << 32 | UInt64(id + 1)
    }
  }

  /// The name of an id ("*" for 0).
  func name(_ id: UInt32) -> String { Int(id) < names.count ? names[Int(id)] : "?" }

  /// The id of a segment, or ``unknown`` when it was never interned.
  func lookup(_ s: String) -> UInt32 { slot(s, hashString(s)).id ?? SegmentTable.unknown }
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

  init<C: RandomAccessCollection<UInt32>>(ids: C, isTree: Bool) where C.Index == Int {
    var v = SIMD4<UInt32>(repeating: 0)
    let base = ids.startIndex
    for i in 0..<min(4, ids.count) { v[i] = ids[base + i] }
    inline = v
    overflow = ids.count > 4 ? Array(ids[(base + 4)...]) : []
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

/// A contract's compiled read and write patterns in one flat array (one
/// allocation for all of them; none when there are none): the word where
/// the write patterns start, then each pattern as a header word (segment
/// count, bit 31 set for a final `**`) followed by its segment ids.
/// ``reads`` and ``writes`` are views of it.
struct PatternStore {
  private let words: [UInt32]

  init(reads: [CPattern], writes: [CPattern]) {
    guard !reads.isEmpty || !writes.isEmpty else {
      words = []
      return
    }
    var w: [UInt32] = [0]
    w.reserveCapacity(1 + (reads.count + writes.count) * 4)
    func add(_ p: CPattern) {
      w.append(UInt32(p.count) | (p.isTree ? 1 << 31 : 0))
      for j in 0..<p.count { w.append(p[j]) }
    }
    reads.forEach(add)
    w[0] = UInt32(w.count)
    writes.forEach(add)
    words = w
  }

  var reads: PatternList { PatternList(words: words, start: words.isEmpty ? 0 : 1, end: words.isEmpty ? 0 : Int(words[0])) }
  var writes: PatternList { PatternList(words: words, start: words.isEmpty ? 0 : Int(words[0]), end: words.count) }
}

/// Read or write patterns of a ``PatternStore``, in declaration order. Its
/// indices are word offsets: use `enumerated()` for ordinals.
struct PatternList: Collection {
  fileprivate let words: [UInt32]
  let startIndex: Int
  let endIndex: Int

  fileprivate init(words: [UInt32], start: Int, end: Int) {
    self.words = words
    startIndex = start
    endIndex = end
  }

  func index(after i: Int) -> Int { i + 1 + Int(words[i] & 0x7FFF_FFFF) }

  subscript(i: Int) -> CPattern {
    let header = words[i]
    let n = Int(header & 0x7FFF_FFFF)
    return words.withUnsafeBufferPointer { b in
      CPattern(ids: UnsafeBufferPointer(rebasing: b[(i + 1)..<(i + 1 + n)]), isTree: header >> 31 != 0)
    }
  }
}
