#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The hash of a byte string, for the bus's keypath, name and segment
/// tables: a multiply–xor hash over 8-byte words (a few instructions per
/// word, where `Hasher`'s SipHash costs about ten times as much), seeded per
/// process so that a peer cannot choose keypaths that collide in advance.
@inline(__always)
func hashBytes(_ p: UnsafeRawBufferPointer) -> UInt64 {
  let m: UInt64 = 0x9E37_79B9_7F4A_7C15
  var h = hashSeed ^ (UInt64(truncatingIfNeeded: p.count) &* m)
  var i = 0
  let n = p.count
  while i + 8 <= n {
    let w = p.loadUnaligned(fromByteOffset: i, as: UInt64.self)
    h = (h ^ w) &* m
    h ^= h >> 29
    i += 8
  }
  if i < n {
    var w: UInt64 = 0
    var shift: UInt64 = 0
    while i < n {
      w |= UInt64(p[i]) << shift
      shift += 8
      i += 1
    }
    h = (h ^ w) &* m
    h ^= h >> 29
  }
  h = (h ^ (h >> 32)) &* 0xBF58_476D_1CE4_E5B9
  return h ^ (h >> 31)
}

/// The hash of a string's UTF-8 bytes (see ``hashBytes(_:)``).
@inline(__always)
func hashString(_ s: String) -> UInt64 {
  if let h = s.utf8.withContiguousStorageIfAvailable({ hashBytes(UnsafeRawBufferPointer($0)) }) { return h }
  return Array(s.utf8).withUnsafeBytes(hashBytes)
}

/// Whether a string's UTF-8 bytes equal `p`.
@inline(__always)
func equalBytes(_ s: String, _ p: UnsafeRawBufferPointer) -> Bool {
  if let eq = s.utf8.withContiguousStorageIfAvailable({ b -> Bool in
    b.count == p.count && (b.count == 0 || memcmp(b.baseAddress!, p.baseAddress!, b.count) == 0)
  }) {
    return eq
  }
  return s.utf8.elementsEqual(p)
}

/// The process's hash seed, drawn once.
let hashSeed: UInt64 = UInt64.random(in: .min ... .max)

/// An open-addressing hash table of class references, probed linearly,
/// whose keys live in the objects themselves: the caller passes the hash
/// and a test for its key. Each slot keeps a 32-bit tag, the hash's high
/// bits, beside the reference: a probe compares keys only on a tag match,
/// so it rarely touches objects other than the one looked up, and the slot
/// is the tag's top bits, so growing needs no hash recomputed. 12 bytes a
/// slot, at most three quarters full: about 20 bytes an entry, half what a
/// `Dictionary` with a `String` key takes.
struct RefTable<T: AnyObject> {
  private var tags: [UInt32] = []
  private var refs: [T?] = []
  /// 32 - log2(slots).
  private var shift: UInt32 = 32
  /// Entries stored.
  private(set) var count = 0
  /// Entries plus tombstones.
  private var used = 0

  @inline(__always) private static var empty: UInt32 { 0 }
  @inline(__always) private static var tombstone: UInt32 { 1 }

  @inline(__always) private static func tag(_ h: UInt64) -> UInt32 { max(2, UInt32(truncatingIfNeeded: h >> 32)) }

  /// The entry with hash `h` for which `matches` holds.
  @inline(__always)
  func find(_ h: UInt64, _ matches: (T) -> Bool) -> T? {
    if count == 0 { return nil }
    let t = RefTable.tag(h)
    let mask = tags.count - 1
    var i = Int(t >> shift)
    return tags.withUnsafeBufferPointer { tags in
      refs.withUnsafeBufferPointer { refs in
        while true {
          let s = tags[i]
          if s == RefTable.empty { return nil }
          if s == t, let r = refs[i], matches(r) { return r }
          i = (i + 1) & mask
        }
      }
    }
  }

  /// Adds an entry whose key is not in the table.
  mutating func insert(_ x: T, _ h: UInt64) {
    if (used + 1) * 4 > tags.count * 3 { resize(minimum: count + 1) }
    put(x, RefTable.tag(h))
    count += 1
  }

  private mutating func put(_ x: T, _ t: UInt32) {
    let mask = tags.count - 1
    var i = Int(t >> shift)
    while tags[i] > RefTable.tombstone { i = (i + 1) & mask }
    if tags[i] == RefTable.empty { used += 1 }
    tags[i] = t
    refs[i] = x
  }

  /// Removes the entry with hash `h` for which `matches` holds; returns it.
  @discardableResult
  mutating func remove(_ h: UInt64, _ matches: (T) -> Bool) -> T? {
    if count == 0 { return nil }
    let mask = tags.count - 1
    let t = RefTable.tag(h)
    var i = Int(t >> shift)
    while tags[i] != RefTable.empty {
      if tags[i] == t, let r = refs[i], matches(r) {
        tags[i] = RefTable.tombstone
        refs[i] = nil
        count -= 1
        if count == 0 {
          self = RefTable()
        } else if count * 8 < tags.count && tags.count > 64 {
          resize(minimum: count)
        }
        return r
      }
      i = (i + 1) & mask
    }
    return nil
  }

  /// Every entry, in no particular order.
  func forEach(_ body: (T) -> Void) {
    for case let r? in refs { body(r) }
  }

  /// Every entry, in no particular order.
  var values: [T] { refs.compactMap { $0 } }

  /// Rehashes into the smallest table at most 3/8 full with `minimum`
  /// entries, dropping tombstones.
  private mutating func resize(minimum: Int) {
    let oldTags = tags
    let oldRefs = refs
    var size = 8
    var bits: UInt32 = 3
    while size * 3 < minimum * 8 {
      size *= 2
      bits += 1
    }
    precondition(bits <= 32, "hash table too large")
    tags = [UInt32](repeating: RefTable.empty, count: size)
    refs = [T?](repeating: nil, count: size)
    shift = 32 - bits
    used = 0
    for j in 0..<oldTags.count where oldTags[j] > RefTable.tombstone {
      put(oldRefs[j]!, oldTags[j])
    }
  }
}

/// The registered contracts in id order (ids only grow, so appending keeps
/// the order), found by binary search: 8 bytes a contract where a hash
/// table takes about 20. An unregistered contract stays until more than
/// half the entries are unregistered ones; they are then dropped in one
/// sweep.
struct Registry {
  private var all: [ContractState] = []
  /// Registered contracts.
  private(set) var count = 0

  /// Adds a contract with an id above every id added before.
  mutating func append(_ c: ContractState) {
    precondition(all.last.map { $0.id < c.id } ?? true, "contract ids must grow")
    all.append(c)
    count += 1
  }

  /// Notes that a contract was unregistered (its `registered` is false).
  /// With `sweep` (outside passes: a pass's schedule and triggers name
  /// contracts without retaining them, so they must stay alive until it
  /// ends), drops the unregistered ones once they are more than half.
  mutating func removed(sweep: Bool) {
    count -= 1
    if sweep && count * 2 < all.count {
      all.removeAll { !$0.registered }
    }
  }

  /// The registered contract with this id.
  func find(_ id: ContractID) -> ContractState? {
    var lo = 0
    var hi = all.count
    while lo < hi {
      let mid = (lo + hi) / 2
      if all[mid].id < id { lo = mid + 1 } else { hi = mid }
    }
    guard lo < all.count, all[lo].id == id, all[lo].registered else { return nil }
    return all[lo]
  }

  /// The registered contracts, in id order.
  var live: [ContractState] { all.filter(\.registered) }

  /// Calls `body` for every contract still listed (registered or not).
  func forEach(_ body: (ContractState) -> Void) { all.forEach(body) }
}

/// The store's keypath table. Unlike ``RefTable`` its slots hold only the
/// node reference (8 bytes): each node keeps its full hash, compared before
/// its key, so a lookup touches the slot's line and the node it needs
/// anyway, one cache line fewer than a separate tag array (this table is on
/// every write's path; a miss in a large store costs more than the
/// instructions of a lookup). The references are not retained: the store's
/// tree of nodes owns them, and a node leaves the table when it leaves the
/// tree.
struct NodeTable {
  private var slots: [Unmanaged<KeyNode>?] = []
  /// 64 - log2(slots).
  private var shift: UInt64 = 64
  /// Nodes stored.
  private(set) var count = 0
  /// Nodes plus tombstones.
  private var used = 0
  /// Marks a removed entry (probing continues past it).
  private let tombstone = Unmanaged.passUnretained(NodeTable.tombstoneNode)
  nonisolated(unsafe) private static let tombstoneNode = KeyNode(key: "", ids: [], hash: 0)

  /// The node with hash `h` whose key `matches`, unretained.
  @inline(__always)
  func find(_ h: UInt64, _ matches: (KeyNode) -> Bool) -> Unmanaged<KeyNode>? {
    if count == 0 { return nil }
    let mask = slots.count - 1
    var i = Int(truncatingIfNeeded: h >> shift)
    while let u = slots[i] {
      if u._withUnsafeGuaranteedRef({ $0.hash == h }) && u.toOpaque() != tombstone.toOpaque() && u._withUnsafeGuaranteedRef(matches) {
        return u
      }
      i = (i + 1) & mask
    }
    return nil
  }

  /// Adds a node whose key is not in the table.
  mutating func insert(_ n: KeyNode) {
    if (used + 1) * 4 > slots.count * 3 { resize(minimum: count + 1) }
    put(.passUnretained(n), n.hash)
    count += 1
  }

  private mutating func put(_ u: Unmanaged<KeyNode>, _ h: UInt64) {
    let mask = slots.count - 1
    var i = Int(truncatingIfNeeded: h >> shift)
    while let x = slots[i], x.toOpaque() != tombstone.toOpaque() { i = (i + 1) & mask }
    if slots[i] == nil { used += 1 }
    slots[i] = u
  }

  /// Removes `n`.
  mutating func remove(_ n: KeyNode) {
    if count == 0 { return }
    let mask = slots.count - 1
    let target = Unmanaged.passUnretained(n).toOpaque()
    var i = Int(truncatingIfNeeded: n.hash >> shift)
    while let x = slots[i] {
      if x.toOpaque() == target {
        slots[i] = tombstone
        count -= 1
        if count == 0 {
          self = NodeTable()
        } else if count * 8 < slots.count && slots.count > 64 {
          resize(minimum: count)
        }
        return
      }
      i = (i + 1) & mask
    }
  }

  /// Rehashes into the smallest table at most 3/8 full with `minimum`
  /// entries, dropping tombstones.
  private mutating func resize(minimum: Int) {
    let old = slots
    var size = 8
    var bits: UInt64 = 3
    while size * 3 < minimum * 8 {
      size *= 2
      bits += 1
    }
    slots = [Unmanaged<KeyNode>?](repeating: nil, count: size)
    shift = 64 - bits
    used = 0
    for case let u? in old where u.toOpaque() != tombstone.toOpaque() {
      put(u, u._withUnsafeGuaranteedRef { $0.hash })
    }
  }
}
