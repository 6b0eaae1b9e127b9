// A seeded, reproducible generator of random scenarios: registrations
// (small read/write pattern sets over a two-letter keypath alphabet with `*`
// and `**`, priorities or none, notify_initial), transactions with
// set/touch/remove/removeTree, nested begin/commit, rollbacks, reads and
// writes inside callbacks (some allowed, some violating), registrations and
// unregistrations inside callbacks, and a final read of every keypath used.
//
// The generator runs the model as it goes, to aim `only_txn` of callback
// actions at transactions that will happen.

import Foundation
import Ordo

/// SplitMix64: small, fast, and the same on every platform.
struct SplitMix64: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

struct Generator {
  static let segments = ["x", "y"]
  static let invalidPatterns = ["x..y", "**.x", "x*", "", "x.**.y", "a b", "x.", ".x", "x.***"]
  static let priorities: [Int32] = [-3, -2, -1, 1, 2, 3]

  var rng: SplitMix64
  let model = Model()
  var steps: [GStep] = []
  var names: [String] = []
  var nameCounter = 0
  var usedKeys: Set<String> = []

  init(seed: UInt64) { rng = SplitMix64(seed: seed) }

  mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }
  mutating func int(_ r: ClosedRange<Int>) -> Int { Int.random(in: r, using: &rng) }
  mutating func pick<T>(_ a: [T]) -> T { a[int(0...(a.count - 1))] }
  mutating func segment() -> String { pick(Generator.segments) }

  mutating func key() -> String {
    let depth = chance(0.35) ? 1 : (chance(0.7) ? 2 : 3)
    let k = (0..<depth).map { _ in segment() }.joined(separator: ".")
    usedKeys.insert(k)
    return k
  }

  mutating func pattern() -> String {
    if chance(0.04) { return "**" }
    let tree = chance(0.25)
    let fixed = tree ? int(1...2) : (chance(0.8) ? int(1...2) : 3)
    var parts = (0..<fixed).map { _ in chance(0.2) ? "*" : segment() }
    if tree { parts.append("**") }
    return parts.joined(separator: ".")
  }

  /// A keypath the pattern matches (for a tree pattern: its root or a child).
  mutating func instance(of p: String) -> String {
    var out: [String] = []
    for s in Naive.segments(p) {
      if s == "*" {
        out.append(segment())
      } else if s == "**" {
        if out.isEmpty || chance(0.4) { out.append(segment()) }
      } else {
        out.append(s)
      }
    }
    let k = out.joined(separator: ".")
    usedKeys.insert(k)
    return k
  }

  mutating func value() -> Value {
    switch int(0...9) {
    case 0...4: .int64(Int64(int(0...2)))
    case 5, 6: .string(pick(["a", "b"]))
    case 7: .bool(chance(0.5))
    case 8: .double(pick([1.5, 2.0]))
    default: .bytes(pick([[], [0xff]]))
    }
  }

  mutating func name() -> String {
    if chance(0.02) { return "" }
    if !names.isEmpty && chance(0.06) { return pick(names) }
    nameCounter += 1
    let n = "c\(nameCounter)"
    names.append(n)
    return n
  }

  /// A write: mostly within `writes` (a contract's write set), else anywhere.
  mutating func writeStep(within writes: [String]) -> GStep {
    let op = pick(["set", "set", "set", "set", "touch", "remove", "remove_tree", "remove_tree"])
    var k: String
    if !writes.isEmpty && chance(0.75) {
      let p = pick(writes)
      k = instance(of: p)
      if op == "remove_tree" && p.hasSuffix("**") {
        // The root of the tree pattern: allowed for removeTree.
        k = instance(of: String(p.dropLast(3)).isEmpty ? pick(Generator.segments) : String(p.dropLast(3)))
      }
    } else {
      k = key()
    }
    return GStep(op, key: k, value: op == "set" ? value() : nil)
  }

  mutating func readStep(within patterns: [String]) -> GStep {
    let k = !patterns.isEmpty && chance(0.7) ? instance(of: pick(patterns)) : key()
    return GStep(chance(0.7) ? "get" : "counter", key: k)
  }

  /// A contract registration; `txnBase` is the first transaction its
  /// callback actions aim at.
  mutating func registration(nesting: Int, txnBase: UInt64) -> GStep {
    var s = GStep("register", name: name())
    s.reads = chance(0.08) ? [] : (0..<int(1...3)).map { _ in pattern() }
    if s.reads.isEmpty {
      s.writes = chance(0.1) ? [pattern()] : []
    } else {
      s.writes = chance(0.5) ? [] : (0..<int(1...2)).map { _ in pattern() }
    }
    if chance(0.3) { s.priority = pick(Generator.priorities) }
    if !s.reads.isEmpty && chance(0.15) {
      // A view-hierarchy contract: a priority and a wildcard write
      // permission, which only the stability rule guards at run time.
      s.priority = pick([1, 2, 3])
      s.writes = [pick(["x.**", "y.**", "*.**", "x.y.**", "*.x"])]
    }
    s.notifyInitial = chance(0.25)
    if chance(0.02) {
      if chance(0.5) { s.reads.append(pick(Generator.invalidPatterns)) } else { s.writes.append(pick(Generator.invalidPatterns)) }
    }
    var actions: [GStep] = []
    for _ in 0..<int(0...6) {
      let txn = txnBase + UInt64(int(0...3))
      for var a in action(reads: s.reads, writes: s.writes, nesting: nesting, txn: txn) {
        a.onlyTxn = txn
        actions.append(a)
      }
    }
    s.onNotify = actions
    return s
  }

  /// One callback action, or a begin … commit group.
  mutating func action(reads: [String], writes: [String], nesting: Int, txn: UInt64) -> [GStep] {
    switch int(0...99) {
    case 0..<45: return [writeStep(within: writes)]
    case 45..<65: return [readStep(within: reads + writes)]
    case 65..<73 where nesting < 2: return [registration(nesting: nesting + 1, txnBase: txn)]
    case 73..<80:
      let n = names.isEmpty || chance(0.1) ? "nobody" : pick(names)
      return [GStep("unregister", name: n)]
    case 80..<90:
      var group = [GStep("begin")]
      for _ in 0..<int(1...2) { group.append(writeStep(within: writes)) }
      group.append(GStep("commit"))
      return group
    case 90..<94: return [GStep("commit")]
    case 94..<97: return [GStep("rollback")]
    default: return [writeStep(within: writes)]
    }
  }

  /// The next top-level step(s).
  mutating func topLevel() -> [GStep] {
    // Callback actions aim at the next few transactions (and at the
    // current id, which an initial call outside a pass receives).
    let base = model.lastTxn
    if model.depth > 0 {
      switch int(0...99) {
      case 0..<50: return [writeStep(within: [])]
      case 50..<56: return [GStep("begin")]
      case 56..<78: return [GStep("commit")]
      case 78..<83: return [GStep("rollback")]
      case 83..<92: return [registration(nesting: 0, txnBase: base)]
      case 92..<96: return [readStep(within: [])]
      default: return [GStep("unregister", name: names.isEmpty ? "nobody" : pick(names))]
      }
    }
    switch int(0...99) {
    case 0..<45:
      // A whole transaction.
      var t = [GStep("begin")]
      for _ in 0..<int(1...4) {
        switch int(0...9) {
        case 0: t += [GStep("begin"), writeStep(within: []), GStep("commit")]
        case 1: t.append(registration(nesting: 0, txnBase: base))
        default: t.append(writeStep(within: []))
        }
      }
      t.append(GStep(chance(0.9) ? "commit" : "rollback"))
      return t
    case 45..<75: return [registration(nesting: 0, txnBase: base)]
    case 75..<82: return [GStep("unregister", name: names.isEmpty || chance(0.1) ? "nobody" : pick(names))]
    case 82..<90: return [readStep(within: [])]
    case 90..<95: return [GStep("begin")]
    case 95..<97: return [writeStep(within: [])]
    case 97..<98: return [GStep("commit")]
    default: return [GStep("rollback")]
    }
  }

  /// Makes a scenario of about `length` top-level steps, or nil when the
  /// model cannot run it.
  mutating func make(length: Int) -> [GStep]? {
    while steps.count < length {
      for s in topLevel() where !run(s) { return nil }
    }
    while model.depth > 0 {
      if !run(GStep("commit")) { return nil }
    }
    for k in usedKeys.sorted() {
      if !run(GStep("get", key: k)) || !run(GStep("counter", key: k)) { return nil }
    }
    return steps
  }

  /// Appends a top-level step and runs it on the model.
  mutating func run(_ s: GStep) -> Bool {
    steps.append(s)
    do {
      try model.perform(s, path: [steps.count - 1])
      return true
    } catch {
      return false
    }
  }
}
