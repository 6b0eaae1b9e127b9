#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Observation
import Ordo

/// The Observation comparator's model: one observable object per item, its
/// `value` observed by one observer, as a list row observes its item.
@Observable final class ObservedItem {
  var value: Int64 = 0
}

/// Observers of the Observation comparator that fired and must be
/// re-registered (`withObservationTracking` fires once).
final class Pending: @unchecked Sendable {
  var items: [Int] = []
}

/// The workload of scenario 2 through the Swift API, also the reference of
/// the C ABI scenario: `n` contracts, contract `i` reading
/// `model.item<i>.value`; one transaction sets every keypath once.
final class OrdoDelivery {
  let bus: Bus
  let keys: [String]
  /// The same keypaths resolved once (SPEC §13): raw handles, and typed
  /// properties over them.
  let handles: [Handle]
  let properties: [Property<Int64>]
  let sink = Sink()
  var value: Int64 = 0
  var transactions = 0

  /// With a schema, the bus enforces it (the schema scenario).
  init(_ n: Int, schema: Schema? = nil) throws {
    bus = schema.map(Bus.init(schema:)) ?? Bus()
    keys = (0..<n).map { "model.item\($0).value" }
    let bus = self.bus
    let handles = try keys.map { try bus.resolve($0) }
    self.handles = handles
    properties = try handles.map { try bus.property($0, as: Int64.self) }
    let sink = self.sink
    for i in 0..<n { try bus.register(name: "o\(i)", reads: [keys[i]]) { _ in sink.calls &+= 1 } }
  }

  /// Runs `ops` transactions; returns the elapsed ns.
  func run(_ ops: Int) throws -> UInt64 {
    try timed(ops) { v in for k in keys { try bus.set(k, .int64(v)) } }
  }

  /// The same transactions through handles.
  func runHandles(_ ops: Int) throws -> UInt64 {
    try timed(ops) { v in for h in handles { try bus.set(h, .int64(v)) } }
  }

  /// The same transactions through typed properties.
  func runTyped(_ ops: Int) throws -> UInt64 {
    try timed(ops) { v in for p in properties { try p.set(v) } }
  }

  /// `ops` transactions, each a new value that `write` sets on every
  /// keypath; returns the elapsed ns. `write` makes a whole transaction's
  /// writes, so that the loop calls it once per transaction, never once per
  /// change.
  @inline(__always)
  private func timed(_ ops: Int, _ write: (Int64) throws -> Void) throws -> UInt64 {
    let t0 = nowNS()
    for _ in 0..<ops {
      value &+= 1
      bus.begin()
      try write(value)
      try bus.commit()
    }
    transactions += ops
    return nowNS() - t0
  }

  func verify(_ what: String) {
    check(sink.calls == keys.count * transactions, "\(what): \(sink.calls) calls for \(transactions) transactions of \(keys.count) changes")
  }
}

/// Scenario 2: the cost of one delivered change. N observers, each on its own
/// keypath; each transaction changes every keypath once. Comparators: a
/// NotificationCenter post per change with one observer per name, Swift
/// Observation with the observer re-registering after each change, and a
/// bare loop of indirect calls (the floor).
func runDelivery(_ s: Settings) throws -> [BenchResult] {
  let n = 1_000
  let ordo = try OrdoDelivery(n)
  // The same with a trace consumer attached (devtools): what tracing costs.
  let traced = try OrdoDelivery(n)
  let traceSink = Sink()
  traced.bus.onTrace { t in traceSink.calls &+= t.steps.count }

  // NotificationCenter: a private center, one name per keypath.
  let center = NotificationCenter()
  let names = ordo.keys.map { Foundation.Notification.Name($0) }
  let ncSink = Sink()
  var tokens: [any NSObjectProtocol] = []
  for name in names {
    tokens.append(center.addObserver(forName: name, object: nil, queue: nil) { _ in ncSink.calls &+= 1 })
  }
  var ncValues = [Int64](repeating: 0, count: n)
  var ncTransactions = 0

  // Observation: one @Observable item per keypath.
  let items = (0..<n).map { _ in ObservedItem() }
  let obsSink = Sink()
  let pending = Pending()
  func observe(_ i: Int) {
    withObservationTracking {
      _ = items[i].value
    } onChange: {
      obsSink.calls &+= 1
      pending.items.append(i)
    }
  }
  for i in 0..<n { observe(i) }
  var obsTransactions = 0

  // The floor: a value store and an indirect call per change.
  let floorSink = Sink()
  let calls: [() -> Void] = (0..<n).map { _ in { floorSink.calls &+= 1 } }
  var floorValues = [Int64](repeating: 0, count: n)
  var floorTransactions = 0

  // The floor of Ordo's threading design: the same, plus what a bus pays per
  // change when it takes its lock for each write (other threads read the
  // committed state meanwhile) and calls out without it: a lock/unlock pair
  // around the write and an unlock/lock pair around the call (the pthread
  // mutex Ordo's bus uses).
  let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  pthread_mutex_init(mutex, nil)
  defer {
    pthread_mutex_destroy(mutex)
    mutex.deallocate()
  }
  let lockedSink = Sink()
  let lockedCalls: [() -> Void] = (0..<n).map { _ in { lockedSink.calls &+= 1 } }
  var lockedValues = [Int64](repeating: 0, count: n)
  var lockedTransactions = 0

  // The floor of SPEC §2–§5 for this workload (MinimalPass.swift): with
  // Ordo's threading design, and single-threaded.
  let minimalSink = Sink()
  let minimal = MinimalPass(keys: ordo.keys, locked: true) { _ in minimalSink.calls &+= 1 }
  let unlockedSink = Sink()
  let unlocked = MinimalPass(keys: ordo.keys, locked: false) { _ in unlockedSink.calls &+= 1 }
  var minimalTransactions = 0, unlockedTransactions = 0
  func runMinimal(_ pass: MinimalPass, _ ops: Int, _ transactions: inout Int) -> UInt64 {
    let t0 = nowNS()
    for _ in 0..<ops {
      v &+= 1
      pass.begin()
      for i in 0..<n { pass.set(i, v) }
      pass.commit()
    }
    transactions += ops
    return nowNS() - t0
  }

  var v: Int64 = 0
  let variants = [
    Variant("ordo") { ops in try ordo.run(ops) },
    Variant("ordo-handles") { ops in try ordo.runHandles(ops) },
    Variant("ordo-traced") { ops in try traced.run(ops) },
    Variant("ordo-typed") { ops in try ordo.runTyped(ops) },
    Variant("notificationcenter") { ops in
      let t0 = nowNS()
      for _ in 0..<ops {
        v &+= 1
        for i in 0..<n {
          ncValues[i] = v
          center.post(name: names[i], object: nil)
        }
      }
      ncTransactions += ops
      return nowNS() - t0
    },
    Variant("observation") { ops in
      let t0 = nowNS()
      for _ in 0..<ops {
        v &+= 1
        for i in 0..<n { items[i].value = v }
        let fired = pending.items
        pending.items.removeAll(keepingCapacity: true)
        for i in fired { observe(i) }
      }
      obsTransactions += ops
      return nowNS() - t0
    },
    Variant("indirect-calls") { ops in
      let t0 = nowNS()
      for _ in 0..<ops {
        v &+= 1
        for i in 0..<n {
          floorValues[i] = v
          calls[i]()
        }
      }
      floorTransactions += ops
      return nowNS() - t0
    },
    Variant("minimal-pass") { ops in runMinimal(minimal, ops, &minimalTransactions) },
    Variant("minimal-pass-unlocked") { ops in runMinimal(unlocked, ops, &unlockedTransactions) },
    Variant("locked-indirect-calls") { ops in
      let t0 = nowNS()
      for _ in 0..<ops {
        v &+= 1
        for i in 0..<n {
          pthread_mutex_lock(mutex)
          lockedValues[i] = v
          pthread_mutex_unlock(mutex)
        }
        pthread_mutex_lock(mutex)
        for i in 0..<n {
          pthread_mutex_unlock(mutex)
          lockedCalls[i]()
          pthread_mutex_lock(mutex)
        }
        pthread_mutex_unlock(mutex)
      }
      lockedTransactions += ops
      return nowNS() - t0
    },
  ]
  progress("delivery: measuring \(n) observers")
  let m = try measure(variants, s).per(n)
  ordo.verify("delivery")
  traced.verify("delivery traced")
  check(traceSink.calls == n * traced.transactions, "delivery: traces listed \(traceSink.calls) steps")
  check(ncSink.calls == n * ncTransactions, "delivery: NotificationCenter made \(ncSink.calls) calls")
  check(obsSink.calls == n * obsTransactions, "delivery: Observation made \(obsSink.calls) calls")
  check(floorSink.calls == n * floorTransactions, "delivery: floor made \(floorSink.calls) calls")
  check(lockedSink.calls == n * lockedTransactions, "delivery: locked floor made \(lockedSink.calls) calls")
  check(minimalSink.calls == n * minimalTransactions, "delivery: minimal pass made \(minimalSink.calls) calls")
  check(unlockedSink.calls == n * unlockedTransactions, "delivery: unlocked minimal pass made \(unlockedSink.calls) calls")
  check(minimalTransactions == 0 || (0..<n).allSatisfy { minimal.counter($0) == UInt64(minimalTransactions) }, "delivery: minimal pass counters")
  check(lockedValues.allSatisfy { $0 != 0 } || lockedTransactions == 0, "delivery: locked floor stored nothing")
  for t in tokens { center.removeObserver(t) }

  var r = BenchResult(scenario: "delivery", metric: "ns_per_change", ordo: m["ordo"], target: "vs notificationcenter >= 4, vs observation >= 3", met: nil)
  for name in ["notificationcenter", "observation", "indirect-calls", "locked-indirect-calls"] { r.comparators.append((name, m[name])) }
  var h = BenchResult(
    scenario: "delivery-handles", metric: "ns_per_change", ordo: m["ordo-handles"],
    target: "vs notificationcenter >= 10, vs indirect-calls <= 2", met: nil)
  for name in ["notificationcenter", "indirect-calls", "locked-indirect-calls", "minimal-pass", "minimal-pass-unlocked", "ordo"] {
    h.comparators.append((name, m[name]))
  }
  let hnc = m.ratio("notificationcenter", "ordo-handles"), hfloor = m.ratio("ordo-handles", "indirect-calls")
  h.ratios = [
    ("vs notificationcenter", hnc), ("vs indirect-calls", hfloor), ("vs locked-indirect-calls", m.ratio("ordo-handles", "locked-indirect-calls")),
    ("strings vs handles", m.ratio("ordo", "ordo-handles")), ("vs minimal-pass", m.ratio("ordo-handles", "minimal-pass")),
  ]
  h.met = hnc >= 10 && hfloor <= 2
  // What the floor itself reaches: a target it misses is out of reach.
  var f = BenchResult(
    scenario: "delivery-floor", metric: "ns_per_change", ordo: m["minimal-pass"],
    target: "reported: notificationcenter / minimal-pass is the best any bus of this design reaches", met: nil)
  f.comparators = [
    ("notificationcenter", m["notificationcenter"]), ("indirect-calls", m["indirect-calls"]),
    ("minimal-pass-unlocked", m["minimal-pass-unlocked"]), ("ordo-handles", m["ordo-handles"]),
  ]
  f.ratios = [
    ("notificationcenter vs minimal-pass", m.ratio("notificationcenter", "minimal-pass")),
    ("notificationcenter vs minimal-pass-unlocked", m.ratio("notificationcenter", "minimal-pass-unlocked")),
    ("minimal-pass vs indirect-calls", m.ratio("minimal-pass", "indirect-calls")),
    ("minimal-pass-unlocked vs indirect-calls", m.ratio("minimal-pass-unlocked", "indirect-calls")),
  ]
  let nc = m.ratio("notificationcenter", "ordo"), obs = m.ratio("observation", "ordo")
  r.ratios = [
    ("vs notificationcenter", nc), ("vs observation", obs), ("vs indirect-calls", m.ratio("ordo", "indirect-calls")),
    ("vs locked-indirect-calls", m.ratio("ordo", "locked-indirect-calls")),
  ]
  r.met = nc >= 4 && obs >= 3
  var t = BenchResult(scenario: "delivery-traced", metric: "ns_per_change", ordo: m["ordo-traced"], target: "none (reported)", met: nil)
  t.comparators = [("ordo", m["ordo"])]
  t.ratios = [("vs ordo", m.ratio("ordo-traced", "ordo"))]
  // The same work through handles and typed properties (SPEC §13): the
  // typed API must cost no more than the raw handle path.
  var typed = BenchResult(scenario: "delivery-typed", metric: "ns_per_change", ordo: m["ordo-typed"], target: "vs ordo-handles <= 1.1", met: nil)
  typed.comparators = [("ordo-handles", m["ordo-handles"]), ("ordo-strings", m["ordo"]), ("indirect-calls", m["indirect-calls"])]
  let typedVsHandles = m.ratio("ordo-typed", "ordo-handles")
  typed.ratios = [
    ("vs ordo-handles", typedVsHandles), ("ordo-handles vs ordo-strings", m.ratio("ordo-handles", "ordo")),
    ("vs indirect-calls", m.ratio("ordo-typed", "indirect-calls")),
  ]
  typed.met = typedVsHandles <= 1.1
  return [r, h, f, typed, t]
}

/// Scenario 3: coalescing. 100 contracts, contract `j` reading keypath
/// `j % 10` of 10; one transaction writes those 10 keypaths 1 000 times in
/// all (each write a new value). Ordo calls each contract once; the
/// NotificationCenter comparator posts every write to the 10 observers of
/// its name.
func runCoalescing(_ s: Settings) throws -> [BenchResult] {
  let keys = (0..<10).map { "model.field\($0)" }
  let writes = 1_000
  let contracts = 100

  let bus = Bus()
  let sink = Sink()
  for j in 0..<contracts { try bus.register(name: "c\(j)", reads: [keys[j % 10]]) { _ in sink.calls &+= 1 } }
  var value: Int64 = 0
  var transactions = 0

  let center = NotificationCenter()
  let names = keys.map { Foundation.Notification.Name($0) }
  let ncSink = Sink()
  var tokens: [any NSObjectProtocol] = []
  for j in 0..<contracts {
    tokens.append(center.addObserver(forName: names[j % 10], object: nil, queue: nil) { _ in ncSink.calls &+= 1 })
  }
  var ncValues = [Int64](repeating: 0, count: 10)
  var ncValue: Int64 = 0
  var ncTransactions = 0

  let variants = [
    Variant("ordo") { ops in
      let t0 = nowNS()
      for _ in 0..<ops {
        bus.begin()
        for w in 0..<writes {
          value &+= 1
          try bus.set(keys[w % 10], .int64(value))
        }
        try bus.commit()
      }
      transactions += ops
      return nowNS() - t0
    },
    Variant("notificationcenter-every-write") { ops in
      let t0 = nowNS()
      for _ in 0..<ops {
        for w in 0..<writes {
          ncValue &+= 1
          ncValues[w % 10] = ncValue
          center.post(name: names[w % 10], object: nil)
        }
      }
      ncTransactions += ops
      return nowNS() - t0
    },
  ]
  progress("coalescing: measuring")
  let m = try measure(variants, s)
  for t in tokens { center.removeObserver(t) }
  check(sink.calls == contracts * transactions, "coalescing: \(sink.calls) calls for \(transactions) transactions")
  check(ncSink.calls == writes * (contracts / 10) * ncTransactions, "coalescing: NotificationCenter made \(ncSink.calls) calls")
  let ordoCalls = Double(sink.calls) / Double(transactions)
  let ncCalls = Double(ncSink.calls) / Double(ncTransactions)
  var time = BenchResult(scenario: "coalescing", metric: "ns_per_transaction", ordo: m["ordo"], target: "none", met: nil)
  time.comparators = [("notificationcenter-every-write", m["notificationcenter-every-write"])]
  time.ratios = [("vs notificationcenter-every-write", m.ratio("notificationcenter-every-write", "ordo"))]
  var calls = BenchResult(scenario: "coalescing", metric: "calls_per_transaction", ordo: ordoCalls, target: "ordo == 100 (each contract once)", met: ordoCalls == 100)
  calls.comparators = [("notificationcenter-every-write", ncCalls)]
  calls.ratios = [("vs notificationcenter-every-write", ncCalls / ordoCalls)]
  return [time, calls]
}
