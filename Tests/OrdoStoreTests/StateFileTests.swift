import CSQLite
import Ordo
import OrdoStore
import Testing

#if canImport(Glibc)
import Glibc
#endif

func kp(_ k: String, _ v: Value?, _ counter: UInt64, _ at: UInt64) -> StoredKeypath {
  StoredKeypath(keypath: k, value: v, counter: counter, changedAt: at)
}

/// Runs SQL on a database file directly (to make foreign, future or
/// damaged files).
func sql(_ path: String, _ text: String) {
  var db: OpaquePointer?
  #expect(sqlite3_open(path, &db) == SQLITE_OK)
  var err: UnsafeMutablePointer<CChar>?
  let rc = sqlite3_exec(db, text, nil, nil, &err)
  #expect(rc == SQLITE_OK, "\(text): \(err.map { String(cString: $0) } ?? "")")
  sqlite3_free(err)
  sqlite3_close(db)
}

/// The integer a query returns from a database file read directly.
func sqlInt(_ path: String, _ query: String) -> Int64? {
  var db: OpaquePointer?
  guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
    sqlite3_close(db)
    return nil
  }
  defer { sqlite3_close(db) }
  var s: OpaquePointer?
  guard sqlite3_prepare_v2(db, query, -1, &s, nil) == SQLITE_OK else { return nil }
  defer { sqlite3_finalize(s) }
  return sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : nil
}

/// The size of the WAL of the state file at `path` (nil when it has none).
func sizeOfWAL(_ path: String) -> Int64? {
  var st = stat()
  return stat(path + "-wal", &st) == 0 ? Int64(st.st_size) : nil
}

/// Transaction `t` sets one of 50 keypaths (`k.n0`…`k.n49` in turn, with
/// their counters) and is synced on its own: one commit of one keypath.
func commitOneKeypath(_ f: StateFile, _ t: UInt64) throws {
  try f.append(transaction: t, changes: [kp("k.n\(t % 50)", .int64(Int64(t)), (t + 49) / 50, t)])
  try f.sync()
}

/// A state file at `path` holding transactions 1…n of the workload.
func makeState(_ path: String, _ n: UInt64) throws {
  let f = try StateFile.open(path: path)
  var counters: [String: UInt64] = [:]
  for t in 1...n {
    let changes = workload(t).map { k, v in
      let c = (counters[k] ?? 0) + 1
      counters[k] = c
      return kp(k, v, c, t)
    }
    try f.append(transaction: t, changes: changes)
  }
  try f.sync()
  f.close()
}

@Suite struct StateFileTests {
  @Test func everyValueTypeRoundTripsBitExact() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let nan = Double(bitPattern: 0x7ff8_0000_dead_beef)
    let values: [(String, Value?)] = [
      ("v.false", .bool(false)), ("v.true", .bool(true)),
      ("v.min", .int64(.min)), ("v.max", .int64(.max)), ("v.zero", .int64(0)),
      ("v.negzero", .double(-0.0)), ("v.nan", .double(nan)), ("v.inf", .double(-.infinity)),
      ("v.tiny", .double(.leastNonzeroMagnitude)),
      ("v.empty", .string("")), ("v.text", .string("ünï\u{0}cödé 🎉")),
      ("v.nobytes", .bytes([])), ("v.bytes", .bytes([0, 255, 0, 1])),
      ("v.gone", nil),
    ]
    let f = try StateFile.open(path: path)
    #expect(f.created)
    let first = try f.load()
    #expect(first.lastTransaction == 0 && first.keypaths.isEmpty && first.epoch == f.epoch)
    // A version 4 UUID.
    let parts = f.epoch.split(separator: "-").map(\.count)
    #expect(parts == [8, 4, 4, 4, 12], "\(f.epoch)")
    #expect(f.epoch.dropFirst(14).first == "4")
    try f.append(transaction: 1, changes: values.map { kp($0.0, $0.1, 1, 1) })
    try f.append(transaction: 2, changes: [kp("v.max", .int64(.max - 1), 2, 2)])
    #expect(try f.sync() == 2)
    f.close()

    let g = try StateFile.open(path: path)
    #expect(!g.created)
    #expect(g.epoch == f.epoch)
    let state = try g.load()
    #expect(state.epoch == f.epoch && state.lastTransaction == 2)
    var expected = values.map { kp($0.0, $0.1, 1, 1) }
    expected[expected.firstIndex { $0.keypath == "v.max" }!] = kp("v.max", .int64(.max - 1), 2, 2)
    expected.sort { Array($0.keypath.utf8).lexicographicallyPrecedes($1.keypath.utf8) }
    #expect(state.keypaths == expected)
    if case .double(let d)? = state.keypaths.first(where: { $0.keypath == "v.nan" })?.value {
      #expect(d.bitPattern == nan.bitPattern)
    } else {
      Issue.record("v.nan is not a double")
    }
    // A second load reads the file again and agrees.
    #expect(try g.load() == state)
    g.close()
  }

  @Test func onlySyncedGroupsAreKept() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let f = try StateFile.open(path: path)
    try f.append(transaction: 1, changes: [kp("a", .int64(1), 1, 1)])
    try f.append(transaction: 2, changes: [kp("a", .int64(2), 2, 2), kp("b", .bool(true), 1, 2)])
    #expect(f.lastAppendedTransaction == 2 && f.lastSyncedTransaction == 0)
    expectStoreError(.invalidArgument, ["1…2", "not synced"]) { _ = try f.load() }
    try f.sync()
    #expect(f.lastSyncedTransaction == 2)
    try f.append(transaction: 3, changes: [kp("a", nil, 3, 3)])
    f.discard()
    #expect(f.lastAppendedTransaction == 2)
    #expect(try f.load().keypaths == [kp("a", .int64(2), 2, 2), kp("b", .bool(true), 1, 2)])
    // The discarded id may be used again; an unsynced group is dropped by close.
    try f.append(transaction: 3, changes: [kp("c", .string("x"), 1, 3)])
    try f.sync()
    try f.append(transaction: 4, changes: [kp("c", .string("y"), 2, 4)])
    f.close()
    expectStoreError(.closed, ["closed"]) { try f.sync() }
    let g = try StateFile.open(path: path)
    let s = try g.load()
    #expect(s.lastTransaction == 3)
    #expect(s.keypaths == [kp("a", .int64(2), 2, 2), kp("b", .bool(true), 1, 2), kp("c", .string("x"), 1, 3)])
    // An empty transaction (a pass that cancelled every change) keeps its id.
    try g.append(transaction: 4, changes: [])
    try g.sync()
    g.close()
    #expect(try StateFile.open(path: path).load().lastTransaction == 4)
  }

  @Test func invalidInputChangesNothing() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let f = try StateFile.open(path: dir.file("state.ordo"))
    try f.append(transaction: 5, changes: [kp("a", .int64(1), 1, 5)])
    let bad: [(UInt64, [StoredKeypath], [String])] = [
      (5, [], ["transaction 5", "greater than", "5"]),
      (3, [], ["transaction 3"]),
      (6, [kp("a..b", .int64(1), 1, 6)], ["a..b"]),
      (6, [kp("", .int64(1), 1, 6)], ["transaction 6"]),
      (6, [kp("a.*", .int64(1), 1, 6)], ["a.*"]),
      (6, [kp("x", .int64(1), 1, 6), kp("x", nil, 1, 6)], ["\"x\" appears twice"]),
      (6, [kp("x", .int64(1), 0, 6)], ["counter 0"]),
      (6, [kp("x", .int64(1), 7, 6)], ["counter 7"]),
      (6, [kp("x", .int64(1), 1, 7)], ["changed-at 7"]),
      (6, [StoredKeypath(keypath: "x", value: nil, counter: 1, changedAt: 6, owned: true)], ["a tombstone cannot be owned"]),
      (UInt64(Int64.max) + 1, [], ["larger than"]),
    ]
    for (t, changes, fragments) in bad {
      expectStoreError(.invalidArgument, fragments) { try f.append(transaction: t, changes: changes) }
    }
    #expect(f.lastAppendedTransaction == 5)
    try f.append(transaction: 6, changes: [kp("b", .int64(2), 1, 6)])
    try f.sync()
    #expect(try f.load().keypaths == [kp("a", .int64(1), 1, 5), kp("b", .int64(2), 1, 6)])
    expectStoreError(.invalidArgument, ["fast"]) { _ = try SyncMode(parsing: "fast") }
    #expect(try SyncMode(parsing: "normal") == .normal)
    expectStoreError(.invalidArgument, ["empty"]) { _ = try StateFile.open(path: "") }
    f.close()
  }

  @Test func aSecondOpenerIsRefused() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    // Another process holds it.
    let holder = Child([toolPath(), "hold", path])
    #expect(holder.line() == "held")
    expectRefused(path, .locked, ["locked by another ordod"])
    #expect(holder.wait() == 0)
    // Released when that process ends.
    let f = try StateFile.open(path: path)
    // This process holds it: another process is refused, and so is a
    // second open here.
    let other = Child([toolPath(), "open", path])
    let line = other.line() ?? ""
    #expect(line.hasPrefix("error locked state file \(path): locked by another ordod"), "\(line)")
    #expect(other.wait() == 1)
    expectRefused(path, .locked, ["locked by another ordod"])
    // A holder killed with SIGKILL releases it too.
    f.close()
    let killed = Child([toolPath(), "hold", path])
    #expect(killed.line() == "held")
    killed.kill9()
    #expect(killed.wait() == 128 + SIGKILL)
    try StateFile.open(path: path).close()
  }

  @Test func refusesFilesThatAreNotItsOwn() throws {
    let dir = TempDir()
    defer { dir.remove() }
    // Not a database.
    let garbage = dir.file("garbage")
    var g = SystemRandomNumberGenerator()
    let noise = (0..<10_000).map { _ in UInt8.random(in: 0...255, using: &g) }
    writeFile(garbage, noise)
    expectRefused(garbage, .corrupt, ["not an Ordo state file", "not a database"])
    #expect(contents(garbage) == noise)
    let text = dir.file("text")
    writeFile(text, Array("[settings]\nkey=value\n".utf8))
    expectRefused(text, .corrupt, ["not a database"])
    #expect(contents(text) == Array("[settings]\nkey=value\n".utf8))

    // A database of another application.
    let foreign = dir.file("foreign.db")
    sql(foreign, "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'x');")
    let before = contents(foreign)
    expectRefused(foreign, .foreign, ["another application", "users"])
    #expect(contents(foreign) == before)
    // Another application's id, even with our tables.
    let other = dir.file("other.db")
    try makeState(other, 3)
    sql(other, "PRAGMA application_id = 1234;")
    expectRefused(other, .foreign, ["another application", "0x4d2"])

    // A future format.
    let future = dir.file("future.ordo")
    try makeState(future, 3)
    let next = StateFile.formatVersion + 1
    sql(future, "PRAGMA user_version = \(next);")
    let futureBytes = contents(future)
    expectRefused(future, .futureFormat, ["format version \(next)", "newer", "(\(StateFile.formatVersion))"])
    #expect(contents(future) == futureBytes)

    // Missing tables.
    let missing = dir.file("missing.ordo")
    try makeState(missing, 3)
    sql(missing, "DROP TABLE keypath;")
    expectRefused(missing, .corrupt, ["table keypath is missing"])
    let noMeta = dir.file("nometa.ordo")
    try makeState(noMeta, 3)
    sql(noMeta, "DELETE FROM meta WHERE name = 'epoch';")
    expectRefused(noMeta, .corrupt, ["no epoch"])

    // Rows that break the format's rules.
    for (name, change, fragment) in [
      ("counter", "UPDATE keypath SET counter = 0 WHERE keypath = 'k.n1'", "counter 0"),
      ("future-id", "UPDATE keypath SET changed_at = 99 WHERE keypath = 'k.n1'", "changed-at 99"),
      ("type", "UPDATE keypath SET type = 4 WHERE keypath = 'k.n1'", "value type 4"),
      ("keypath", "UPDATE keypath SET keypath = 'a..b' WHERE keypath = 'k.n1'", "not a valid keypath"),
      ("owned", "UPDATE keypath SET owned = 2 WHERE keypath = 'k.n1'", "owned is not 0 or 1"),
      ("owned-tombstone", "UPDATE keypath SET owned = 1, type = 0, value = NULL WHERE keypath = 'k.n1'", "a tombstone marked owned"),
    ] {
      let p = dir.file("\(name).ordo")
      try makeState(p, 20)
      sql(p, change)
      expectRefused(p, .corrupt, ["damaged", fragment])
    }
  }

  /// Makes the closed state file at `path` one of format version 1: the
  /// same without the column `owned`.
  func downgradeToVersion1(_ path: String) {
    sql(path, "ALTER TABLE keypath DROP COLUMN owned; PRAGMA user_version = 1; UPDATE meta SET value = 1 WHERE name = 'format';")
    #expect(formatOf(path) == [1, 1])
  }

  /// The format version a file's header and its meta row say.
  func formatOf(_ path: String) -> [Int64?] {
    [sqlInt(path, "PRAGMA user_version"), sqlInt(path, "SELECT value FROM meta WHERE name = 'format'")]
  }

  @Test func aVersion1FileIsUpgradedWhenItOpens() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("v1.ordo")
    try makeState(path, 20)
    downgradeToVersion1(path)
    let f = try StateFile.open(path: path)
    let state = try f.load()
    #expect(state.lastTransaction == 20 && state.keypaths == replay(20))
    let owned = StoredKeypath(keypath: "a.w", value: .int64(21), counter: 1, changedAt: 21, owned: true)
    try f.append(transaction: 21, changes: [owned])
    try f.sync()
    f.close()
    #expect(formatOf(path) == [StateFile.formatVersion, StateFile.formatVersion])
    let again = try StateFile.open(path: path)
    #expect(try again.load().keypaths == [owned] + state.keypaths)
    again.close()

    // A version 1 state whose commit log holds transactions its database
    // lacks (a version 1 ordod killed): upgraded, then the log applied.
    let logged = dir.file("logged.ordo")
    let writer = try StateFile.open(path: logged, commitLog: true)
    for t in UInt64(1)...5 { try commitOneKeypath(writer, t) }
    let crashed = dir.file("crashed.ordo")
    crashImage(logged, to: crashed)
    writer.close()
    downgradeToVersion1(crashed)
    #expect(sqlInt(crashed, "SELECT value FROM meta WHERE name = 'last_transaction'") == 0)
    let upgraded = try StateFile.open(path: crashed, commitLog: true)
    let applied = try upgraded.load()
    #expect(applied.lastTransaction == 5)
    #expect(applied.keypaths == (UInt64(1)...5).map { kp("k.n\($0)", .int64(Int64($0)), 1, $0) })
    upgraded.close()
    #expect(formatOf(crashed) == [StateFile.formatVersion, StateFile.formatVersion])

    // A damaged version 1 file is refused as it is, not upgraded.
    let damaged = dir.file("damaged.ordo")
    try makeState(damaged, 20)
    sql(damaged, "UPDATE keypath SET counter = 0 WHERE keypath = 'k.n1'")
    downgradeToVersion1(damaged)
    let before = contents(damaged)
    expectRefused(damaged, .corrupt, ["damaged", "counter 0"])
    #expect(contents(damaged) == before)
    #expect(formatOf(damaged) == [1, 1])
  }

  @Test func refusesADamagedFile() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    // Enough rows for several b-tree pages; close checkpoints into the file.
    let f = try StateFile.open(path: path)
    for t in UInt64(1)...400 {
      try f.append(transaction: t, changes: [kp("k.n\(t)", .string(String(repeating: "x", count: 200)), 1, t)])
    }
    try f.sync()
    f.close()
    var bytes = try #require(contents(path))
    #expect(bytes.count > 16 * 4096)
    // Overwrite a page in the middle with garbage.
    var g = SystemRandomNumberGenerator()
    for i in (8 * 4096)..<(9 * 4096) { bytes[i] = UInt8.random(in: 0...255, using: &g) }
    writeFile(path, bytes)
    expectRefused(path, .corrupt, ["damaged"])
    #expect(contents(path) == bytes)
  }

  @Test func anEmptyFileIsANewState() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    writeFile(path, [])
    let f = try StateFile.open(path: path)
    #expect(f.created)
    #expect(try f.load().lastTransaction == 0)
    f.close()
    // A file too short for SQLite's header reads as an empty database to
    // SQLite, but it holds someone's bytes: refused, left as it was.
    for bytes in [[UInt8(ascii: "x")], [UInt8(ascii: "\n")], [UInt8](repeating: 7, count: 99)] {
      let short = dir.file("short.ordo")
      writeFile(short, bytes)
      expectRefused(short, .corrupt, ["is not an Ordo state file"])
      #expect(contents(short) == bytes)
    }
    // A directory is not a state file.
    expectRefused(dir.path, .storage, ["not a regular file"])
    // A missing directory.
    expectRefused(dir.file("no/such/state.ordo"), .storage, ["cannot create", "No such file or directory"])
  }

  /// The WAL is grown to its working size when the file opens, so commits
  /// overwrite it in place and never append (docs/storage.md); the zeros
  /// past its last frame change nothing of what is loaded, after a close
  /// or after a process dies without one.
  @Test func theWALHasItsWorkingSizeFromTheStart() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let f = try StateFile.open(path: path)
    #expect(sizeOfWAL(path) == 4 << 20)
    // Commits keep it at its size (past the automatic checkpoint too, which
    // restarts it from the start: checkpointsOnceTheWALIsFull).
    for t in UInt64(1)...1_200 {
      try commitOneKeypath(f, t)
      if t % 100 == 0 { #expect(sizeOfWAL(path) == 4 << 20, "after \(t) commits") }
    }
    let kept = try f.load()
    #expect(kept.lastTransaction == 1_200 && kept.keypaths.count == 50)
    f.close()
    let g = try StateFile.open(path: path)
    #expect(sizeOfWAL(path) == 4 << 20)
    #expect(try g.load() == kept)
    g.close()
    // A process killed right after opening (its WAL all zeros) leaves a
    // file that loads what was synced (kills after commits:
    // DurabilityTests).
    let child = Child([toolPath(), "hold", path])
    #expect(child.line() == "held")
    #expect(sizeOfWAL(path) == 4 << 20)
    child.kill9()
    #expect(child.wait() == 128 + SIGKILL)
    #expect(try StateFile.open(path: path).load() == kept)
  }

  /// A new state file has 1 KiB pages (a quarter of what each commit
  /// writes to the WAL with SQLite's 4 KiB); a file with 4 KiB pages
  /// opens, loads and stores the same way and keeps its page size.
  @Test func newFilesHaveSmallPagesAndOthersStillOpen() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    try makeState(path, 30)
    #expect(sqlInt(path, "PRAGMA page_size") == Int64(StateFile.pageSize))
    let before = try StateFile.open(path: path).load()
    #expect(before.lastTransaction == 30)
    // The same state rewritten with SQLite's default page size.
    sql(path, "PRAGMA journal_mode = DELETE; PRAGMA page_size = 4096; VACUUM; PRAGMA journal_mode = WAL;")
    #expect(sqlInt(path, "PRAGMA page_size") == 4096)
    let f = try StateFile.open(path: path)
    #expect(!f.created)
    #expect(try f.load() == before)
    try f.append(transaction: 31, changes: [kp("k.new", .string("after"), 1, 31)])
    #expect(try f.sync() == 31)
    f.close()
    let g = try StateFile.open(path: path)
    let after = try g.load()
    #expect(after.lastTransaction == 31 && after.keypaths.count == before.keypaths.count + 1)
    #expect(after.keypaths.contains(kp("k.new", .string("after"), 1, 31)))
    g.close()
    #expect(sqlInt(path, "PRAGMA page_size") == 4096)
  }

  /// SQLite's automatic checkpoint waits until the WAL has reached its
  /// working size (3 986 frames of 1 KiB pages), not SQLite's default
  /// 1 000 frames: the database file is first written after more than
  /// 1 000 one-keypath commits (at most 3 frames each), and it is written
  /// by 4 000 (at least one frame each); the WAL keeps its size
  /// throughout.
  @Test func checkpointsOnceTheWALIsFull() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let f = try StateFile.open(path: path)
    let before = contents(path)
    #expect(before.map { !$0.isEmpty } == true)
    var firstWrite: UInt64?
    for t in UInt64(1)...4_000 {
      try commitOneKeypath(f, t)
      if t % 250 == 0 { #expect(sizeOfWAL(path) == 4 << 20, "after \(t) commits") }
      if t % 50 == 0, contents(path) != before {
        firstWrite = t
        break
      }
    }
    #expect(firstWrite.map { $0 > 1_000 } == true, "the database was first written after \(firstWrite.map(String.init) ?? "none of the") commits")
    #expect(sizeOfWAL(path) == 4 << 20)
    let kept = try f.load()
    f.close()
    #expect(try StateFile.open(path: path).load() == kept)
  }

  /// The WAL's preallocation is best effort: a write of it that fails (a
  /// file-size limit below 4 MiB) cuts it back, and the file opens and
  /// stores as before.
  @Test func aFailedWALPreallocationIsCutBack() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let child = Child([toolPath(), "open-limited", path, "\(1 << 20)"])
    let wal = child.line() ?? ""
    #expect(wal.hasPrefix("wal ") && (Int(wal.dropFirst(4)) ?? Int.max) < 1 << 20, "\(wal)")
    #expect(child.line() == "synced 1")
    #expect(child.wait() == 0)
    #expect(try StateFile.open(path: path).load().keypaths == [kp("small.n1", .int64(1), 1, 1)])
  }

  /// Nor does it take a small file system's space: with less than 64 MiB
  /// free the WAL is not grown.
  @Test func noWALPreallocationOnASmallFileSystem() throws {
    try #require(canMount, "mounting a tmpfs needs root")
    let disk = SmallDisk(size: "32m")
    defer { disk.remove() }
    let path = disk.file("state.ordo")
    let f = try StateFile.open(path: path)
    var st = stat()
    #expect(stat(path + "-wal", &st) == 0 && st.st_size < 1 << 20, "WAL of \(st.st_size) bytes")
    try f.append(transaction: 1, changes: [kp("a", .int64(1), 1, 1)])
    #expect(try f.sync() == 1)
    f.close()
  }

  @Test func readOnlyDirectory() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let existing = dir.file("state.ordo")
    try makeState(existing, 10)
    let before = contents(existing)
    if canMount {
      // As root permissions do not bind: a read-only mount does.
      #expect(run(["/bin/mount", "--bind", dir.path, dir.path]) == 0)
      #expect(run(["/bin/mount", "-o", "remount,bind,ro", dir.path]) == 0)
      defer { run(["/bin/umount", dir.path]) }
      expectRefused(dir.file("new.ordo"), .storage, ["cannot create", "Read-only file system"])
      expectRefused(existing, .storage, ["cannot open for writing", "Read-only file system"])
    } else {
      #expect(chmod(dir.path, 0o555) == 0 && chmod(existing, 0o444) == 0)
      defer { _ = chmod(dir.path, 0o755) }
      expectRefused(dir.file("new.ordo"), .storage, ["cannot create", "Permission denied"])
      expectRefused(existing, .storage, ["cannot open for writing", "Permission denied"])
    }
    #expect(contents(existing) == before)
    #expect(try StateFile.open(path: existing).load().lastTransaction == 10)
  }

  /// A state file its user may write, in a directory it may not: the
  /// refusal names the directory (SQLite alone says "attempt to write a
  /// readonly database"). Root ignores permissions, so the opener is an
  /// unprivileged child (setpriv) when the tests run as root.
  @Test func aDirectoryThatCannotTakeTheWorkingFilesIsNamed() throws {
    let dir = TempDir()
    defer {
      _ = chmod(dir.path, 0o755)
      dir.remove()
    }
    let path = dir.file("state.ordo")
    try makeState(path, 3)
    for extra in ["-wal", "-shm", "-log"] { unlink(path + extra) }
    let before = contents(path)
    #expect(chmod(path, 0o666) == 0 && chmod(dir.path, 0o555) == 0)
    if getuid() == 0 {
      let child = Child(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", toolPath(), "open", path])
      let line = child.line(timeout: 60) ?? ""
      #expect(child.wait() == 1)
      #expect(line.hasPrefix("error storage ") && line.contains("the directory \(dir.path) is not writable"), "\(line)")
    } else {
      expectRefused(path, .storage, ["the directory \(dir.path) is not writable", "-wal, -shm and -log"])
    }
    #expect(contents(path) == before)
    #expect(access(path + "-wal", F_OK) != 0 && access(path + "-log", F_OK) != 0)
  }
}

func expectStoreError(
  _ kind: StoreError.Kind, _ fragments: [String], sourceLocation: SourceLocation = #_sourceLocation,
  _ body: () throws -> Void
) {
  do {
    try body()
    Issue.record("no error; expected \(kind)", sourceLocation: sourceLocation)
  } catch let error as StoreError {
    #expect(error.kind == kind, "\(error.message)", sourceLocation: sourceLocation)
    for f in fragments {
      #expect(error.message.contains(f), "\"\(error.message)\" lacks \"\(f)\"", sourceLocation: sourceLocation)
    }
  } catch {
    Issue.record("\(error); expected a StoreError", sourceLocation: sourceLocation)
  }
}
