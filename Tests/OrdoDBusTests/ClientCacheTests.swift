import Dispatch
import Ordo
import OrdoDBus
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A cached contract's ``RemoteNotification/cache`` is its read set as of
/// the notified transaction, under three threads committing at once: each
/// is checked against the state an in-process every-transaction contract
/// records at the end of every pass.
@Test func clientCacheIsTheReadSetAtEachTransaction() throws {
  let served = try ServedBus()
  defer { served.stop() }
  let (bus, client) = (served.bus, served.client)
  let reads = ["m.a.**", "m.x.*.v"]
  let patterns = try reads.map { try Pattern($0) }
  let states = Mutex<[UInt64: [String: Value]]>([:])
  _ = try bus.register(ContractSpec(name: "oracle", reads: []) { [unowned bus] note in
    let s = try bus.snapshot(reads)
    states.withLock { $0[note.transaction] = s.values }
  })
  try bus.transaction { () throws(OrdoError) in try bus.set("m.a.b", .int64(0)) }
  var seen: [RemoteNotification] = []
  try client.register(name: "view", reads: reads, cache: true) { seen.append($0) }
  let keys = ["m", "m.a", "m.a.b", "m.a.c", "m.a.b.d", "m.x", "m.x.1", "m.x.1.v", "m.x.2.v", "m.x.1.w"]
  let committers = DispatchGroup()
  for seed in 0..<3 {
    DispatchQueue.global().async(group: committers) {
      var rng = UInt64(seed + 1) &* 0x9E37_79B9_7F4A_7C15
      func next(_ n: Int) -> Int {
        rng ^= rng << 13
        rng ^= rng >> 7
        rng ^= rng << 17
        return Int(rng % UInt64(n))
      }
      for i in 0..<150 {
        _ = try? bus.transaction { () throws(OrdoError) in
          for _ in 0...next(3) {
            let k = keys[next(keys.count)]
            switch next(5) {
            case 0: try bus.touch(k)
            case 1: try bus.remove(k)
            case 2: try bus.removeTree(k)
            default: try bus.set(k, .int64(Int64(seed * 1000 + i)))
            }
          }
        }
      }
    }
  }
  committers.wait()
  let last = bus.transactionID
  let deadline = time(nil) + 30
  while seen.last?.transaction != last && time(nil) < deadline { client.process(timeoutMs: 50) }
  #expect(seen.first?.changed == [] && seen.first?.transaction == 1)
  #expect(seen.count > 100, "only \(seen.count) notifications")
  let recorded = states.withLock { $0 }
  var checked = 0
  for note in seen {
    let state = try #require(recorded[note.transaction])
    #expect(note.cache == state, "transaction \(note.transaction), changed \(note.changed)")
    #expect(note.cache?.keys.allSatisfy { k in patterns.contains { $0.matches(k) } } == true)
    checked += 1
  }
  #expect(checked == seen.count && seen.last?.transaction == last)
}

/// A read set too large for one `Notify` is read again (one `Snapshot` per
/// pattern) and delivered as a `.snapshot` catch-up; an empty read set is
/// refused.
@Test func clientCacheTooLargeAndRefused() throws {
  var limits = ServiceLimits()
  limits.maxMessageBytes = 2000
  let served = try ServedBus(limits: limits)
  defer { served.stop() }
  let (bus, client) = (served.bus, served.client)
  let big = String(repeating: "x", count: 700)
  try bus.transaction { () throws(OrdoError) in for i in 0..<4 { try bus.set("m.\(i)", .string(big)) } }
  var seen: [RemoteNotification] = []
  try client.register(name: "view", reads: ["m.0", "m.1", "m.2", "m.3"], cache: true) { seen.append($0) }
  func wait(_ n: Int) {
    let deadline = time(nil) + 10
    while seen.count < n && time(nil) < deadline { client.process(timeoutMs: 50) }
  }
  wait(1)
  #expect(seen.first?.kind == .snapshot && seen.first?.cache?.count == 4 && seen.first?.transaction == 1)
  try bus.transaction { () throws(OrdoError) in try bus.set("m.0", .string("small")) }
  wait(2)
  #expect(seen.last.map { [$0.kind.rawValue] + $0.changed } == ["notify", "m.0"])
  #expect(seen.last?.cache?["m.0"] == .string("small") && seen.last?.cache?["m.1"] == .string(big))
  let e = #expect(throws: OrdoRemoteError.self) { try client.register(name: "every", reads: [], cache: true) { _ in } }
  #expect(e?.code == .invalidArgument && e?.message.contains("\"cache\"") == true)
}

/// A cached writer that reads what it writes (a normalizer) finds its own
/// accepted answer in its cache at its next call: the pass notified it
/// before its writes.
@Test func clientCacheTakesAWritersOwnAnswer() throws {
  let served = try ServedBus()
  defer { served.stop() }
  let (bus, client) = (served.bus, served.client)
  var calls: [RemoteNotification] = []
  try client.registerWriter(name: "clamp", reads: ["n", "m", "t.**"], writes: ["n", "t.**"], priority: -3, cache: true) { note in
    calls.append(note)
    guard case .int64(let n)? = note.cache?["n"], n > 10 else { return .none }
    return RemoteWrites(set: ["n": .int64(10)], remove: ["t.**"])
  }
  // Commits from another thread: the pass waits for the writer, which
  // this thread runs.
  func commit(_ k: String, _ v: Value) {
    let done = Atomic<Bool>(false)
    DispatchQueue.global().async {
      _ = try? bus.transaction { () throws(OrdoError) in try bus.set(k, v) }
      done.store(true, ordering: .sequentiallyConsistent)
    }
    let deadline = time(nil) + 10
    while !done.load(ordering: .sequentiallyConsistent) && time(nil) < deadline { client.process(timeoutMs: 20) }
  }
  let deadline = time(nil) + 10
  while calls.isEmpty && time(nil) < deadline { client.process(timeoutMs: 50) }  // the initial call
  commit("t.a", .int64(1))
  commit("n", .int64(50))
  #expect(calls.last?.cache == ["n": .int64(50), "t.a": .int64(1)])
  #expect(try bus.value("n") == .int64(10) && (try bus.value("t.a")) == nil)
  commit("m", .int64(1))
  #expect(calls.last?.cache == ["n": .int64(10), "m": .int64(1)])
  #expect(client.cache(of: calls.last?.contract ?? "")?.values == ["n": .int64(10), "m": .int64(1)])
}
