#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

// ordo-bench: the benchmarks of SPEC §9. Prints a table of this project's
// figures next to comparators measured in the same run, as ratios; writes
// them as JSON with --json PATH. See docs/performance.md.

let usage = """
  usage: ordo-bench [--quick] [--json PATH] [--only SCENARIO[,SCENARIO…]] [--c-bench PROGRAM]
                    [--ordod PROGRAM --dbus-bench PROGRAM [--host-bench PROGRAM] [--client-bench PROGRAM]]
                    [--profile WORKLOAD]
    --quick     smaller sizes (up to 100 000 contracts) and fewer repetitions
    --json      also write the results as JSON to PATH
    --only      run only these scenarios: memory, scale, delivery, schema, codegen, conditions, coalescing, c-abi,
                c-gobject, dbus, dbus-c-client
    --c-bench   the C program of the c-abi scenario (built by `make bench`); c-gobject
                also runs gobject-bench from the same directory
    --ordod, --dbus-bench   ordod and the C observer program of the dbus scenario
    --host-bench            the C program publishing its own bus (dbus notify_per_s)
    --client-bench          the C client's program of the dbus-c-client scenario (with --ordod)
    --profile   run only Ordo's side of one workload, for a profiler:
                commit:N, commit-handles:N, commit-typed:N, delivery,
                delivery-handles, delivery-typed, register:N; schema-WORKLOAD: the same
                on a bus with a schema (see Profile.swift)
  """

/// Progress on stderr, so stdout carries only the table.
func progress(_ s: String) {
  eprint("ordo-bench: \(s)\n")
}

func parseArguments() -> Settings {
  var s = Settings()
  var args = CommandLine.arguments.dropFirst()
  func value(_ flag: String) -> String {
    guard let v = args.popFirst() else {
      eprint("ordo-bench: \(flag) needs a value\n\(usage)\n")
      exit(64)
    }
    return v
  }
  while let a = args.popFirst() {
    switch a {
    case "--quick": s.quick = true
    case "--json": s.jsonPath = value(a)
    case "--only": s.only = Set(value(a).split(separator: ",").map(String.init))
    case "--c-bench": s.cBench = value(a)
    case "--profile": s.profile = value(a)
    case "--ordod": s.ordod = value(a)
    case "--dbus-bench": s.dbusBench = value(a)
    case "--host-bench": s.hostBench = value(a)
    case "--client-bench": s.clientBench = value(a)
    case "-h", "--help":
      print(usage)
      exit(0)
    default:
      eprint("ordo-bench: unknown argument \(a)\n\(usage)\n")
      exit(64)
    }
  }
  if s.quick {
    s.reps = 3
    s.batchNS = 10_000_000
  } else {
    s.reps = 15
    s.batchNS = 20_000_000
  }
  return s
}

func main() throws {
  // A helper program that dies must not kill the run through a write to its pipe.
  signal(SIGPIPE, SIG_IGN)
  let settings = parseArguments()
  if let workload = settings.profile {
    try runProfile(workload)
    return
  }
  let machine = machineDescription()
  let started = nowNS()
  var results: [BenchResult] = []
  // Memory first: it measures the resident set, best done on a fresh heap.
  if settings.wants("memory") { results += try runMemory(settings) }
  if settings.wants("scale") { results += try runScale(settings) }
  if settings.wants("delivery") { results += try runDelivery(settings) }
  if settings.wants("schema") { results += try runSchema(settings) }
  if settings.wants("codegen") { results += try runCodegen(settings) }
  if settings.wants("conditions") { results += try runConditions(settings) }
  if settings.wants("coalescing") { results += try runCoalescing(settings) }
  if settings.wants("c-abi") { results += try runCABI(settings) }
  if settings.wants("c-gobject") { results += try runCGObject(settings) }
  if settings.wants("dbus") { results += try runDBus(settings) }
  if settings.wants("dbus-c-client") { results += try runDBusClient(settings) }
  let seconds = Double(nowNS() - started) / 1e9

  print("ordo-bench\(settings.quick ? " --quick" : ""): \(machine)")
  print("ratios: competitor ÷ ordo (how many times better ordo is) for competitors (notificationcenter*, observation,")
  print("scan-all); ordo ÷ baseline for baselines (ordo-10-contracts, *indirect-calls, swift, plain-array, raw-libdbus-*,")
  print("get-method-roundtrip): the cost multiple, or for notify_per_s the share of the raw rate.")
  print("Figures: medians of \(settings.reps) rounds; ratios of times: medians of the per-round ratios.")
  print("")
  print(table(results), terminator: "")
  print(String(format: "\nfinished in %.1f s", seconds))
  if let path = settings.jsonPath {
    let text = json(machine: machine, results)
    guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else {
      eprint("ordo-bench: cannot write \(path)\n")
      stopChildren()
      exit(1)
    }
    progress("wrote \(path)")
  }
}

do {
  try main()
} catch {
  eprint("ordo-bench: \(error)\n")
  stopChildren()
  exit(1)
}
