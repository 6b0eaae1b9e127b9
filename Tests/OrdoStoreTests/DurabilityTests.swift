import Ordo
import OrdoStore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// kill -9, disk full, file-size limit: what was synced survives, what was
/// not is not half there, and the state file stays usable.
@Suite(.serialized) struct DurabilityTests {
  /// A child appends and syncs the workload in groups of 1–8, printing each
  /// synced id; it is killed with SIGKILL at random moments. After each
  /// kill the file holds exactly the workload's state at some group's end
  /// at or after the last acknowledged id (at most one group later: the
  /// kill can fall between the sync and its print).
  @Test(arguments: [SyncMode.full, .normal])
  func killNineLosesNothingAcknowledged(sync: SyncMode) throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    var g = SystemRandomNumberGenerator()
    var epoch: String?
    var total: UInt64 = 0
    let rounds = sync == .full ? 6 : 3
    for round in 0..<rounds {
      let child = Child([toolPath(), "crash", path, sync.rawValue])
      let target = Int.random(in: 100...600, using: &g)
      var acked: UInt64 = 0
      for _ in 0..<target {
        guard let line = child.line(), line.hasPrefix("synced "), let id = UInt64(line.dropFirst(7)) else {
          Issue.record("round \(round): the child stopped early")
          break
        }
        #expect(id > acked)
        acked = id
      }
      // Sometimes a little later, between two prints.
      if Bool.random(using: &g) { usleep(UInt32.random(in: 0...3000, using: &g)) }
      child.kill9()
      #expect(child.wait() == 128 + SIGKILL)
      let f = try StateFile.open(path: path, sync: sync)
      let state = try f.load()
      if let epoch { #expect(state.epoch == epoch) } else { epoch = state.epoch }
      #expect(state.lastTransaction >= acked, "round \(round): acknowledged \(acked), stored \(state.lastTransaction)")
      #expect(state.lastTransaction <= acked + 8 + 8 * 200, "round \(round)")
      #expect(state.keypaths == replay(state.lastTransaction), "round \(round): state is not the workload's at \(state.lastTransaction)")
      total = state.lastTransaction
      f.close()
    }
    #expect(total >= UInt64(rounds) * 100 && (sync == .normal || total >= 1000), "\(total) transactions")
  }

  /// A full disk (a small tmpfs): the failing group is dropped with the
  /// reason, the file stays as it was at the last sync, and once space is
  /// back the next sync succeeds.
  @Test func diskFull() throws {
    try #require(canMount, "mounting a tmpfs needs root (the file-size limit test covers this case otherwise)")
    let disk = SmallDisk(size: "512k")
    defer { disk.remove() }
    let path = disk.file("state.ordo")
    let f = try StateFile.open(path: path)
    for t in UInt64(1)...5 { try f.append(transaction: t, changes: [kp("small.n\(t)", .int64(Int64(t)), 1, t)]) }
    try f.sync()
    let synced = try f.load()
    // Fill what is left.
    disk.fill()
    let big = kp("big.blob", .bytes((0..<131_072).map { UInt8(truncatingIfNeeded: $0) }), 1, 6)
    expectStoreError(.storage, [path, "transaction", "full"]) {
      try f.append(transaction: 6, changes: [big])
      try f.sync()
    }
    #expect(f.lastSyncedTransaction == 5 && f.lastAppendedTransaction == 5)
    #expect(try f.load() == synced)
    // Space is back: the same transaction is stored.
    disk.free()
    try f.append(transaction: 6, changes: [big])
    #expect(try f.sync() == 6)
    f.close()
    let state = try StateFile.open(path: path).load()
    #expect(state.lastTransaction == 6)
    #expect(state.keypaths == [big] + synced.keypaths)
  }

  /// The same with a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) in a
  /// child process, which needs no privilege.
  @Test func fileSizeLimit() throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let child = Child([toolPath(), "fsize", path])
    #expect(child.line() == "synced 3")
    let failed = child.line() ?? ""
    // Refused when it is written (a 5 MiB transaction outgrows SQLite's
    // page cache and spills into the WAL before its sync) or at its sync.
    let refusals = ["cannot store transaction 4:", "cannot make transactions 4 durable"]
    #expect(refusals.contains { failed.hasPrefix("failed storage state file \(path): \($0)") }, "\(failed)")
    #expect(failed.contains("File too large"), "\(failed)")
    #expect(child.line() == "synced 4")
    #expect(child.wait() == 0)
    let state = try StateFile.open(path: path).load()
    #expect(state.lastTransaction == 4)
    #expect(state.keypaths.map(\.keypath) == ["big.blob", "small.n1", "small.n2", "small.n3"])
  }
}
