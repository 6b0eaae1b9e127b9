import Ordo
import OrdoStore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The commit log of a state file (`StateFile.open(path:sync:commitLog:)`,
/// docs/storage.md "The commit log"). A process crash is simulated by
/// copying the files while the state file is open: what a `kill -9` would
/// leave (everything written is in the files; the kill -9 rounds through a
/// bus, in BusTests, kill real processes).
@Suite struct CommitLogTests {
  /// Appends transactions `range` of the workload, one sync per `group`.
  func write(_ f: StateFile, _ range: ClosedRange<UInt64>, group: UInt64 = 1, counters: inout [String: UInt64]) throws {
    for t in range {
      let changes = workload(t).map { k, v in
        let c = (counters[k] ?? 0) + 1
        counters[k] = c
        return kp(k, v, c, t)
      }
      try f.append(transaction: t, changes: changes)
      if t % group == 0 || t == range.upperBound { try f.sync() }
    }
  }

  /// A state file with a commit log in `dir`, holding transactions `range`
  /// of the workload, synced one by one and not applied.
  func loggedState(in dir: TempDir, _ range: ClosedRange<UInt64>, name: String = "state.ordo") throws
    -> (String, StateFile)
  {
    let path = dir.file(name)
    let f = try StateFile.open(path: path, commitLog: true)
    var counters: [String: UInt64] = [:]
    try write(f, range, counters: &counters)
    return (path, f)
  }

  /// The last transaction id the database itself holds (no log applied).
  func databaseLast(_ path: String) throws -> UInt64 {
    let scratch = path + ".db-only"
    for suffix in ["", "-wal"] {
      if let bytes = contents(path + suffix) { writeFile(scratch + suffix, bytes) }
    }
    let f = try StateFile.open(path: scratch)
    defer {
      f.close()
      for suffix in ["", "-wal", "-shm", "-log"] { unlink(scratch + suffix) }
    }
    return try f.load().lastTransaction
  }

  @Test func aSyncedGroupIsInTheLogBeforeTheDatabaseAndSurvivesACrash() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let f = try StateFile.open(path: path, commitLog: true)
    #expect(f.usesCommitLog)
    var counters: [String: UInt64] = [:]
    try write(f, 1...40, group: 3, counters: &counters)
    try f.applyLog()
    try write(f, 41...60, group: 4, counters: &counters)
    #expect(f.lastSyncedTransaction == 60)
    // Synced, not applied: the database stops at 40, the log has the rest.
    #expect(try databaseLast(path) == 40)
    crashImage(path, to: dir.file("crash.ordo"))
    let reopened = try StateFile.open(path: dir.file("crash.ordo"), commitLog: true)
    let state = try reopened.load()
    #expect(state.lastTransaction == 60)
    #expect(state.keypaths == replay(60))
    reopened.close()
    // Opening applied the log durably: the database alone has all of it.
    #expect(try databaseLast(dir.file("crash.ordo")) == 60)
    // Opened without a commit log (`--sync normal`, each-commit mode), the
    // log's transactions are applied all the same.
    crashImage(path, to: dir.file("crash3.ordo"))
    let plain = try StateFile.open(path: dir.file("crash3.ordo"), sync: .normal)
    #expect(!plain.usesCommitLog)
    #expect(try plain.load().keypaths == replay(60))
    try plain.append(transaction: 61, changes: [kp("k.plain", .int64(61), 1, 61)])
    try plain.sync()
    plain.close()
    // ... and the log, started anew, does not bring them back later.
    let back = try StateFile.open(path: dir.file("crash3.ordo"), commitLog: true)
    #expect(try back.load().lastTransaction == 61)
    back.close()
    // An unsynced group is not in the log.
    try f.append(transaction: 61, changes: [kp("k.new", .int64(1), 1, 61)])
    crashImage(path, to: dir.file("crash2.ordo"))
    let second = try StateFile.open(path: dir.file("crash2.ordo"), commitLog: true)
    #expect(try second.load().lastTransaction == 60)
    second.close()
    f.discard()
    try f.applyLog()
    #expect(try databaseLast(path) == 60)
    f.close()
    expectStoreError(.closed, [path, "closed"]) { try f.applyLog() }
  }

  /// Bytes this thread had read from the disk (`read_bytes` of
  /// /proc/thread-self/io: reads the page cache did not serve).
  func diskReads() -> Int64? {
    guard let text = contents("/proc/thread-self/io").map({ String(decoding: $0, as: UTF8.self) }) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix("read_bytes: ") {
      return Int64(line.dropFirst("read_bytes: ".count))
    }
    return nil
  }

  /// Drops the file's pages from the page cache; returns how many of its
  /// first `pages` pages are still there.
  func evict(_ path: String, pages: Int) -> Int {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    defer { close(fd) }
    _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
    guard let map = mmap(nil, pages * 4096, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else { return -1 }
    defer { munmap(map, pages * 4096) }
    var resident = [UInt8](repeating: 0, count: pages)
    guard mincore(map, pages * 4096, &resident) == 0 else { return -1 }
    return resident.filter { $0 & 1 != 0 }.count
  }

  @Test func aGroupIsWrittenAsWholePagesSoNoPageIsReadFirst() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (path, f) = try loggedState(in: dir, 1...3)
    defer { f.close() }
    // The next record goes into the middle of the first record page, whose
    // bytes are on disk only: written in part, the kernel would read it.
    #expect(evict(path + "-log", pages: 3) == 0, "the log's pages left the page cache")
    let before = try #require(diskReads())
    try f.append(transaction: 4, changes: [kp("k.page", .int64(4), 1, 4)])
    try f.sync()
    #expect(try #require(diskReads()) == before, "a commit read a page of the log before writing it")
    // A group that crosses into the next page, the same.
    #expect(evict(path + "-log", pages: 3) == 0)
    let big = kp("k.big", .bytes([UInt8](repeating: 7, count: 5000)), 1, 5)
    try f.append(transaction: 5, changes: [big])
    try f.sync()
    #expect(try #require(diskReads()) == before)
    // What was around the groups in their pages is still there.
    crashImage(path, to: dir.file("crash.ordo"))
    let reopened = try StateFile.open(path: dir.file("crash.ordo"), commitLog: true)
    let state = try reopened.load()
    #expect(state.lastTransaction == 5)
    let expected = (replay(3) + [big, kp("k.page", .int64(4), 1, 4)])
      .sorted { Array($0.keypath.utf8).lexicographicallyPrecedes($1.keypath.utf8) }
    #expect(state.keypaths == expected)
    reopened.close()
  }

  /// A log opened with records the database already holds is not started
  /// anew: the next group goes after them, into the same page, and must
  /// put their bytes back (read from the file at open) for the log to
  /// stay readable from its start.
  @Test func aGroupAfterReopeningKeepsTheRecordsBeforeItInItsPage() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (path, f) = try loggedState(in: dir, 1...3)
    try f.applyLog()
    crashImage(path, to: dir.file("crash.ordo"))
    f.close()
    let reopened = try StateFile.open(path: dir.file("crash.ordo"), commitLog: true)
    #expect(try reopened.load().lastTransaction == 3)
    let next = kp("k.next", .int64(4), 1, 4)
    try reopened.append(transaction: 4, changes: [next])
    try reopened.sync()
    // Killed before the database has transaction 4: only the log has it.
    crashImage(dir.file("crash.ordo"), to: dir.file("again.ordo"))
    reopened.close()
    let again = try StateFile.open(path: dir.file("again.ordo"), commitLog: true)
    let state = try again.load()
    #expect(state.lastTransaction == 4)
    #expect(state.keypaths.contains(next))
    again.close()
  }

  @Test func aTornRecordEndsTheLog() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (path, f) = try loggedState(in: dir, 1...4)
    crashImage(path, to: dir.file("crash.ordo"))
    f.close()
    // Walk the records (docs/storage.md) to the fourth and damage its
    // changes: the scan must stop after the third.
    var log = contents(dir.file("crash.ordo-log"))!
    var offset = 4096
    for _ in 0..<3 {
      let length = Int(log[offset]) | Int(log[offset + 1]) << 8 | Int(log[offset + 2]) << 16
      offset += (24 + length + 7) & ~7
    }
    #expect(log[offset + 8] == 4, "the fourth record is transaction 4")
    log[offset + 30] ^= 0x55
    writeFile(dir.file("crash.ordo-log"), log)
    let reopened = try StateFile.open(path: dir.file("crash.ordo"), commitLog: true)
    let state = try reopened.load()
    #expect(state.lastTransaction == 3)
    #expect(state.keypaths == replay(3))
    // The history goes on from 3.
    try reopened.append(transaction: 4, changes: [kp("k.after", .bool(true), 1, 4)])
    try reopened.sync()
    reopened.close()
    let again = try StateFile.open(path: dir.file("crash.ordo"), commitLog: true)
    #expect(try again.load().keypaths.contains(kp("k.after", .bool(true), 1, 4)))
    again.close()
  }

  @Test func aLogStartedAnewKeepsNoStaleRecords() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let f = try StateFile.open(path: path, commitLog: true)
    // 8 KiB values: the log passes its working size after ≈ 100 records
    // and starts anew at the next applyLog().
    let blob = Value.bytes([UInt8](repeating: 0xab, count: 8192))
    var expected: [String: StoredKeypath] = [:]
    for t in UInt64(1)...260 {
      let k = "big.n\(t % 7)"
      let c = (expected[k]?.counter ?? 0) + 1
      expected[k] = kp(k, t % 3 == 0 ? .int64(Int64(t)) : blob, c, t)
      try f.append(transaction: t, changes: [expected[k]!])
      try f.sync()
      if t <= 250 { try f.applyLog() }
    }
    let logSize = contents(path + "-log")!.count
    #expect(logSize <= 1 << 20, "the log stayed within its working size (\(logSize) bytes)")
    crashImage(path, to: dir.file("crash.ordo"))
    let reopened = try StateFile.open(path: dir.file("crash.ordo"), commitLog: true)
    let state = try reopened.load()
    #expect(state.lastTransaction == 260)
    #expect(state.keypaths == expected.values.sorted { $0.keypath < $1.keypath })
    reopened.close()
    f.close()
  }

  @Test func aLogOfAnotherStateIsRefusedOrLeftBehind() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (a, fa) = try loggedState(in: dir, 1...5, name: "a.ordo")
    let b = dir.file("b.ordo")
    crashImage(a, to: dir.file("a-crash.ordo"))
    fa.close()
    try makeState(b, 3)
    // b's database beside a's log, which holds transactions b lacks.
    writeFile(b + "-log", contents(dir.file("a-crash.ordo-log"))!)
    let before = contents(b), logBefore = contents(b + "-log")
    expectStoreError(.corrupt, [b + "-log", "another state"]) { _ = try StateFile.open(path: b, commitLog: true) }
    let sameDatabase = contents(b) == before, sameLog = contents(b + "-log") == logBefore
    #expect(sameDatabase, "the refused state file was changed")
    #expect(sameLog, "the refused commit log was changed")
    // A log whose database was removed: the new state leaves it behind.
    let c = dir.file("c.ordo")
    writeFile(c + "-log", contents(dir.file("a-crash.ordo-log"))!)
    let fc = try StateFile.open(path: c, commitLog: true)
    #expect(fc.created)
    #expect(try fc.load() == StoredState(epoch: fc.epoch, lastTransaction: 0, keypaths: []))
    fc.close()
    let again = try StateFile.open(path: c, commitLog: true)
    #expect(try again.load().lastTransaction == 0)
    again.close()
  }

  @Test func aTransactionTooLargeForOneRecordIsRefused() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (path, f) = try loggedState(in: dir, 1...2)
    // (Debug builds assert at every record that the size the check
    // measures is what the encoding writes.)
    try f.append(transaction: 3, changes: [kp("a.b", .string("xyz"), 1, 3)])
    try f.sync()
    let huge = Value.bytes([UInt8](repeating: 1, count: 256 << 20))
    expectStoreError(.invalidArgument, ["transaction 4", "commit log"]) {
      try f.append(transaction: 4, changes: [kp("big.one", huge, 1, 4)])
    }
    // Nothing changed: the next transaction is 4, and the state has 1…3.
    try f.append(transaction: 4, changes: [kp("a.c", .bool(true), 1, 4)])
    try f.sync()
    f.close()
    let again = try StateFile.open(path: path, commitLog: true)
    let state = try again.load()
    #expect(state.lastTransaction == 4)
    #expect(state.keypaths.contains(kp("a.b", .string("xyz"), 1, 3)))
    again.close()
  }

  /// The database cannot take what the log holds (a full disk: a small
  /// record still fits in the log's last page, the WAL must grow): nothing
  /// is lost. `applyLog()` says so, `sync()` goes on making commits durable,
  /// and once space is back an attach has every one of them.
  @Test func aDatabaseThatCannotTakeTheLogLosesNothing() throws {
    try #require(canMount, "mounting a tmpfs needs root")
    let disk = SmallDisk(size: "1m")
    defer { disk.remove() }
    let path = disk.file("state.ordo")
    let bus = Bus()
    let durable = try DurableState.attach(bus: bus, path: path)
    try bus.transaction { try bus.set("a.n0", .int64(0)) }
    #expect(try durable.sync() == 1)
    try durable.applyLog()
    disk.fill()
    var refused: StoreError?
    var t: Int64 = 1
    while refused == nil && t <= 20 {
      try bus.transaction { try bus.set("a.n\(t)", .int64(t)) }
      #expect(try durable.sync() == UInt64(t + 1), "transaction \(t + 1) is durable in the log")
      do {
        try durable.applyLog()
      } catch {
        refused = error
      }
      t += 1
    }
    let e = try #require(refused, "the database took every transaction on a full disk")
    #expect(e.kind == .storage && e.message.contains("stay durable in the commit log"), "\(e.message)")
    try bus.transaction { try bus.set("b.after", .string("x")) }
    let last = try durable.sync()
    #expect(last == UInt64(t + 1))
    let before = try BusState(bus)
    durable.close()
    // Closed: applying says so and changes nothing.
    expectStoreError(.closed, [path, "closed"]) { try durable.applyLog() }
    disk.free()
    let again = Bus()
    let reopened = try DurableState.attach(bus: again, path: path)
    #expect(try BusState(again) == before)
    #expect(again.transactionID == last)
    reopened.close()
  }

  @Test func aDamagedLogHeaderIsRefused() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (path, f) = try loggedState(in: dir, 1...3)
    f.close()
    var log = contents(path + "-log")!
    for i in 0..<1024 { log[i] = UInt8(truncatingIfNeeded: i &* 31 &+ 7) }
    writeFile(path + "-log", log)
    expectStoreError(.corrupt, [path + "-log", "no valid header"]) { _ = try StateFile.open(path: path, commitLog: true) }
    let same = contents(path + "-log") == log
    #expect(same, "the refused log was changed")
  }
}
