import Foundation
import Testing

@testable import Ordo

/// SPEC §3: the bus is thread-safe; transactions are serialized; the pass
/// runs on the committing thread.
@Suite struct ThreadTests {
  static let threads = 4
  static let perThread = 2_000

  /// Several threads commit concurrently while contracts count their calls
  /// and check that what they observe is the transaction's state; a reader
  /// thread checks that snapshots are consistent. No pass is lost,
  /// duplicated or interleaved with another.
  @Test func concurrentCommits() throws {
    let bus = Bus()
    let total = Self.threads * Self.perThread
    let problems = Box<[String]>([])
    @Sendable func problem(_ s: String) { problems.mutate { if $0.count < 20 { $0.append(s) } } }
    let inPass = Box<Bool>(false)
    let txns = Box<[UInt64]>([])
    let everyCalls = Box<Int>(0)
    let perThreadCalls = Box<[Int]>(Array(repeating: 0, count: Self.threads))

    try bus.register(name: "watch", reads: ["n", "t.*"], writes: ["last"]) { ctx in
      if inPass.mutate({ old in defer { old = true }; return old }) { problem("passes interleaved at \(ctx.transaction)") }
      defer { inPass.value = false }
      txns.mutate { $0.append(ctx.transaction) }
      // Every transaction increments n, so n is the transaction id.
      let n = try ctx.value("n")
      if n != .int64(Int64(ctx.transaction)) { problem("txn \(ctx.transaction) saw n = \(String(describing: n))") }
      let changed = Set(ctx.changed)
      guard changed.count == 2, changed.contains("n"), let t = changed.first(where: { $0.hasPrefix("t.") }),
        let i = Int(t.dropFirst(2))
      else {
        problem("txn \(ctx.transaction) changed \(ctx.changed)")
        return
      }
      perThreadCalls.mutate { $0[i] += 1 }
      if try ctx.value(t) != .int64(Int64(perThreadCalls.value[i])) { problem("txn \(ctx.transaction): \(t) is not its count") }
      try ctx.set("last", .int64(Int64(i)))
    }
    try bus.register(name: "after", reads: ["last"]) { note in
      if note.changed.isEmpty { problem("after called without change") }
    }
    try bus.register(name: "every", reads: []) { note in
      everyCalls.value += 1
      if Set(note.changed).count != note.changed.count { problem("duplicate changed keypaths") }
    }

    let writersDone = Box<Int>(0)
    let snapshots = Box<Int>(0)
    runThreads(Self.threads + 1) { i in
      if i == Self.threads {
        // The reader: every snapshot is one committed state.
        repeat {
          guard let s = try? bus.snapshot(["n"]) else {
            problem("snapshot failed")
            return
          }
          var n: UInt64 = 0
          if case .int64(let v)? = s.values["n"] { n = UInt64(v) }
          if n != s.transaction { problem("snapshot: n = \(n) with transaction \(s.transaction)") }
          if (s.counters["n"] ?? 0) != s.transaction { problem("snapshot: counter \(s.counters["n"] ?? 0) with transaction \(s.transaction)") }
          snapshots.value += 1
        } while writersDone.value < Self.threads
        return
      }
      for j in 1...Self.perThread {
        do {
          try bus.transaction {
            let current = try bus.value("n") ?? .int64(0)
            guard case .int64(let n) = current else { return }
            try bus.set("n", .int64(n + 1))
            try bus.set("t.\(i)", .int64(Int64(j)))
          }
        } catch {
          problem("thread \(i): \(error)")
        }
      }
      writersDone.value += 1
    }

    #expect(problems.value.isEmpty, "\(problems.value)")
    #expect(txns.value == Array(1...UInt64(total)))
    #expect(everyCalls.value == total)
    #expect(perThreadCalls.value == Array(repeating: Self.perThread, count: Self.threads))
    #expect(try bus.value("n") == .int64(Int64(total)))
    #expect(try bus.counter("n") == UInt64(total))
    for i in 0..<Self.threads {
      #expect(try bus.value("t.\(i)") == .int64(Int64(Self.perThread)))
      #expect(try bus.counter("t.\(i)") == UInt64(Self.perThread))
    }
    #expect(bus.transactionID == UInt64(total))
    #expect(bus.statistics.transactions == UInt64(total))
    let info = bus.contracts()
    #expect(info.first { $0.name == "watch" }?.calls == UInt64(total))
    #expect(snapshots.value > 0)
  }

  /// Register and unregister from several threads while others commit.
  @Test func concurrentRegistration() throws {
    let bus = Bus()
    let calls = Box<Int>(0)
    try bus.register(name: "base", reads: ["k"]) { _ in calls.value += 1 }
    runThreads(4) { i in
      for j in 0..<200 {
        if i % 2 == 0 {
          _ = try? bus.transaction { try bus.set("k", .int64(Int64(i * 1000 + j))) }
        } else if let h = try? bus.register(name: "c\(i).\(j)", reads: ["x.\(i)"], writes: ["y.\(i).\(j)"], callback: { _ in }) {
          try? h.unregister()
        }
      }
    }
    #expect(calls.value == 400)
    #expect(bus.contracts().map(\.name) == ["base"])
    #expect(bus.transactionID == 400)
  }
}
