import Ordo
import OrdoStore
import Testing

/// The bus workload of ordo-store-tool (`busWorkload` and the contract
/// `count` in Sources/ordo-store-tool/main.swift), replayed here without a
/// bus: SPEC §2's rules for what counts as changed, written out for this
/// workload.
struct BusReplay {
  var values: [String: Value] = [:]
  var counters: [String: UInt64] = [:]
  var changedAt: [String: UInt64] = [:]
  var last: UInt64 = 0

  /// The state after transactions 1…last.
  init(through last: UInt64) {
    if last > 0 { for t in 1...last { apply(t) } }
  }

  mutating func apply(_ t: UInt64) {
    var start: [String: Value?] = [:]
    var touched: Set<String> = []
    func put(_ k: String, _ v: Value?) {
      if start.index(forKey: k) == nil { start[k] = .some(values[k]) }
      values[k] = v
    }
    put("seq", .int64(Int64(t)))
    put("k.n\(t % 37)", .int64(Int64(t)))
    put("s.n\(t % 11)", .string("v\(t) ü"))
    if t % 5 == 0 { put("k.n\((t + 1) % 37)", nil) }
    if t % 7 == 0 { touched.insert("t.tick") }
    if t % 13 == 0 { put("b.blob", .bytes((0..<(t % 50)).map { UInt8(truncatingIfNeeded: $0 &* t) })) }
    if t % 29 == 0 {
      for k in values.keys.sorted() where k == "s" || k.hasPrefix("s.") { put(k, nil) }
    }
    // The contract `count`, called in every transaction (a k.* value changes).
    put("sum.count", .int64(Int64(values.keys.filter { $0.hasPrefix("k.") }.count)))
    for (k, old) in start where old != values[k] { bump(k, t) }
    for k in touched { bump(k, t) }
    last = t
  }

  private mutating func bump(_ k: String, _ t: UInt64) {
    if changedAt[k] == t { return }
    counters[k, default: 0] += 1
    changedAt[k] = t
  }

  /// What `changes(since:, ["**"])` must return.
  func changes(since: UInt64) -> Changes {
    var c = Changes(transaction: last)
    for (k, at) in changedAt where at > since {
      c.counters[k] = counters[k]
      c.changedAt[k] = at
      if let v = values[k] { c.values[k] = v } else { c.removed.insert(k) }
    }
    return c
  }
}

/// Every keypath a bus knows (its counter is above 0) with its value,
/// counter and changed-at.
struct BusState: Equatable, CustomStringConvertible {
  var epoch: String
  var transaction: UInt64
  var keypaths: [String: KeypathState]

  struct KeypathState: Equatable {
    var value: Value?
    var counter: UInt64
    var changedAt: UInt64
  }

  init(epoch: String, transaction: UInt64, keypaths: [String: KeypathState]) {
    self.epoch = epoch
    self.transaction = transaction
    self.keypaths = keypaths
  }

  init(_ bus: Bus) throws {
    epoch = bus.epoch
    transaction = bus.transactionID
    let all = try bus.changes(since: 0, ["**"])
    keypaths = [:]
    for k in all.counters.keys {
      keypaths[k] = KeypathState(value: try bus.value(k), counter: try bus.counter(k), changedAt: try bus.changedAt(k))
    }
  }

  init(_ replay: BusReplay, epoch: String) {
    self.epoch = epoch
    transaction = replay.last
    keypaths = [:]
    for (k, c) in replay.counters {
      keypaths[k] = KeypathState(value: replay.values[k], counter: c, changedAt: replay.changedAt[k]!)
    }
  }

  var description: String {
    "epoch \(epoch) txn \(transaction): "
      + keypaths.keys.sorted().map { k in
        let s = keypaths[k]!
        return "\(k)=\(s.value.map { "\($0)" } ?? "-")/\(s.counter)/\(s.changedAt)"
      }.joined(separator: " ")
  }
}

/// `changes(since:)` agrees between two buses for every `since` of the
/// history, and for a few patterns.
func expectSameChanges(_ a: Bus, _ b: Bus, sourceLocation: SourceLocation = #_sourceLocation) throws {
  let last = a.transactionID
  #expect(b.transactionID == last, sourceLocation: sourceLocation)
  for since in 0...last {
    for patterns in [["**"], ["k.*"], ["s.**", "seq"], ["nothing.here"]] {
      let x = try a.changes(since: since, patterns)
      let y = try b.changes(since: since, patterns)
      #expect(x == y, "since \(since) \(patterns)", sourceLocation: sourceLocation)
    }
  }
}
