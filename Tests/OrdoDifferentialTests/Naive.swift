// A deliberately naive reading of SPEC §1: keypaths, patterns, "matches",
// "affects" and "may write". Nothing here is shared with Sources/Ordo; where
// the spec defines a relation by "there exists a keypath such that …", these
// functions search for that keypath by brute force over a small alphabet
// (the literals involved plus one fresh segment), which is obviously right
// and slow (results are cached). The keypath fuzz target (Fuzz/) uses it as
// its reference too.

import Foundation

enum Naive {
  static let maxSegments = 32
  static let maxBytes = 256
  /// A segment that appears in no pattern or keypath the generator makes.
  static let fresh = "_fresh_"

  static func segments(_ s: String) -> [String] {
    s.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
  }

  static func isSegmentChar(_ b: UInt8) -> Bool {
    (b >= 0x61 && b <= 0x7a) || (b >= 0x41 && b <= 0x5a) || (b >= 0x30 && b <= 0x39) || b == 0x5f || b == 0x2d
  }

  static func isPlainSegment(_ s: String) -> Bool {
    !s.isEmpty && s.utf8.allSatisfy(isSegmentChar)
  }

  /// SPEC §1: 1–32 segments of [A-Za-z0-9_-], at most 256 bytes.
  static func isKeypath(_ s: String) -> Bool {
    let segs = segments(s)
    return s.utf8.count <= maxBytes && !s.isEmpty && segs.count <= maxSegments && segs.allSatisfy(isPlainSegment)
  }

  /// A keypath whose segments may be `*`, and whose last segment may be `**`.
  static func isPattern(_ s: String) -> Bool {
    let segs = segments(s)
    guard s.utf8.count <= maxBytes, !s.isEmpty, segs.count <= maxSegments else { return false }
    for (i, seg) in segs.enumerated() {
      if seg == "*" { continue }
      if seg == "**" && i == segs.count - 1 { continue }
      if !isPlainSegment(seg) { return false }
    }
    return true
  }

  static func isConcrete(_ pattern: String) -> Bool {
    !segments(pattern).contains { $0 == "*" || $0 == "**" }
  }

  /// Whether pattern `p` matches keypath `k`.
  static func matches(_ p: String, _ k: String) -> Bool {
    let ps = segments(p), ks = segments(k)
    func segMatch(_ a: String, _ b: String) -> Bool { a == "*" || a == b }
    if ps.last == "**" {
      let fixed = Array(ps.dropLast())
      return ks.count >= fixed.count && zip(fixed, ks).allSatisfy(segMatch)
    }
    return ps.count == ks.count && zip(ps, ks).allSatisfy(segMatch)
  }

  /// Every keypath of exactly `length` segments over `alphabet`.
  static func keypaths(length: Int, over alphabet: [String]) -> [[String]] {
    if length == 0 { return [[]] }
    return keypaths(length: length - 1, over: alphabet).flatMap { p in alphabet.map { p + [$0] } }
  }

  static func literals(_ patterns: String...) -> [String] {
    var out: [String] = [fresh]
    for p in patterns {
      for s in segments(p) where s != "*" && s != "**" && !out.contains(s) { out.append(s) }
    }
    return out
  }

  nonisolated(unsafe) static var affectsCache: [String: Bool] = [:]
  nonisolated(unsafe) static var mayAffectCache: [String: Bool] = [:]
  static let cacheLock = NSLock()

  /// SPEC §1: a write to `k` affects a reader of `r` when `r` matches `k`, or
  /// when `k` is a proper ancestor of some keypath `r` can match.
  static func affects(write k: String, read r: String) -> Bool {
    let cacheKey = k + "\u{0}" + r
    if let hit = cacheLock.withLock({ affectsCache[cacheKey] }) { return hit }
    var result = matches(r, k)
    if !result {
      // Search the descendants of k: k followed by 1 … (|r| + 1 - |k|)
      // more segments drawn from r's literals and a fresh one.
      let ks = segments(k)
      let alphabet = literals(r)
      let extra = max(1, segments(r).count + 1 - ks.count)
      search: for n in 1...extra where ks.count + n <= maxSegments {
        for tail in keypaths(length: n, over: alphabet) where matches(r, (ks + tail).joined(separator: ".")) {
          result = true
          break search
        }
      }
    }
    cacheLock.withLock {
      if affectsCache.count > 100_000 { affectsCache.removeAll() }
      affectsCache[cacheKey] = result
    }
    return result
  }

  /// SPEC §4: write pattern `w` may write some keypath whose write affects
  /// a reader of `r`. Searched over keypaths up to max(|w|, |r|) + 1 segments.
  static func mayAffect(writer w: String, reader r: String) -> Bool {
    let cacheKey = w + "\u{0}" + r
    if let hit = cacheLock.withLock({ mayAffectCache[cacheKey] }) { return hit }
    var result = false
    let alphabet = literals(w, r)
    let longest = max(segments(w).count, segments(r).count) + 1
    search: for n in 1...longest {
      for k in keypaths(length: n, over: alphabet) {
        let key = k.joined(separator: ".")
        if matches(w, key) && affects(write: key, read: r) {
          result = true
          break search
        }
      }
    }
    cacheLock.withLock {
      if mayAffectCache.count > 100_000 { mayAffectCache.removeAll() }
      mayAffectCache[cacheKey] = result
    }
    return result
  }

  /// SPEC §5: `removeTree(k)` needs a write pattern that allows `k` and all
  /// its descendants. A pattern that matches `k`, a child and a grandchild
  /// of `k` named by a fresh segment matches every descendant (only a final
  /// `**` can match keypaths of several lengths, and it does not look at the
  /// segments past its fixed part).
  static func coversTree(_ w: String, _ k: String) -> Bool {
    matches(w, k) && matches(w, k + "." + fresh) && matches(w, k + "." + fresh + "." + fresh)
  }

  /// Whether `d` is `k` or one of its descendants.
  static func isSelfOrDescendant(_ d: String, of k: String) -> Bool {
    let ds = segments(d), ks = segments(k)
    return ds.count >= ks.count && Array(ds.prefix(ks.count)) == ks
  }
}
