// ordo-store-tool: the child process of the OrdoStore tests, and the
// group-commit benchmark (docs/storage.md).
//
//   ordo-store-tool crash PATH full|normal   append and sync transactions of
//       the deterministic workload (below) forever, in groups of 1–8; after
//       each sync prints "synced ID" (the tests kill it with SIGKILL)
//   ordo-store-tool fsize PATH               a file-size limit (RLIMIT_FSIZE,
//       SIGXFSZ ignored) makes a sync fail; prints "synced ID", "failed
//       MESSAGE", then, with the limit lifted, "synced ID" again
//   ordo-store-tool hold PATH                opens PATH, prints "held", keeps
//       it open until stdin closes
//   ordo-store-tool open PATH                opens and closes PATH (writing
//       what its commit log holds into the database, as every open does);
//       prints "opened" or "error KIND MESSAGE" (exit status 1)
//   ordo-store-tool open-limited PATH BYTES  opens PATH under a file-size
//       limit of BYTES (SIGXFSZ ignored), prints "wal SIZE", stores and
//       syncs one small transaction, prints "synced ID"
//   ordo-store-tool bench DIR [N]            group commit: N transactions
//       with one sync each vs one sync per group, in both sync settings;
//       prints one JSON object
//   ordo-store-tool bus-crash PATH full|normal grouped|each-commit
//       commits the bus workload (below) through a Bus with a DurableState
//       forever, in groups of 1–8 with one sync() each (grouped) or one
//       durable commit each; prints "synced ID" once ID is durable
//   ordo-store-tool bus-bench DIR [N]        N transactions of one keypath
//       committed through a Bus with a DurableState: each-commit mode, and
//       grouped mode with one sync() per 1, 8, 64 or N commits, in both
//       sync settings, and an in-memory bus; prints one JSON object
//   ordo-store-tool bus-fsize PATH           a file-size limit makes a
//       durable commit throw STORAGE and then a grouped sync() fail; prints
//       what happened at each step (see Tests/OrdoStoreTests/BusTests.swift)
import Ordo
import OrdoStore

#if canImport(Glibc)
import Glibc
#endif

func say(_ line: String) {
  let text = line + "\n"
  _ = text.withCString { write(1, $0, strlen($0)) }
}

func fail(_ message: String) -> Never {
  let text = "ordo-store-tool: \(message)\n"
  _ = text.withCString { write(2, $0, strlen($0)) }
  exit(2)
}

/// The changes transaction `t` of the crash workload writes (the tests
/// replay the same rule: Tests/OrdoStoreTests/Workload.swift): a keypath
/// counts as changed each time it is listed.
func workload(_ t: UInt64) -> [(String, Value?)] {
  if t % 17 == 0 { return [] }  // a pass that cancelled every change keeps its id
  var out: [(String, Value?)] = [("k.n\(t % 37)", .int64(Int64(t))), ("s.n\(t % 11)", .string("v\(t) ü"))]
  if t % 5 == 0 { out.append(("k.n\((t + 1) % 37)", nil)) }
  if t % 7 == 0 { out.append(("d.n\(t % 3)", .double(Double(t) / 3))) }
  if t % 13 == 0 { out.append(("b.blob", .bytes((0..<(t % 50)).map { UInt8(truncatingIfNeeded: $0 &* t) }))) }
  if t % 19 == 0 { out.append(("f.flag", .bool(t % 2 == 0))) }
  return out
}

/// Applies the workload's transaction `t` to `counters`, returning the
/// changes to store.
func changes(_ t: UInt64, _ counters: inout [String: UInt64]) -> [StoredKeypath] {
  workload(t).map { k, v in
    let n = (counters[k] ?? 0) + 1
    counters[k] = n
    return StoredKeypath(keypath: k, value: v, counter: n, changedAt: t)
  }
}

func open(_ path: String, _ sync: SyncMode = .full) -> (StateFile, StoredState) {
  do {
    let f = try StateFile.open(path: path, sync: sync)
    return (f, try f.load())
  } catch {
    fail(error.message)
  }
}

func crash(_ path: String, _ sync: SyncMode) -> Never {
  let (f, state) = open(path, sync)
  var counters: [String: UInt64] = [:]
  for k in state.keypaths { counters[k.keypath] = k.counter }
  var t = state.lastTransaction
  var g = SystemRandomNumberGenerator()
  while true {
    let group = Int.random(in: 1...8, using: &g)
    do {
      for _ in 0..<group {
        t += 1
        try f.append(transaction: t, changes: changes(t, &counters))
      }
      try f.sync()
    } catch {
      fail(error.message)
    }
    say("synced \(t)")
  }
}

func fileSize(_ path: String) -> Int {
  var st = stat()
  return stat(path, &st) == 0 ? Int(st.st_size) : 0
}

func fsize(_ path: String) {
  signal(SIGXFSZ, SIG_IGN)
  let (f, state) = open(path)
  var t = state.lastTransaction
  do {
    for _ in 0..<3 {
      t += 1
      try f.append(transaction: t, changes: [StoredKeypath(keypath: "small.n\(t)", value: .int64(Int64(t)), counter: 1, changedAt: t)])
      try f.sync()
    }
  } catch {
    fail(error.message)
  }
  say("synced \(t)")
  var limit = rlimit()
  getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit)
  let saved = limit
  limit.rlim_cur = rlim_t(max(fileSize(path), fileSize(path + "-wal")) + 16384)
  if setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) != 0 { fail("setrlimit: \(String(cString: strerror(errno)))") }
  let big = StoredKeypath(
    keypath: "big.blob", value: .bytes((0..<bigSize).map { UInt8(truncatingIfNeeded: $0) }), counter: 1, changedAt: t + 1)
  do {
    try f.append(transaction: t + 1, changes: [big])
    try f.sync()
    fail("a 5 MiB transaction was stored under a file-size limit of \(limit.rlim_cur) bytes")
  } catch {
    say("failed \(error.kind.rawValue) \(error.message)")
  }
  var after = saved
  if setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &after) != 0 { fail("setrlimit: \(String(cString: strerror(errno)))") }
  do {
    try f.append(transaction: t + 1, changes: [big])
    try f.sync()
  } catch {
    fail("after lifting the limit: \(error.message)")
  }
  say("synced \(t + 1)")
  f.close()
}

func hold(_ path: String) {
  let (f, _) = open(path)
  say("held")
  var b: UInt8 = 0
  while read(0, &b, 1) > 0 {}
  f.close()
}

func tryOpen(_ path: String) -> Int32 {
  do {
    let f = try StateFile.open(path: path)
    f.close()
    say("opened")
    return 0
  } catch {
    say("error \(error.kind.rawValue) \(error.message)")
    return 1
  }
}

/// Opens `path` under a file-size limit set first, so that the WAL's
/// preallocation at open fails (see `StateFile`): the open must still
/// succeed, with the WAL cut back, and a small transaction be stored.
func openLimited(_ path: String, _ bytes: Int) {
  signal(SIGXFSZ, SIG_IGN)
  var limit = rlimit()
  getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit)
  limit.rlim_cur = rlim_t(bytes)
  if setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) != 0 { fail("setrlimit: \(String(cString: strerror(errno)))") }
  do {
    let f = try StateFile.open(path: path)
    say("wal \(fileSize(path + "-wal"))")
    let t = try f.load().lastTransaction + 1
    try f.append(transaction: t, changes: [StoredKeypath(keypath: "small.n\(t)", value: .int64(Int64(t)), counter: 1, changedAt: t)])
    say("synced \(try f.sync())")
    f.close()
  } catch {
    fail(error.message)
  }
}

func now() -> Double {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Removes a state file and the files SQLite and the commit log keep
/// beside it.
func removeStateFiles(_ path: String) {
  for suffix in ["", "-wal", "-shm", "-log"] { unlink(path + suffix) }
}

/// N transactions of one keypath each, synced every `group` transactions;
/// returns transactions per second.
func rate(_ dir: String, _ sync: SyncMode, _ n: Int, _ group: Int) -> Double {
  let path = "\(dir)/bench-\(sync.rawValue)-\(group).ordo"
  unlink(path)
  let (f, _) = open(path, sync)
  var counters: [String: UInt64] = [:]
  let t0 = now()
  do {
    for t in 1...UInt64(n) {
      let k = "bench.k\(t % 1000)"
      let c = (counters[k] ?? 0) + 1
      counters[k] = c
      try f.append(transaction: t, changes: [StoredKeypath(keypath: k, value: .int64(Int64(t)), counter: c, changedAt: t)])
      if t % UInt64(group) == 0 || t == UInt64(n) { try f.sync() }
    }
  } catch {
    fail(error.message)
  }
  let r = Double(n) / (now() - t0)
  f.close()
  removeStateFiles(path)
  return r
}

func bench(_ dir: String, _ n: Int) {
  var fields: [String] = ["\"transactions\": \(n)"]
  for sync in SyncMode.allCases {
    for group in [1, 8, 64, n] {
      let name = group == n ? "all" : "\(group)"
      let r = rate(dir, sync, n, group)
      fields.append("\"\(sync.rawValue)_group_\(name)_txn_per_s\": \(Int(r.rounded()))")
    }
  }
  say("{" + fields.joined(separator: ", ") + "}")
}

// MARK: - Through a bus

/// Transaction `t` of the bus workload (replayed independently by
/// Tests/OrdoStoreTests/BusWorkload.swift). Every transaction changes `seq`,
/// so its id is `t`. The contract `count` (reads `k.*`, writes `sum.count`)
/// keeps the number of `k.*` keypaths holding a value.
func busWorkload(_ bus: Bus, _ t: UInt64) throws {
  try bus.transaction {
    try bus.set("seq", .int64(Int64(t)))
    try bus.set("k.n\(t % 37)", .int64(Int64(t)))
    try bus.set("s.n\(t % 11)", .string("v\(t) ü"))
    if t % 5 == 0 { try bus.remove("k.n\((t + 1) % 37)") }
    if t % 7 == 0 { try bus.touch("t.tick") }
    if t % 13 == 0 { try bus.set("b.blob", .bytes((0..<(t % 50)).map { UInt8(truncatingIfNeeded: $0 &* t) })) }
    if t % 29 == 0 { try bus.removeTree("s") }
  }
}

/// Registers the workload's contract.
func registerCount(_ bus: Bus) throws {
  try bus.register(name: "count", reads: ["k.*"], writes: ["sum.count"]) { _ in
    var n: Int64 = 0
    for i in 0..<37 where try bus.value("k.n\(i)") != nil { n += 1 }
    try bus.set("sum.count", .int64(n))
  }
}

func attachOrFail(_ bus: Bus, _ path: String, _ sync: SyncMode, _ mode: DurableState.Mode) -> DurableState {
  do {
    return try DurableState.attach(bus: bus, path: path, sync: sync, mode: mode)
  } catch {
    fail(error.message)
  }
}

func busCrash(_ path: String, _ sync: SyncMode, _ mode: DurableState.Mode) -> Never {
  let bus = Bus()
  let durable = attachOrFail(bus, path, sync, mode)
  var g = SystemRandomNumberGenerator()
  do {
    try registerCount(bus)
    var t = bus.transactionID
    while true {
      let group = mode == .grouped ? Int.random(in: 1...8, using: &g) : 1
      for _ in 0..<group {
        t += 1
        try busWorkload(bus, t)
        if bus.transactionID != t { fail("transaction \(t) got id \(bus.transactionID)") }
      }
      let synced = try durable.sync()
      if synced != t { fail("synced \(synced), committed \(t)") }
      say("synced \(t)")
    }
  } catch {
    fail("\(error)")
  }
}

/// The state a bus shows: one line per keypath (value, counter,
/// changed-at), and the last id.
func describe(_ bus: Bus) -> String {
  do {
    let c = try bus.changes(since: 0, ["**"])
    let keys = c.counters.keys.sorted()
    let lines = try keys.map { k in "\(k)=\(c.values[k].map { "\($0)" } ?? "-")/\(c.counters[k]!)/\(try bus.changedAt(k))" }
    return "txn \(bus.transactionID) " + lines.joined(separator: " ")
  } catch {
    fail("\(error)")
  }
}

func setFileSizeLimit(_ path: String) -> rlimit {
  var limit = rlimit()
  getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit)
  let saved = limit
  limit.rlim_cur = rlim_t(max(fileSize(path), fileSize(path + "-wal")) + 16384)
  if setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) != 0 { fail("setrlimit: \(String(cString: strerror(errno)))") }
  return saved
}

func restoreFileSizeLimit(_ saved: rlimit) {
  var limit = saved
  if setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) != 0 { fail("setrlimit: \(String(cString: strerror(errno)))") }
}

/// Larger than the room a state file's WAL is given when it opens (4 MiB,
/// written in place; docs/storage.md), so that storing it needs new space.
let bigSize = 5 << 20

/// Prints, in order: "committed 3"; "refused CODE MESSAGE" and "unchanged"
/// (a durable commit over the limit threw and memory is as before);
/// "committed 4" (the limit lifted); "synced 6" (grouped mode); "lost
/// FIRST LAST MESSAGE" and "restored" (a grouped sync over the limit
/// failed and memory is back at 6); "synced 7"; "state DESCRIPTION".
func busFsize(_ path: String) {
  signal(SIGXFSZ, SIG_IGN)
  let bigValue = Value.bytes((0..<bigSize).map { UInt8(truncatingIfNeeded: $0 &* 7) })
  let bus = Bus()
  do {
    try registerCount(bus)
    // Each commit durable.
    var durable = attachOrFail(bus, path, .full, .eachCommit)
    for t in UInt64(1)...3 { try busWorkload(bus, t) }
    say("committed \(bus.transactionID)")
    let before = describe(bus)
    let saved = setFileSizeLimit(path)
    do {
      try bus.transaction { try bus.set("big.blob", bigValue) }
      fail("a 5 MiB transaction was stored under a file-size limit")
    } catch let e as OrdoError {
      say("refused \(e.code.name) \(e.message)")
    }
    if describe(bus) != before { fail("memory changed: \(describe(bus)) instead of \(before)") }
    if durable.lastDurableTransaction != 3 { fail("durable \(durable.lastDurableTransaction)") }
    say("unchanged")
    restoreFileSizeLimit(saved)
    try bus.transaction { try bus.set("big.blob", bigValue) }
    say("committed \(bus.transactionID)")

    // Grouped: a failed sync.
    if durable.close() != nil { fail("each-commit mode left transactions unsynced") }
    durable = attachOrFail(bus, path, .full, .grouped)
    for t in UInt64(5)...6 { try busWorkload(bus, t) }
    say("synced \(try durable.sync())")
    let atSix = describe(bus)
    try bus.transaction { try bus.set("big.one", bigValue) }
    try bus.transaction {
      try bus.set("big.two", bigValue)
      try bus.set("seq", .int64(-1))
    }
    if bus.transactionID != 8 { fail("two commits in memory, id \(bus.transactionID)") }
    let limit = setFileSizeLimit(path)
    do {
      try durable.sync()
      fail("a 10 MiB group was synced under a file-size limit")
    } catch {
      let lost = error.lost.map { "\($0.lowerBound) \($0.upperBound)" } ?? "none"
      say("lost \(lost) \(error.error.kind.rawValue) \(error.description)")
    }
    if describe(bus) != atSix { fail("memory is not the durable state: \(describe(bus)) instead of \(atSix)") }
    if durable.lastDurableTransaction != 6 || durable.lastCommittedTransaction != 6 {
      fail("durable \(durable.lastDurableTransaction), committed \(durable.lastCommittedTransaction)")
    }
    say("restored")
    restoreFileSizeLimit(limit)
    try busWorkload(bus, 7)
    say("synced \(try durable.sync())")
    say("state \(describe(bus))")
    durable.close()
  } catch {
    fail("\(error)")
  }
}

/// N transactions of one keypath each through a bus; `group` commits per
/// sync() in grouped mode (nil: each-commit mode; 0: no durable state).
func busRate(_ dir: String, _ sync: SyncMode, _ n: Int, _ mode: DurableState.Mode, _ group: Int) -> Double {
  let path = "\(dir)/bus-bench-\(sync.rawValue)-\(mode.rawValue)-\(group).ordo"
  removeStateFiles(path)
  let bus = Bus()
  let durable = group == 0 ? nil : attachOrFail(bus, path, sync, mode)
  let t0 = now()
  do {
    for t in 1...n {
      try bus.transaction { try bus.set("bench.k\(t % 1000)", .int64(Int64(t))) }
      if let durable, mode == .grouped, t % group == 0 || t == n {
        try durable.sync()
        // As ordod does once the acknowledgements are out.
        try durable.applyLog()
      }
    }
  } catch {
    fail("\(error)")
  }
  let r = Double(n) / (now() - t0)
  durable?.close()
  removeStateFiles(path)
  return r
}

func busBench(_ dir: String, _ n: Int) {
  var fields: [String] = ["\"transactions\": \(n)", "\"memory_txn_per_s\": \(Int(busRate(dir, .full, n, .grouped, 0).rounded()))"]
  for sync in SyncMode.allCases {
    fields.append("\"\(sync.rawValue)_each_commit_txn_per_s\": \(Int(busRate(dir, sync, n, .eachCommit, 1).rounded()))")
    for group in [1, 8, 64, n] {
      let name = group == n ? "all" : "\(group)"
      let r = busRate(dir, sync, n, .grouped, group)
      fields.append("\"\(sync.rawValue)_grouped_sync_every_\(name)_txn_per_s\": \(Int(r.rounded()))")
    }
  }
  say("{" + fields.joined(separator: ", ") + "}")
}

let args = CommandLine.arguments
guard args.count >= 3 else {
  fail(
    "usage: ordo-store-tool crash PATH full|normal | fsize PATH | hold PATH | open PATH | open-limited PATH BYTES | bench DIR [N] | bus-crash PATH full|normal grouped|each-commit | bus-bench DIR [N] | bus-fsize PATH"
  )
}
switch args[1] {
case "crash":
  guard args.count == 4 else { fail("usage: ordo-store-tool crash PATH full|normal") }
  do {
    crash(args[2], try SyncMode(parsing: args[3]))
  } catch {
    fail(error.message)
  }
case "fsize": fsize(args[2])
case "hold": hold(args[2])
case "open": exit(tryOpen(args[2]))
case "open-limited":
  guard args.count == 4, let bytes = Int(args[3]), bytes > 0 else { fail("usage: ordo-store-tool open-limited PATH BYTES") }
  openLimited(args[2], bytes)
case "bus-crash":
  guard args.count == 5, let mode = DurableState.Mode(rawValue: args[4]) else {
    fail("usage: ordo-store-tool bus-crash PATH full|normal grouped|each-commit")
  }
  do {
    busCrash(args[2], try SyncMode(parsing: args[3]), mode)
  } catch {
    fail(error.message)
  }
case "bus-fsize": busFsize(args[2])
case "bus-bench":
  let n = args.count > 3 ? Int(args[3]) ?? 0 : 2000
  if n < 1 { fail("N must be a positive number") }
  busBench(args[2], n)
case "bench":
  let n = args.count > 3 ? Int(args[3]) ?? 0 : 2000
  if n < 1 { fail("N must be a positive number") }
  bench(args[2], n)
default: fail("unknown command \(args[1])")
}
