// The cache of a contract's read set that a client keeps for a contract
// registered with the option `cache` (docs/dbus.md, "Consistent reads"):
// the initial call's values, then each `Notify` applied.
import Ordo

/// A contract's read set as of the last notification applied: exact,
/// because the service sends, for each changed keypath, every value of the
/// read set at or under it.
struct ReadSetCache {
  private(set) var values: [String: Value] = [:]
  /// The transaction of the last notification applied (0 before the first).
  var transaction: UInt64 = 0
  /// The most segments a keypath of the read set has; nil when a pattern
  /// ends in `**` (any depth). A changed keypath with at least that many
  /// has nothing of the read set under it: applying it touches only itself.
  private let deepest: Int?
  /// The read patterns that parse (the service refuses a contract with
  /// any other): a writer's own writes enter the cache where they match.
  private let patterns: [Pattern]

  init(reads: [String]) {
    patterns = reads.compactMap { try? Pattern($0) }
    var deepest: Int? = 0
    for p in reads {
      if p == "**" || p.hasSuffix(".**") {
        deepest = nil
        break
      }
      deepest = max(deepest ?? 0, Self.segments(p))
    }
    self.deepest = deepest
  }

  /// Applies a `Notify` that names changed keypaths: drops what the cache
  /// holds at or under each, then puts the values the service sent.
  mutating func apply(changed: [String], values new: [String: Value]) {
    for k in changed {
      values[k] = nil
      if let deepest, Self.segments(k) >= deepest { continue }
      let prefix = k + "."
      for key in values.keys where key.hasPrefix(prefix) { values[key] = nil }
    }
    values.merge(new) { _, v in v }
  }

  private static func segments(_ keypath: String) -> Int {
    keypath.utf8.reduce(1) { $0 + ($1 == UInt8(ascii: ".") ? 1 : 0) }
  }

  /// Applies a writer's own answer, once the service accepted it: the
  /// pass notified the writer before its writes (they join the same
  /// transaction, and no later `Notify` of it reaches the writer), so a
  /// keypath it both reads and writes, as a normalizer does, would stay
  /// at the value it was called with. Set, then touch, then remove, as the
  /// service applies them; an entry ending in `.**` removes the tree.
  mutating func apply(own writes: RemoteWrites) {
    for (k, v) in writes.set where patterns.contains(where: { $0.matches(k) }) { values[k] = v }
    for k in writes.remove {
      if k.hasSuffix(".**") {
        apply(changed: [String(k.dropLast(3))], values: [:])
      } else {
        values[k] = nil
      }
    }
  }

  /// Replaces the whole cache (an initial call, or the read set read
  /// again); returns the keypaths whose value differs, sorted.
  mutating func replace(with new: [String: Value]) -> [String] {
    var differ: [String] = []
    for (k, v) in new where values[k] != v { differ.append(k) }
    for k in values.keys where new[k] == nil { differ.append(k) }
    values = new
    return differ.sorted()
  }
}
