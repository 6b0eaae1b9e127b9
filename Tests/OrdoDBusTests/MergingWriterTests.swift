import Ordo
import OrdoDBus
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A published bus on a private dbus-daemon, its service on its own thread.
private final class Published {
  let address: String
  let daemon: pid_t
  let bus = Bus()
  let service: DBusService
  var tid = pthread_t()

  init() throws {
    (address, daemon) = try startPrivateDaemon()
    service = try DBusService(bus: bus, address: address, name: "dev.ordo.Test")
    let ctx = Unmanaged.passRetained(ServiceBox(service)).toOpaque()
    pthread_create(&tid, nil, { raw in
      let box = Unmanaged<ServiceBox>.fromOpaque(raw!).takeRetainedValue()
      try? box.service.run()
      return nil
    }, ctx)
  }

  func close() {
    service.stop()
    pthread_join(tid, nil)
    kill(daemon, SIGKILL)
    var st: Int32 = 0
    waitpid(daemon, &st, 0)
  }

  /// A local contract whose pass takes `ms`: a Commit that writes
  /// `slow.go` is answered that much later, so the writes issued meanwhile
  /// are certain to merge.
  func slowPasses(ms: UInt32) throws {
    try bus.register(name: "slow", reads: ["slow.go"]) { _ in usleep(ms * 1000) }
  }
}

private func counter(_ c: OrdoClient, _ k: String) throws -> UInt64 {
  try c.snapshot([k]).counters.first { $0.0 == k }?.1 ?? 0
}

/// A burst: far fewer Commits than writes, every keypath ends with its last
/// value, each write learns the transaction it landed in, and an observer
/// on another connection sees the final values.
@Test func mergingWriterBurst() throws {
  let p = try Published()
  defer { p.close() }
  let observer = try OrdoClient(address: p.address, name: "dev.ordo.Test", timeoutMs: 5000)
  var seen: [String: Value] = [:]
  var notes = 0
  try observer.register(name: "watch", reads: ["burst.*"]) { n in
    notes += 1
    for k in n.changed { seen[k] = n.values[k] }
  }
  let client = try OrdoClient(address: p.address, name: "dev.ordo.Test", timeoutMs: 5000)
  let w = client.mergingWriter()
  var results: [MergedWrite: Result<UInt64, OrdoRemoteError>] = [:]
  w.onResult = { t, r in
    #expect(results[t] == nil, "one result per batch")
    results[t] = r
  }
  var tickets: [MergedWrite] = []
  var expected: [String: Value] = [:]
  for i in 0..<2000 {
    let k = "burst.k\(i % 500)"
    let v = Value.int64(Int64(i))
    tickets.append(try w.set(k, v))
    expected[k] = v
  }
  try w.flush()
  #expect(w.isIdle)
  #expect(w.writesIssued == 2000)
  #expect(w.commitsSent >= 2)
  #expect(w.commitsSent < 200, "\(w.commitsSent) Commits for 2000 writes")
  #expect(results.count == w.commitsSent)
  // Tickets only go forward, and every one committed with a real id.
  #expect(tickets == tickets.sorted())
  var txns: [UInt64] = []
  for t in Set(tickets).sorted() {
    guard case .committed(let txn) = w.state(t) else {
      Issue.record("\(t): \(w.state(t))")
      continue
    }
    #expect(results[t] == .success(txn))
    txns.append(txn)
  }
  #expect(txns == txns.sorted() && Set(txns).count == txns.count && !txns.contains(0))
  let stats = try client.stats()
  #expect(stats.first { $0.0 == "commits" }?.1 == .uint(UInt64(w.commitsSent)))
  let snap = try client.snapshot(["burst.*"])
  #expect(Dictionary(snap.values, uniquingKeysWith: { a, _ in a }) == expected)
  #expect(snap.transaction == txns.last)
  let deadline = time(nil) + 10
  while seen != expected && time(nil) < deadline { observer.process(timeoutMs: 100) }
  #expect(seen == expected)
  #expect(notes == w.commitsSent)
  // Without a poll per write, a group of writes always merges: the first
  // goes alone, the other 999 in one Commit.
  let g = client.mergingWriter()
  g.pollsOnWrite = false
  for i in 0..<1000 { try g.set("burst.k\(i % 500)", .int64(Int64(10_000 + i))) }
  try g.flush()
  #expect(g.commitsSent == 2)
  #expect(try client.get("burst.k499").value == .int64(10_999))
  observer.close()
  client.close()
}

/// The merge rules, with the first Commit held in flight by a slow pass:
/// the result is that of the writes applied one by one, in order.
@Test func mergingWriterRules() throws {
  let p = try Published()
  defer { p.close() }
  try p.slowPasses(ms: 300)
  let client = try OrdoClient(address: p.address, name: "dev.ordo.Test", timeoutMs: 5000)
  #expect(try client.commit(set: [("t.old", .int64(1)), ("gone", .int64(1))]) == 1)
  let w = client.mergingWriter()
  let first = try w.set("slow.go", .bool(true))  // out at once, answered in 300 ms
  #expect(w.commitsSent == 1)
  let a = try w.set("a", .int64(1))
  try w.remove("a")  // a remove after a set replaces it
  try w.set("b", .int64(1))
  try w.set("b", .int64(2))  // last write wins
  try w.remove("gone")
  try w.set("gone", .string("back"))  // a set after a remove replaces it
  try w.touch("c")
  try w.set("c", .int64(3))  // touches merge with anything
  try w.set("t.x", .int64(1))
  let tree = try w.remove("t.**")  // drops t.x, removes t.old
  let after = try w.set("t.y", .int64(2))  // covered by t.** in the batch: a new batch
  let r = try w.write(set: [("r", .int64(1)), ("t.z", .int64(3))], touch: ["r"])
  #expect(w.commitsSent == 1, "nothing more goes out while the first is in flight")
  #expect(first.batch == 0 && a.batch == 1 && tree == a)
  #expect(after.batch == 2 && r == after)
  try w.flush()
  #expect(w.commitsSent == 3)
  #expect(w.state(first) == .committed(2))
  #expect(w.state(a) == .committed(3))
  #expect(w.state(after) == .committed(4))
  let snap = try client.snapshot(["**"])
  let values = Dictionary(snap.values, uniquingKeysWith: { a, _ in a })
  #expect(
    values == [
      "slow.go": .bool(true), "b": .int64(2), "gone": .string("back"), "c": .int64(3), "t.y": .int64(2), "t.z": .int64(3),
      "r": .int64(1),
    ])
  // One transaction per batch: b changed once although written twice.
  #expect(try counter(client, "b") == 1)
  #expect(try counter(client, "c") == 1)
  #expect(try counter(client, "t.old") == 2)
  client.close()
}

/// Malformed writes are refused to their caller alone (nothing accepted);
/// a Commit the service refuses fails its own batch only, and flush()
/// reports it.
@Test func mergingWriterErrors() throws {
  let p = try Published()
  defer { p.close() }
  try p.slowPasses(ms: 300)
  let client = try OrdoClient(address: p.address, name: "dev.ordo.Test", timeoutMs: 5000)
  let w = client.mergingWriter()
  for bad in ["a..b", "", "x.*", "**"] {
    #expect(throws: OrdoRemoteError.self) { try w.set(bad, .int64(1)) }
    #expect(throws: OrdoRemoteError.self) { try w.remove(bad) }
  }
  do {
    try w.write()
    Issue.record("an empty write was accepted")
  } catch {
    #expect(error.code == .invalidArgument)
  }
  do {
    try w.set("a.b.", .int64(1))
    Issue.record("a malformed keypath was accepted")
  } catch {
    #expect(error.code == .invalidKeypath)
  }
  #expect(w.writesIssued == 0 && w.commitsSent == 0 && w.isIdle)

  let first = try w.set("slow.go", .int64(1))
  let ok1 = try w.set("ok.one", .int64(1))
  // 5000 entries in one write: one batch of its own, beyond the service's
  // max-keypaths-per-call (4096): refused with Limit.
  let big = try w.write(set: (0..<5000).map { ("big.k\($0)", Value.int64(Int64($0))) })
  let ok2 = try w.set("ok.two", .int64(2))
  #expect([first.batch, ok1.batch, big.batch, ok2.batch] == [0, 1, 2, 3])
  do {
    try w.flush()
    Issue.record("flush did not report the refused batch")
  } catch {
    #expect(error.code == .limit, "\(error)")
  }
  guard case .failed(let e) = w.state(big) else {
    Issue.record("the big batch: \(w.state(big))")
    return
  }
  #expect(e.code == .limit)
  #expect(w.state(ok1) == .committed(2))
  #expect(w.state(ok2) == .committed(3))
  try w.flush()  // reported once
  #expect(try client.snapshot(["big.**"]).values.isEmpty)
  #expect(try client.get("ok.two").value == .int64(2))
  client.close()
  #expect(throws: OrdoRemoteError.self) { try w.set("after.close", .int64(1)) }
}
