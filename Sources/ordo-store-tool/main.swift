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
//   ordo-store-tool open PATH                opens and closes PATH; prints
//       "opened" or "error KIND MESSAGE" (exit status 1)
//   ordo-store-tool bench DIR [N]            group commit: N transactions
//       with one sync each vs one sync per group, in both sync settings;
//       prints one JSON object
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
    keypath: "big.blob", value: .bytes((0..<262_144).map { UInt8(truncatingIfNeeded: $0) }), counter: 1, changedAt: t + 1)
  do {
    try f.append(transaction: t + 1, changes: [big])
    try f.sync()
    fail("a 256 KiB transaction was stored under a file-size limit of \(limit.rlim_cur) bytes")
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

func now() -> Double {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
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
  for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
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

let args = CommandLine.arguments
guard args.count >= 3 else {
  fail("usage: ordo-store-tool crash PATH full|normal | fsize PATH | hold PATH | open PATH | bench DIR [N]")
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
case "bench":
  let n = args.count > 3 ? Int(args[3]) ?? 0 : 2000
  if n < 1 { fail("N must be a positive number") }
  bench(args[2], n)
default: fail("unknown command \(args[1])")
}
