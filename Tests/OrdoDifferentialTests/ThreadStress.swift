// Thread stress: ORDO_STRESS_THREADS threads (default 4) each commit
// ORDO_STRESS_TRANSACTIONS transactions (default 2 000; `make stress` runs
// 100 000) on one bus while an observer thread takes snapshots. Contracts
// count their calls and check that every value they observe is the one the
// committing thread just wrote (and the value a normalizer derived from it
// in the same pass); the snapshots must always show committed, consistent
// state. Nothing may be lost or duplicated: every transaction id from 1 to
// threads × transactions is returned by exactly one commit and seen exactly
// once, in order, by an every-transaction contract.

import Foundation
import Ordo
import Testing

/// Shared counters of the stress run, under a lock.
final class StressLog: @unchecked Sendable {
  private let lock = NSLock()
  private var problems: [String] = []
  private(set) var expected: [Int64]
  private(set) var viewCalls: [Int]
  private(set) var deriveCalls: [Int]
  private(set) var everyCalls = 0
  private(set) var lastSeen: UInt64 = 0
  private(set) var snapshots = 0

  init(threads: Int) {
    expected = Array(repeating: 0, count: threads)
    viewCalls = Array(repeating: 0, count: threads)
    deriveCalls = Array(repeating: 0, count: threads)
  }

  func problem(_ s: String) { lock.withLock { if problems.count < 20 { problems.append(s) } } }
  var allProblems: [String] { lock.withLock { problems } }
  func expect(_ t: Int, _ v: Int64) { lock.withLock { expected[t] = v } }
  func expectation(_ t: Int) -> Int64 { lock.withLock { expected[t] } }
  func viewCalled(_ t: Int) { lock.withLock { viewCalls[t] += 1 } }
  func deriveCalled(_ t: Int) { lock.withLock { deriveCalls[t] += 1 } }
  func snapshotTaken() { lock.withLock { snapshots += 1 } }
  func everyCalled(_ txn: UInt64) {
    lock.withLock {
      everyCalls += 1
      if txn != lastSeen + 1 && problems.count < 20 { problems.append("every-transaction contract saw \(txn) after \(lastSeen)") }
      lastSeen = txn
    }
  }
}

/// The ids each thread's commits returned.
final class Committed: @unchecked Sendable {
  private let lock = NSLock()
  private var lists: [[UInt64]]
  init(threads: Int) { lists = Array(repeating: [], count: threads) }
  func set(_ t: Int, _ ids: [UInt64]) { lock.withLock { lists[t] = ids } }
  var all: [UInt64] { lock.withLock { lists.flatMap { $0 } } }
}

final class StopFlag: @unchecked Sendable {
  private let lock = NSLock()
  private var stopped = false
  var isStopped: Bool { lock.withLock { stopped } }
  func stop() { lock.withLock { stopped = true } }
}

@Suite("Threads")
struct ThreadStressTests {
  @Test("threads × transactions: nothing lost, nothing duplicated, every observed value committed")
  func stress() throws {
    let threads = Env.int("ORDO_STRESS_THREADS", 4)
    let perThread = Env.int("ORDO_STRESS_TRANSACTIONS", 2_000)
    let bus = Bus()
    let log = StressLog(threads: threads)
    for t in 0..<threads {
      let v = "t\(t).v", d = "t\(t).d"
      // A normalizer derives d = 2 v in the same pass.
      try bus.register(name: "derive-\(t)", reads: [v], writes: [d], priority: -3) { [unowned bus] note in
        log.deriveCalled(t)
        guard case .int64(let x)? = try bus.value(v) else { return log.problem("derive-\(t): no value at txn \(note.transaction)") }
        if x != log.expectation(t) { log.problem("derive-\(t) read \(x), committing \(log.expectation(t))") }
        try bus.set(d, .int64(2 * x))
      }
      // A view reads both; it must see this thread's value and its double.
      try bus.register(name: "view-\(t)", reads: [v, d]) { [unowned bus] note in
        log.viewCalled(t)
        let x = try bus.value(v), y = try bus.value(d)
        let want = log.expectation(t)
        if x != .int64(want) || y != .int64(2 * want) {
          log.problem("view-\(t) at txn \(note.transaction): \(String(describing: x)), \(String(describing: y)); committing \(want)")
        }
        if Set(note.changed) != [v, d] { log.problem("view-\(t) changed \(note.changed)") }
      }
    }
    try bus.register(name: "every", reads: []) { note in log.everyCalled(note.transaction) }

    let stop = StopFlag()
    let done = DispatchGroup()
    let committed = Committed(threads: threads)
    let started = Date()
    // Half the writes go through a handle: held back without the bus's
    // lock (docs/semantics.md, "Writes held back"), while the other
    // threads wait to begin and the observer reads.
    let handles = try (0..<threads).map { try bus.resolve("t\($0).v") }
    for t in 0..<threads {
      done.enter()
      Thread {
        var mine: [UInt64] = []
        mine.reserveCapacity(perThread)
        for i in 1...perThread {
          bus.begin()
          do {
            log.expect(t, Int64(i))
            if i % 2 == 0 {
              try bus.set(handles[t], .int64(Int64(i)))
            } else {
              try bus.set("t\(t).v", .int64(Int64(i)))
            }
            mine.append(try bus.commit())
          } catch {
            log.problem("thread \(t): \(error)")
            try? bus.rollback()
          }
        }
        committed.set(t, mine)
        done.leave()
      }.start()
    }
    // The observer: every snapshot shows committed, consistent state.
    let observed = DispatchGroup()
    observed.enter()
    Thread {
      while !stop.isStopped {
        do {
          let snap = try bus.snapshot(["**"])
          for t in 0..<threads {
            let n = snap.counters["t\(t).v"] ?? 0
            let v = snap.values["t\(t).v"], d = snap.values["t\(t).d"]
            if n == 0 { continue }
            if v != .int64(Int64(n)) || d != .int64(2 * Int64(n)) || snap.counters["t\(t).d"] != n {
              log.problem("snapshot at txn \(snap.transaction): t\(t) counter \(n), v \(String(describing: v)), d \(String(describing: d))")
            }
          }
          log.snapshotTaken()
        } catch {
          log.problem("snapshot: \(error)")
        }
      }
      observed.leave()
    }.start()
    done.wait()
    stop.stop()
    observed.wait()
    let seconds = Date().timeIntervalSince(started)

    let total = threads * perThread
    let all = committed.all
    #expect(log.allProblems.isEmpty, "\(log.allProblems)")
    #expect(all.count == total)
    #expect(all.sorted() == Array(1...UInt64(total)), "transaction ids lost or duplicated")
    #expect(log.everyCalls == total)
    #expect(log.lastSeen == UInt64(total))
    #expect(log.viewCalls == Array(repeating: perThread, count: threads))
    #expect(log.deriveCalls == Array(repeating: perThread, count: threads))
    for t in 0..<threads {
      #expect(try bus.counter("t\(t).v") == UInt64(perThread))
      #expect(try bus.counter("t\(t).d") == UInt64(perThread))
      #expect(try bus.value("t\(t).d") == .int64(2 * Int64(perThread)))
    }
    #expect(bus.statistics.transactions == UInt64(total))
    print(
      "thread stress: \(threads) threads × \(perThread) transactions = \(total) in \(String(format: "%.2f", seconds)) s"
        + " (\(Int(Double(total) / seconds)) transactions/s, \(3 * total) contract calls), \(log.snapshots) snapshots")
  }
}
