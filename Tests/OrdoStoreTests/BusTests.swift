import Foundation
import Ordo
import OrdoStore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A small seeded generator, so that a failing sequence can be rerun.
struct SeededRandom: RandomNumberGenerator {
  var state: UInt64
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

/// Random transactions through the public API: sets, touches, removes,
/// tree removals, nested transactions, rollbacks, changes undone within a
/// transaction, and a contract that mirrors `doc.*` into `mirror.*` in the
/// pass. Syncs (grouped mode) after some transactions.
func randomHistory(_ bus: Bus, _ durable: DurableState, seed: UInt64, transactions: Int) throws {
  var g = SeededRandom(state: seed)
  try bus.register(name: "mirror", reads: ["doc.*"], writes: ["mirror.*"]) { [unowned bus] note in
    for k in note.changed {
      let name = "mirror." + k.split(separator: ".").last!
      if let v = try bus.value(k) { try bus.set(name, v) } else { try bus.remove(name) }
    }
  }
  let keys = ["doc.a", "doc.b", "doc.c", "other.x", "other.y", "deep.a.b", "deep.a.c", "t.one"]
  func value() -> Value {
    switch Int.random(in: 0...4, using: &g) {
    case 0: .bool(Bool.random(using: &g))
    case 1: .int64(Int64.random(in: -3...3, using: &g))
    case 2: .double([0.5, -0.0, .infinity][Int.random(in: 0...2, using: &g)])
    case 3: .string(["", "x", "ü\u{1}"][Int.random(in: 0...2, using: &g)])
    default: .bytes([UInt8](repeating: 1, count: Int.random(in: 0...3, using: &g)))
    }
  }
  for _ in 0..<transactions {
    bus.begin()
    for _ in 0..<Int.random(in: 1...4, using: &g) {
      let k = keys.randomElement(using: &g)!
      switch Int.random(in: 0...9, using: &g) {
      case 0: try bus.touch(k)
      case 1: try bus.remove(k)
      case 2: try bus.removeTree(["doc", "deep", "other"].randomElement(using: &g)!)
      case 3:
        // A change undone in the same transaction.
        let old = try bus.value(k)
        try bus.set(k, value())
        if let old { try bus.set(k, old) } else { try bus.remove(k) }
      case 4:
        bus.begin()
        try bus.set(k, value())
        try bus.commit()
      default: try bus.set(k, value())
      }
    }
    if Int.random(in: 0...9, using: &g) == 0 { try bus.rollback() } else { try bus.commit() }
    if durable.mode == .grouped && Int.random(in: 0...4, using: &g) == 0 { try durable.sync() }
  }
  try durable.sync()
}

@Suite(.serialized) struct BusTests {
  /// Commits through a bus, reopened in a new bus: every value, counter and
  /// changed-at, the last id, the epoch and `changes(since:)` for every
  /// `since` are equal.
  @Test(arguments: DurableState.Mode.allCases)
  func aReopenedBusHasTheSameHistory(mode: DurableState.Mode) throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let bus = Bus()
    let before = bus.epoch
    let durable = try DurableState.attach(bus: bus, path: path, mode: mode)
    #expect(durable.created)
    #expect(bus.epoch == durable.epoch && bus.epoch != before)
    try randomHistory(bus, durable, seed: 7, transactions: 300)
    let state = try BusState(bus)
    #expect(state.transaction > 100, "\(state)")
    #expect(state.keypaths.values.contains { $0.value == nil }, "no tombstone in \(state)")
    #expect(durable.lastDurableTransaction == state.transaction && durable.lastCommittedTransaction == state.transaction)
    #expect(durable.close() == nil)

    let again = Bus()
    let reopened = try DurableState.attach(bus: again, path: path, mode: mode)
    #expect(!reopened.created)
    #expect(try BusState(again) == state)
    try expectSameChanges(bus, again)
    #expect(try again.changes(since: state.transaction, ["**"]) == Changes(transaction: state.transaction))
    // The history goes on from there.
    let id = try again.transaction { try again.set("doc.a", .string("after")) }
    #expect(id == state.transaction + 1)
    #expect(try reopened.sync() == id)
    reopened.close()
    let third = Bus()
    let last = try DurableState.attach(bus: third, path: path)
    #expect(third.transactionID == id && third.epoch == state.epoch)
    #expect(try third.changes(since: id - 1, ["**"]).values == ["doc.a": .string("after")])
    last.close()
  }

  /// Grouped mode, whose groups go to the commit log: a transaction too
  /// large for one record is refused at its commit, alone (the bus
  /// unchanged); the transactions around it become durable.
  @Test func aTransactionTooLargeForTheCommitLogIsRefusedAlone() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let bus = Bus()
    let durable = try DurableState.attach(bus: bus, path: path)
    #expect(try bus.transaction { try bus.set("a", .int64(1)) } == 1)
    let huge = Value.bytes([UInt8](repeating: 1, count: 256 << 20))
    do {
      _ = try bus.transaction { () throws(OrdoError) in try bus.set("big", huge) }
      Issue.record("a transaction larger than a commit log record was committed")
    } catch {
      #expect(error.code == .storage && error.message.contains("commit log"))
    }
    #expect(try bus.value("big") == nil)
    #expect(try bus.transaction { try bus.set("c", .int64(3)) } == 2)
    #expect(try durable.sync() == 2)
    durable.close()
    let again = Bus()
    let reopened = try DurableState.attach(bus: again, path: path)
    defer { reopened.close() }
    #expect(again.transactionID == 2)
    #expect(try again.value("a") == .int64(1) && again.value("c") == .int64(3) && again.value("big") == nil)
  }

  /// Only what was synced is stored; close() names what was not; the
  /// refusals change nothing.
  @Test func unsyncedTransactionsAndRefusals() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let bus = Bus()
    let durable = try DurableState.attach(bus: bus, path: path)
    for i in 1...3 { try bus.transaction { try bus.set("a", .int64(Int64(i))) } }
    #expect(durable.lastCommittedTransaction == 3 && durable.lastDurableTransaction == 0)
    #expect(try durable.sync() == 3)
    #expect(try durable.sync() == 3)  // nothing new
    let synced = try BusState(bus)

    // A second attach to the same bus, and another bus on the same file.
    expectStoreError(.invalidArgument, ["already has a durable state"]) {
      _ = try DurableState.attach(bus: bus, path: dir.file("other.ordo"))
    }
    let other = Bus()
    try other.transaction { try other.set("mine", .bool(true)) }
    let otherState = try BusState(other)
    expectStoreError(.locked, [path, "locked"]) { _ = try DurableState.attach(bus: other, path: path) }
    #expect(try BusState(other) == otherState)

    // sync() inside a callback or a transaction is refused.
    let inside = Mutex<String?>(nil)
    try bus.register(name: "syncer", reads: ["b"]) { [unowned durable] _ in
      do {
        try durable.sync()
      } catch {
        inside.withLock { $0 = "\(error)" }
      }
    }
    try bus.transaction { try bus.set("b", .int64(1)) }
    #expect(inside.withLock { $0 }?.contains("sync inside a transaction") == true)
    bus.begin()
    #expect(throws: SyncFailure.self) { try durable.sync() }
    try bus.rollback()

    // Not synced: close() names the transactions; the file keeps the synced state.
    try bus.transaction { try bus.set("a", .int64(5)) }
    #expect(durable.lastCommittedTransaction == 5)
    #expect(durable.close() == 4...5)
    #expect(durable.isClosed)
    #expect(throws: SyncFailure.self) { try durable.sync() }
    // The bus goes on in memory; nothing more is stored.
    try bus.transaction { try bus.set("a", .int64(6)) }
    #expect(bus.transactionID == 6)

    // Attach inside a transaction is refused without touching the bus or the file.
    let fresh = Bus()
    fresh.begin()
    try fresh.set("x", .int64(1))
    expectStoreError(.invalidArgument, ["transaction open", "nothing was opened"]) {
      _ = try DurableState.attach(bus: fresh, path: path)
    }
    // A new path: refused before the file is made, so none is left behind.
    let never = dir.file("never.ordo")
    expectStoreError(.invalidArgument, ["transaction open"]) { _ = try DurableState.attach(bus: fresh, path: never) }
    #expect(access(never, F_OK) != 0 && access(never + "-log", F_OK) != 0)
    try fresh.commit()
    // Inside a callback too.
    try fresh.register(name: "attacher", reads: ["x"]) { _ in
      expectStoreError(.invalidArgument, ["transaction open"]) { _ = try DurableState.attach(bus: fresh, path: never) }
    }
    try fresh.transaction { try fresh.set("x", .int64(2)) }
    try fresh.unregister(named: "attacher")
    #expect(access(never, F_OK) != 0 && access(never + "-log", F_OK) != 0)
    try fresh.transaction { try fresh.set("x", .int64(1)) }
    #expect(try fresh.value("x") == .int64(1))
    let reopened = try DurableState.attach(bus: fresh, path: path)
    // The synced state: transactions 4 (b) and 5 were not synced.
    #expect(try BusState(fresh) == synced)
    #expect(fresh.transactionID == 3)
    #expect(try fresh.value("b") == nil && fresh.value("x") == nil)
    reopened.close()
  }

  /// Several threads commit while another syncs again and again: every
  /// transaction is stored once and in order.
  @Test func concurrentCommitsShareSyncs() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let bus = Bus()
    let durable = try DurableState.attach(bus: bus, path: path, sync: .normal)
    let done = Atomic<Int>(0)
    let syncs = Atomic<Int>(0)
    let failures = Mutex<[String]>([])
    let finished = DispatchSemaphore(value: 0)
    let syncer = Thread {
      while done.load(ordering: .acquiring) < 4 {
        do {
          try durable.sync()
        } catch {
          failures.withLock { $0.append("\(error)") }
        }
        syncs.add(1, ordering: .relaxed)
        usleep(100)
      }
      finished.signal()
    }
    syncer.start()
    for worker in 0..<4 {
      Thread {
        for i in 0..<300 {
          if i == 100 || i == 200 {
            // Let a sync finish while the others keep committing.
            let seen = syncs.load(ordering: .relaxed)
            while syncs.load(ordering: .relaxed) <= seen { usleep(50) }
          }
          do {
            try bus.transaction {
              try bus.set("w\(worker).n\(i % 10)", .int64(Int64(i)))
              try bus.touch("shared")
            }
          } catch {
            failures.withLock { $0.append("\(error)") }
          }
        }
        done.add(1, ordering: .releasing)
        finished.signal()
      }.start()
    }
    for _ in 0..<5 { finished.wait() }
    #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
    #expect(try durable.sync() == 1200)
    #expect(syncs.load(ordering: .relaxed) >= 2)
    let state = try BusState(bus)
    durable.close()
    let again = Bus()
    let reopened = try DurableState.attach(bus: again, path: path)
    #expect(try BusState(again) == state)
    #expect(try again.counter("shared") == 1200)
    reopened.close()
  }

  /// Attaching while another thread commits: no transaction slips between
  /// the restore and the hook; the commits after attach are all stored.
  @Test func attachWhileAnotherThreadCommits() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    try makeState(path, 20)  // a state file whose model differs from the bus's
    let bus = Bus()
    let stop = Atomic<Bool>(false)
    let commits = Atomic<Int>(0)
    let others = Mutex<[String]>([])
    let finished = DispatchSemaphore(value: 0)
    Thread {
      var i: Int64 = 0
      while !stop.load(ordering: .acquiring) {
        i += 1
        do {
          try bus.transaction { try bus.set("n", .int64(i)) }
          commits.add(1, ordering: .relaxed)
        } catch let e as OrdoError where e.code == .storage && e.message.contains("being attached") {
          // refused while attaching: not applied
        } catch {
          others.withLock { $0.append("\(error)") }
        }
      }
      finished.signal()
    }.start()
    while commits.load(ordering: .relaxed) < 100 { usleep(100) }
    let durable = try DurableState.attach(bus: bus, path: path)
    let atAttach = commits.load(ordering: .relaxed)
    // A liveness bound, not a timing expectation: 10 s for 200 commits.
    let deadline = now() + 10
    while commits.load(ordering: .relaxed) < atAttach + 200 && now() < deadline { usleep(100) }
    stop.store(true, ordering: .releasing)
    finished.wait()
    #expect(others.withLock { $0 }.isEmpty, "\(others.withLock { $0 })")
    #expect(commits.load(ordering: .relaxed) >= atAttach + 200)
    let last = try durable.sync()
    #expect(last > 20 + 150 && last == bus.transactionID)
    let state = try BusState(bus)
    #expect(state.keypaths["k.n1"] != nil)  // the file's model, not the bus's old one
    durable.close()
    let again = Bus()
    let reopened = try DurableState.attach(bus: again, path: path)
    #expect(try BusState(again) == state)
    reopened.close()
  }

  /// A full disk (a small tmpfs): a durable commit that cannot be stored
  /// throws STORAGE and leaves memory as before; a grouped sync that fails
  /// loses its transactions and memory goes back to the disk; once space is
  /// back both go on.
  @Test func diskFull() throws {
    try #require(canMount, "mounting a tmpfs needs root (the file-size limit test covers this case otherwise)")
    let disk = SmallDisk(size: "1m")
    defer { disk.remove() }
    let path = disk.file("state.ordo")
    let big = Value.bytes((0..<131_072).map { UInt8(truncatingIfNeeded: $0) })

    let bus = Bus()
    let calls = Mutex<[UInt64]>([])
    try bus.register(name: "watch", reads: ["**"]) { note in calls.withLock { $0.append(note.transaction) } }
    var durable = try DurableState.attach(bus: bus, path: path, mode: .eachCommit)
    for i in 1...3 { try bus.transaction { try bus.set("small.n\(i)", .int64(Int64(i))) } }
    let before = try BusState(bus)
    disk.fill()
    do {
      try bus.transaction { try bus.set("big.blob", big) }
      Issue.record("a 128 KiB value was stored on a full disk")
    } catch let e as OrdoError {
      #expect(e.code == .storage)
      #expect(e.message.contains("transaction 4") && e.message.contains("full"), "\(e.message)")
    }
    #expect(try BusState(bus) == before)
    #expect(try bus.value("big.blob") == nil && bus.counter("big.blob") == 0)
    #expect(durable.lastDurableTransaction == 3)
    // The service keeps working once space is back.
    disk.free()
    #expect(try bus.transaction { try bus.set("big.blob", big) } == 4)
    #expect(durable.lastDurableTransaction == 4)
    let before4 = try BusState(bus)
    let seen = calls.withLock { $0 }
    // The contract was called in the refused pass too (before the hook);
    // the id 4 was given again.
    #expect(seen == [1, 2, 3, 4, 4], "\(seen)")
    durable.close()

    // Grouped: the sync fails, the group is lost, memory is the disk's.
    durable = try DurableState.attach(bus: bus, path: path, mode: .grouped)
    #expect(try BusState(bus) == before4)
    try bus.transaction { try bus.set("small.n1", .string("five")) }
    #expect(try durable.sync() == 5)
    let atFive = try BusState(bus)
    disk.fill()
    try bus.transaction { try bus.set("big.two", big) }
    try bus.transaction {
      try bus.set("big.three", big)
      try bus.remove("small.n2")
    }
    #expect(bus.transactionID == 7)
    do {
      try durable.sync()
      Issue.record("a 256 KiB group was stored on a full disk")
    } catch {
      #expect(error.error.kind == .storage)
      #expect(error.lost == 6...7)
      #expect(!error.refusingCommits)
      #expect(error.description.contains("full") && error.description.contains("6…7"), "\(error)")
    }
    #expect(try BusState(bus) == atFive)
    #expect(durable.lastDurableTransaction == 5 && durable.lastCommittedTransaction == 5)
    disk.free()
    #expect(try bus.transaction { try bus.set("big.two", big) } == 6)
    #expect(try durable.sync() == 6)
    let final = try BusState(bus)
    durable.close()
    let again = Bus()
    let reopened = try DurableState.attach(bus: again, path: path)
    #expect(try BusState(again) == final)
    #expect(try again.value("small.n2") == .int64(2))
    reopened.close()
  }

  /// The same with a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) in a
  /// child process (ordo-store-tool bus-fsize), which needs no privilege.
  @Test func fileSizeLimit() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let child = Child([toolPath(), "bus-fsize", path])
    #expect(child.line() == "committed 3")
    let refused = child.line() ?? ""
    #expect(refused.hasPrefix("refused STORAGE transaction 4 was not stored, nothing of it was applied: state file \(path)"), "\(refused)")
    #expect(refused.contains("File too large"), "\(refused)")
    #expect(child.line() == "unchanged")
    #expect(child.line() == "committed 4")
    #expect(child.line() == "synced 6")
    let lost = child.line() ?? ""
    #expect(lost.hasPrefix("lost 7 8 storage state file \(path)"), "\(lost)")
    #expect(lost.contains("File too large") && lost.hasSuffix("transactions 7…8 were lost"), "\(lost)")
    #expect(child.line() == "restored")
    #expect(child.line() == "synced 7")
    let described = child.line() ?? ""
    #expect(child.wait() == 0)

    let bus = Bus()
    let durable = try DurableState.attach(bus: bus, path: path)
    #expect(bus.transactionID == 7)
    #expect(try bus.counter("seq") == 6 && bus.value("seq") == .int64(7) && bus.changedAt("seq") == 7)
    #expect(try bus.changedAt("big.blob") == 4 && bus.counter("big.blob") == 1)
    #expect(try bus.counter("big.one") == 0 && bus.counter("big.two") == 0)
    // What the child saw last is what the file holds.
    #expect(described.hasPrefix("state txn 7 big.blob=bytes 5242880/1/4 "), "\(described)")
    #expect(described.contains(" seq=int64 7/6/7 ") && described.contains(" t.tick=-/1/7"), "\(described)")
    let all = try bus.changes(since: 0, ["**"])
    let lines = try all.counters.keys.sorted().map { k in
      "\(k)=\(all.values[k].map { "\($0)" } ?? "-")/\(all.counters[k]!)/\(try bus.changedAt(k))"
    }
    #expect(described == "state txn 7 " + lines.joined(separator: " "))
    durable.close()
  }

  /// kill -9 of a process committing through a bus with a durable state:
  /// after each kill, a new bus on the file holds exactly the workload's
  /// state at some transaction at or after the last acknowledged one —
  /// values, counters, changed-at, last id, epoch and `changes(since:)` —
  /// so every acknowledged transaction is there and none is half there.
  @Test(arguments: [
    (SyncMode.full, DurableState.Mode.grouped), (.normal, .grouped), (.full, .eachCommit),
  ])
  func killNineLosesNothingAcknowledged(sync: SyncMode, mode: DurableState.Mode) throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    var g = SystemRandomNumberGenerator()
    var epoch: String?
    var total: UInt64 = 0
    let rounds = sync == .full && mode == .grouped ? 6 : 3
    for round in 0..<rounds {
      let child = Child([toolPath(), "bus-crash", path, sync.rawValue, mode.rawValue])
      let target = Int.random(in: 100...500, using: &g)
      var acked: UInt64 = 0
      for _ in 0..<target {
        guard let line = child.line(), line.hasPrefix("synced "), let id = UInt64(line.dropFirst(7)) else {
          Issue.record("round \(round): the child stopped early")
          break
        }
        #expect(id > acked && id > total)
        acked = id
      }
      if Bool.random(using: &g) { usleep(UInt32.random(in: 0...3000, using: &g)) }
      child.kill9()
      #expect(child.wait() == 128 + SIGKILL)

      let bus = Bus()
      let durable = try DurableState.attach(bus: bus, path: path, sync: sync)
      if let epoch { #expect(bus.epoch == epoch) } else { epoch = bus.epoch }
      let last = bus.transactionID
      #expect(last >= acked, "round \(round): acknowledged \(acked), stored \(last)")
      #expect(last <= acked + 8 * 6000, "round \(round)")
      let replay = BusReplay(through: last)
      let state = try BusState(bus)
      #expect(state == BusState(replay, epoch: bus.epoch), "round \(round): the stored state is not the workload's at \(last)")
      for since in Set([0, acked / 2, acked, last]) {
        #expect(try bus.changes(since: since, ["**"]) == replay.changes(since: since), "round \(round) since \(since)")
      }
      total = last
      durable.close()
    }
    #expect(total >= UInt64(rounds) * 100, "\(total) transactions")
  }
}
