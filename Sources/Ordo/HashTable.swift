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
///
/// `seed` is ``hashSeed``; a hot caller passes a copy it keeps (reading the
/// global costs a `swift_once` check per hash).
///
/// The arithmetic wraps and the shifts mask on purpose: the offsets stay
/// within `0...count`, so the overflow checks Swift would add cost about
/// ten instructions per hash and can never fire.
@inline(__always)
func hashBytes(_ p: UnsafeRawBufferPointer, seed: UInt64 = hashSeed) -> UInt64 {
  let m: UInt64 = 0x9E37_79B9_7F4A_7C15
  let n = p.count
  var h = seed ^ (UInt64(truncatingIfNeeded: n) &* m)
  if n > 0 {
    let base = p.baseAddress.unsafelyUnwrapped
    var i = 0
    while i &+ 8 <= n {
      h = (h ^ base.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* m
      h ^= h &>> 29
      i &+= 8
    }
    if i < n {
      var w: UInt64 = 0
      if n >= 8 {
        // The last 8 bytes, shifted so that only the tail's remain: one load
        // instead of a byte loop (the shift is 8 to 56).
        w = base.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self) &>> UInt64(truncatingIfNeeded: 8 &* (8 &- (n &- i)))
      } else {
        var shift: UInt64 = 0
        while i < n {
          w |= UInt64(base.load(fromByteOffset: i, as: UInt8.self)) &<< shift
          shift &+= 8
          i &+= 1
        }
      }
      h = (h ^ w) &* m
      h ^= h &>> 29
    }
  }
  h = (h ^ (h &>> 32)) &* 0xBF58_476D_1CE4_E5B9
  return h ^ (h &>> 31)
}

/// The hash of a string's UTF-8 bytes (see ``hashBytes(_:seed:)``).
@inline(__always)
func hashString(_ s: String, seed: UInt64 = hashSeed) -> UInt64 {
  if let h = s.utf8.withContiguousStorageIfAvailable({ hashBytes(UnsafeRawBufferPointer($0), seed: seed) }) { return h }
  return hashBridged(s, seed)
}

/// The hash of a string without contiguous UTF-8 (bridged), out of line.
@inline(never)
func hashBridged(_ s: String, _ seed: UInt64) -> UInt64 {
  Array(s.utf8).withUnsafeBytes { hashBytes($0, seed: seed) }
}

/// Whether a string's UTF-8 bytes equal `p`.
@inline(__always)
func equalBytes(_ s: String, _ p: UnsafeRawBufferPointer) -> Bool {
  if let eq = s.utf8.withContiguousStorageIfAvailable({ b -> Bool in
    b.count == p.count && (b.count == 0 || sameBytes(UnsafeRawPointer(b.baseAddress.unsafelyUnwrapped), p.baseAddress.unsafelyUnwrapped, b.count))
  }) {
    return eq
  }
  return s.utf8.elementsEqual(p)
}

/// Whether `n` (> 0) bytes at `a` and `b` are equal: 8-byte words, the
/// tail as the last (overlapping) word, `memcmp` below 8 bytes. A keypath
/// of 9 to 16 bytes is two loads a side, where calling `memcmp` costs about
/// 20 instructions (`Benchmarks/profile.sh c-abi`).
@inline(__always)
func sameBytes(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ n: Int) -> Bool {
  guard n >= 8 else { return memcmp(a, b, n) == 0 }
  var i = 0
  while i &+ 8 < n {
    if a.loadUnaligned(fromByteOffset: i, as: UInt64.self) != b.loadUnaligned(fromByteOffset: i, as: UInt64.self) { return false }
    i &+= 8
  }
  return a.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self) == b.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self)
}

/// The slot count of an open-addressing table for `entries` entries: the
/// smallest power of two, at least 8, that they fill to at most 3/8 (room to
/// grow to 3/4 before the next resize), with its log2.
func tableSize(for entries: Int) -> (size: Int, bits: Int) {
  var size = 8
  var bits = 3
  while size * 3 < entries * 8 {
    size *= 2
    bits += 1
  }
  return (size, bits)
}

/// The process's hash seed, drawn once.
let hashSeed: UInt64 = UInt64.random(in: .min ... .max)

/// An object an ``UnretainedTable`` can hold: it knows its own hash.
protocol TableEntry: AnyObject {
  /// The hash the entry is filed under.
  var tableHash: UInt64 { get }
  /// A cheap first test that the entry may have hash `h`, made before the
  /// caller's key comparison (true when the hash is not kept).
  func mayHave(_ h: UInt64) -> Bool
}

extension KeyNode: TableEntry {
  var tableHash: UInt64 { hash }
  @inline(__always) func mayHave(_ h: UInt64) -> Bool { hash == h }
}

extension ContractState: TableEntry {
  // Names are looked up only to register and unregister by name: their
  // hash is recomputed when the table grows rather than kept in every
  // contract.
  var tableHash: UInt64 { hashString(name) }
  @inline(__always) func mayHave(_ h: UInt64) -> Bool { true }
}

/// An open-addressing hash table, probed linearly, of objects owned
/// elsewhere: a slot is the object's address (0 empty, 1 removed), 8 bytes,
/// and holds no reference count. The key lives in the object; the caller
/// passes the hash and a test for the key. The owners: the tree of key
/// nodes for the keypath table (a node leaves the table when it leaves the
/// tree), the registry for the contract-by-name table (a contract leaves the
/// table when it is unregistered, before the registry may let it go).
/// Unretained: docs/reliability.md, "Unretained references", row "the keypath table's slots" and "the contract-name table's slots".
struct UnretainedTable<T: TableEntry> {
  private var slots: [UInt] = []
  /// 64 - log2(slots).
  private var shift: UInt64 = 64
  /// Entries stored.
  private(set) var count = 0
  /// Entries plus removed marks.
  private var used = 0

  #if DEBUG
  /// Debug builds check the owner's promise: every listed object is alive
  /// when the table hands it out (see ``Unretained``).
  private var alive: [UInt: Unretained<T>] = [:]
  #endif

  private static var empty: UInt { 0 }
  private static var removed: UInt { 1 }

  @inline(__always) private static func object(_ slot: UInt) -> Unmanaged<T> {
    Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: slot).unsafelyUnwrapped)
  }

  /// The entry with hash `h` whose key `matches`, unretained. Mutating
  /// only so that a call on a class's stored table reads the slots in place:
  /// a non-mutating call copies the table, retaining and releasing its slot
  /// array on every lookup.
  @inline(__always)
  mutating func find(_ h: UInt64, _ matches: (T) -> Bool) -> Unmanaged<T>? {
    if count == 0 { return nil }
    let mask = slots.count - 1
    var i = Int(truncatingIfNeeded: h >> shift)
    while true {
      let slot = slots[i]
      if slot == Self.empty { return nil }
      if slot != Self.removed {
        let u = Self.object(slot)
        #if DEBUG
        _ = alive[slot]?.object
        #endif
        if u._withUnsafeGuaranteedRef({ $0.mayHave(h) && matches($0) }) { return u }
      }
      i = (i + 1) & mask
    }
  }

  /// Adds an entry whose key is not in the table.
  mutating func insert(_ x: T) {
    if (used + 1) * 4 > slots.count * 3 { resize(minimum: count + 1) }
    let slot = UInt(bitPattern: Unmanaged.passUnretained(x).toOpaque())
    put(slot, x.tableHash)
    count += 1
    #if DEBUG
    alive[slot] = Unretained(x)
    #endif
  }

  private mutating func put(_ slot: UInt, _ h: UInt64) {
    let mask = slots.count - 1
    var i = Int(truncatingIfNeeded: h >> shift)
    while slots[i] > Self.removed { i = (i + 1) & mask }
    if slots[i] == Self.empty { used += 1 }
    slots[i] = slot
  }

  /// Removes `x`.
  mutating func remove(_ x: T) {
    if count == 0 { return }
    let mask = slots.count - 1
    let target = UInt(bitPattern: Unmanaged.passUnretained(x).toOpaque())
    var i = Int(truncatingIfNeeded: x.tableHash >> shift)
    while slots[i] != Self.empty {
      if slots[i] == target {
        #if DEBUG
        alive[target] = nil
        #endif
        slots[i] = Self.removed
        count -= 1
        if count == 0 {
          self = UnretainedTable()
        } else if count * 8 < slots.count && slots.count > 64 {
          resize(minimum: count)
        }
        return
      }
      i = (i + 1) & mask
    }
  }

  /// Rehashes into ``tableSize(for:)`` slots for `minimum` entries,
  /// dropping removed marks.
  private mutating func resize(minimum: Int) {
    let old = slots
    let (size, bits) = tableSize(for: minimum)
    slots = [UInt](repeating: Self.empty, count: size)
    shift = UInt64(64 - bits)
    used = 0
    for slot in old where slot > Self.removed {
      put(slot, Self.object(slot)._withUnsafeGuaranteedRef { $0.tableHash })
    }
  }
}
