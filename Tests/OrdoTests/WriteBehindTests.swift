import Foundation
import Testing

@testable import Ordo

/// Scalar sets held back (``WriteBehind``): the owner's open transaction
/// holds a scalar set of a known keypath and applies it at the next other
/// use of the bus. Nothing of it may be observable: every test here does
/// something that would see a held write missing, misordered or applied
/// twice.
@Suite struct WriteBehindTests {
  /// The writes that are held back are the scalar sets of the owner's open
  /// transaction to keypaths the store has; any other use settles them.
  @Test func whatIsHeldBackAndWhatSettles() throws {
    let bus = Bus()
    let a = try bus.resolve("doc.a")
    bus.begin()
    try bus.set(a, .int64(1))
    try bus.set("doc.a", .int64(2))  // known keypath, by string: held too
    #expect(!bus.store.heldWrites.isEmpty, "a scalar set in an open transaction is held back")
    #expect(try bus.value(a) == .int64(2), "a read settles first")
    #expect(bus.store.heldWrites.isEmpty)
    try bus.set(a, .string("text"))  // boxed: applied at once
    #expect(bus.store.heldWrites.isEmpty)
    try bus.set("doc.new", .int64(1))  // a new keypath: applied at once
    #expect(bus.store.heldWrites.isEmpty)
    try bus.set(a, .double(1.5))
    #expect(!bus.store.heldWrites.isEmpty)
    try bus.touch("doc.b")  // any other write settles first
    #expect(bus.store.heldWrites.isEmpty)
    let txn = try bus.commit()
    #expect(txn == 1)
    #expect(try bus.value("doc.a") == .double(1.5) && bus.value("doc.new") == .int64(1))
    #expect(try bus.counter("doc.a") == 1)
  }

  /// More writes than the buffer holds, to one keypath and to many, with
  /// equal values and round trips: the net change of each keypath is the
  /// one of writes applied at once (SPEC §2).
  @Test func manyWritesNetChangeAndOrder() throws {
    let bus = Bus()
    let n = WriteBehind.capacity * 3 + 5
    let handles = try (0..<n).map { try bus.resolve("m.k\($0)") }
    try bus.transaction { for (i, h) in handles.enumerated() { try bus.set(h, .int64(Int64(i))) } }
    let every = Calls()
    try bus.watch(every, "log", reads: [])
    try bus.transaction {
      for (i, h) in handles.enumerated() {
        try bus.set(h, .int64(-1))
        // Even keypaths go back to their value: no change.
        try bus.set(h, .int64(i % 2 == 0 ? Int64(i) : 1000 + Int64(i)))
      }
    }
    let calls = every.take()
    #expect(calls.count == 1)
    let expected = (0..<n).filter { $0 % 2 == 1 }.map { "m.k\($0)" }
    #expect(calls.first?.changed == expected, "changed keypaths in write order")
    for (i, h) in handles.enumerated() {
      #expect(try bus.value(h) == .int64(i % 2 == 0 ? Int64(i) : 1000 + Int64(i)))
      #expect(try bus.counter(h) == (i % 2 == 0 ? 1 : 2))
    }
  }

  /// Held writes and writes applied at once interleave in the order made:
  /// the journal (and so every `changed` list) and the final values follow
  /// it.
  @Test func heldAndImmediateWritesKeepTheirOrder() throws {
    let bus = Bus()
    let x = try bus.resolve("o.x"), y = try bus.resolve("o.y")
    let every = Calls()
    try bus.watch(every, "log", reads: [])
    try bus.transaction {
      try bus.set(y, .int64(1))  // held
      try bus.set("o.z", .string("s"))  // new and boxed: settles y first
      try bus.set(x, .int64(2))  // held
      try bus.remove(y)  // settles x, then removes y
      try bus.set(y, .int64(3))  // held, applied at commit
    }
    #expect(every.take().first?.changed == ["o.y", "o.z", "o.x"])
    #expect(try bus.value(y) == .int64(3) && bus.value(x) == .int64(2))
  }

  /// A value held back (an int64) or, for the same scenario applied at
  /// once, a string: observations compare through ``text(_:)``.
  private func v(_ i: Int64, held: Bool) -> Value { held ? .int64(i) : .string("\(i)") }
  private func text(_ v: Value?) -> String {
    switch v {
    case .int64(let i)?: "\(i)"
    case .string(let s)?: s
    case nil: "nil"
    default: "\(v!)"
    }
  }

  /// One scenario of reads, snapshots, catch-ups, rollbacks, the commit
  /// hook (what a persistence layer stores) and contracts, observed step
  /// by step: with int64 values its writes are held back, with strings
  /// they are applied at once. The observations must be the same.
  private func observe(held: Bool) throws -> (log: [String], heldSometime: Bool) {
    let bus = Bus()
    var log: [String] = []
    var heldSometime = false
    func note(_ s: String) {
      heldSometime = heldSometime || !bus.store.heldWrites.isEmpty
      log.append(s)
    }
    let a = try bus.resolve("r.a"), b = try bus.resolve("r.b")
    try bus.transaction { try bus.set(a, v(1, held: held)) }
    let calls = Calls()
    let seen = Box<[String]>([])
    try bus.watch(calls, "reader", reads: ["r.a"]) { ctx in seen.mutate { $0.append("reader \(self.text(try? ctx.value("r.a")))") } }
    try bus.watch(calls, "log", reads: [])
    bus.begin()
    try bus.set(a, v(2, held: held))
    note("rollback")
    try bus.rollback()
    note("after rollback \(text(try bus.value(a))) \(try bus.counter(a))")
    bus.begin()
    try bus.set(a, v(5, held: held))
    try bus.set(b, v(50, held: held))
    note("snapshot \(try bus.snapshot(["r.**"]).values.mapValues(text).sorted { $0.key < $1.key })")
    try bus.set(a, v(6, held: held))
    note("changes \(try bus.changes(since: 0, ["r.**"]).values.mapValues(text).sorted { $0.key < $1.key })")
    try bus.set(a, v(7, held: held))
    note("counter \(try bus.counter("r.a")) \(try bus.changedAt("r.a"))")
    try bus.set(b, v(8, held: held))
    try bus.watch(calls, "initial", reads: ["r.a", "r.b"], flags: .notifyInitial) { ctx in
      seen.mutate { $0.append("initial \(self.text(try? ctx.value("r.a"))) \(self.text(try? ctx.value("r.b")))") }
    }
    try bus.set(a, v(9, held: held))
    let stored = Box<[String]>([])
    bus.setCommitHook { _, states in stored.value = states.map { "\($0.keypath)=\(self.text($0.value)) \($0.counter)" } }
    note("commit")
    let txn = try bus.commit()
    note("txn \(txn) stored \(stored.value) calls \(calls.take()) seen \(seen.value)")
    note("after \(text(try bus.value(a))) \(text(try bus.value(b))) \(try bus.counter(a)) \(try bus.changedAt("r.b"))")
    return (log, heldSometime)
  }

  @Test func theSameObservationsHeldOrApplied() throws {
    let held = try observe(held: true), applied = try observe(held: false)
    #expect(held.heldSometime, "the int64 run held writes back")
    #expect(!applied.heldSometime, "the string run applied every write at once")
    #expect(held.log == applied.log)
    #expect(held.log.last == "after 9 8 2 2")
  }

  /// Another thread never sees a held write before the commit (it reads
  /// the last committed value), and sees it after; its calls settle the
  /// owner's writes without changing what the owner then reads.
  @Test func otherThreadsSeeTheCommittedState() throws {
    let bus = Bus()
    let a = try bus.resolve("t.a")
    try bus.transaction { try bus.set(a, .int64(1)) }
    bus.begin()
    try bus.set(a, .int64(2))
    let during = Box<Value?>(nil)
    let refused = Box<OrdoError.Code?>(nil)
    runThreads(1) { _ in
      during.value = try? bus.value(a)
      refused.value = codeOf { try bus.set(a, .int64(3)) }
    }
    #expect(during.value == .int64(1))
    #expect(refused.value == .noTransaction)
    try bus.set(a, .int64(4))
    #expect(try bus.value(a) == .int64(4))
    try bus.commit()
    let after = Box<Value?>(nil)
    runThreads(1) { _ in after.value = try? bus.value(a) }
    #expect(after.value == .int64(4))
  }

  /// While one thread writes transactions of held-back writes (without
  /// the bus's lock), other threads read: every snapshot is one committed
  /// transaction (all keypaths equal, and its id), never a mix with held
  /// or applied writes of the open one. Under `make tsan` this is also the
  /// race check of the unlocked path.
  @Test func readersNeverSeeAnOpenTransaction() throws {
    let bus = Bus()
    let handles = try (0..<20).map { try bus.resolve("s.k\($0)") }
    try bus.transaction { for h in handles { try bus.set(h, .int64(0)) } }
    let rounds = 300
    let mixed = Box(0), seen = Box(0)
    runThreads(3) { t in
      if t == 0 {
        for r in 1...rounds {
          _ = try? bus.transaction { for h in handles { try bus.set(h, .int64(Int64(r))) } }
        }
      } else {
        for _ in 0..<rounds {
          guard let snap = try? bus.snapshot(["s.**"]) else { continue }
          let values = Set(snap.values.values)
          seen.mutate { $0 += 1 }
          // Transaction 1 set the zeros, r sets r, and each is id r + 1.
          if values != [.int64(Int64(snap.transaction) - 1)] { mixed.mutate { $0 += 1 } }
        }
      }
    }
    #expect(seen.value == 2 * rounds)
    #expect(mixed.value == 0, "\(mixed.value) snapshots mixed transactions")
    #expect(try bus.value(handles[19]) == .int64(Int64(rounds)))
  }

  /// The one observable difference (docs/semantics.md, "Writes held
  /// back"): another thread's `statistics.values` during the open
  /// transaction leaves out a value that a held write adds, and counts it
  /// once the owner's next use of the bus has applied it.
  @Test func theValueCountOfAnotherThreadLeavesOutHeldWrites() throws {
    let bus = Bus()
    let a = try bus.resolve("n.a")
    bus.begin()
    try bus.set(a, .int64(1))
    let seen = Box<[Int]>([])
    runThreads(1) { _ in seen.mutate { $0.append(bus.statistics.values) } }
    #expect(bus.statistics.values == 1, "the owner's read applies what it holds")
    runThreads(1) { _ in seen.mutate { $0.append(bus.statistics.values) } }
    try bus.commit()
    #expect(seen.value == [0, 1])
  }

  /// A bus released with a transaction open and writes held drops them.
  @Test func aBusReleasedWithWritesHeld() throws {
    var bus: Bus? = Bus()
    let a = try bus!.resolve("d.a")
    bus!.begin()
    try bus!.set(a, .int64(1))
    #expect(!bus!.store.heldWrites.isEmpty)
    bus = nil
    #expect(a.keypath == "d.a")
  }
}
