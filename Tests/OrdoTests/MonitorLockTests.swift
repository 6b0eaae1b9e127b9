import Foundation
import Synchronization
import Testing

@testable import Ordo

/// The bus's lock (``MonitorLock``): mutual exclusion under contention, and
/// the bound on a contender's sleep that covers a wakeup its unlock missed.
@Suite struct MonitorLockTests {
  /// Threads that take and release the lock in tight rounds all finish,
  /// and no two of them are ever inside at once.
  @Test func contendedRoundsComplete() {
    let lock = MonitorLock.make()
    defer { lock.destroy() }
    let inside = Atomic<Int>(0)
    let overlaps = Atomic<Int>(0)
    let total = Atomic<Int>(0)
    let threads = 4, rounds = 20_000
    DispatchQueue.concurrentPerform(iterations: threads) { _ in
      for _ in 0..<rounds {
        lock.lock()
        if inside.add(1, ordering: .relaxed).newValue != 1 { overlaps.add(1, ordering: .relaxed) }
        total.add(1, ordering: .relaxed)
        inside.subtract(1, ordering: .relaxed)
        lock.unlock()
      }
    }
    #expect(overlaps.load(ordering: .relaxed) == 0)
    #expect(total.load(ordering: .relaxed) == threads * rounds)
  }

  /// A contender asleep on the lock gets it soon after the holder lets it
  /// go, also when the unlock misses it and nothing else ever unlocks: the
  /// holder here unlocks once per round and then only watches. A missed
  /// wakeup costs at most the bound (200 µs); the slack covers a loaded
  /// machine's scheduling, which can hold the contender back for tens of
  /// milliseconds. Without the bound a missed wakeup never ends: the
  /// contender would wait forever, far beyond any slack.
  @Test func contenderWakesWithinBound() {
    let lock = MonitorLock.make()
    defer { lock.destroy() }
    // The round the holder opened, the last the contender began to wait
    // in, and the last in which it took the lock.
    let round = Atomic<Int>(0), trying = Atomic<Int>(0), acquired = Atomic<Int>(0)
    let rounds = 300
    let contender = Thread {
      for r in 1...rounds {
        while round.load(ordering: .acquiring) != r { sched_yield() }
        trying.store(r, ordering: .releasing)
        lock.lock()
        acquired.store(r, ordering: .releasing)
        lock.unlock()
      }
    }
    contender.start()
    var longest: UInt64 = 0
    for r in 1...rounds {
      lock.lock()
      round.store(r, ordering: .releasing)
      while trying.load(ordering: .acquiring) != r { sched_yield() }
      usleep(50)  // the contender is asleep in the lock, or about to be
      let start = DispatchTime.now().uptimeNanoseconds
      lock.unlock()
      while acquired.load(ordering: .acquiring) != r { sched_yield() }
      longest = max(longest, DispatchTime.now().uptimeNanoseconds - start)
    }
    let slack: UInt64 = 500_000_000
    #expect(longest < UInt64(MonitorLock.missedWakeupBoundNS) + slack, "a contender waited \(longest) ns")
  }
}
