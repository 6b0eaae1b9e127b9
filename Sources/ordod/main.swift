// ordod: serves an Ordo bus on D-Bus (SPEC §8). See docs/dbus.md.
import CDBus
import Ordo
import OrdoDBus
import OrdoStore

#if canImport(Glibc)
import Glibc
#endif

let usage = """
  usage: ordod [options]

  Serves an Ordo bus as dev.ordo.Bus1 at /dev/ordo/Bus on D-Bus.
  With DBUS_SESSION_BUS_ADDRESS set it uses the session bus; otherwise it
  starts a private dbus-daemon and stops it on exit (with XDG_RUNTIME_DIR
  set, at the stable address unix:path=$XDG_RUNTIME_DIR/ordo/NAME/bus, taking
  over the daemon a killed ordod left there). Once it serves, it
  prints DBUS_SESSION_BUS_ADDRESS=<address> on standard output, then, with
  --listen, ORDO_ADDRESS=<addresses> (the direct sockets, ';'-separated).

  options:
    --address ADDR               connect to this bus daemon address
    --system                     serve on the system bus (see docs/dbus.md)
    --private                    start a private dbus-daemon even with a session bus
    --listen ADDR                also accept direct (peer-to-peer) connections at
                                 unix:path=FILE, unix:abstract=NAME or systemd:
                                 (the sockets systemd passes); repeatable. The
                                 socket file is 0600 (0666 with --policy), refused
                                 while another process listens there, removed on exit
    --no-bus                     serve only at the --listen addresses, on no bus daemon
    --policy FILE                grant rights per uid/gid from FILE (docs/policy.md);
                                 SIGHUP reloads it
    --schema FILE                enforce the model schema in FILE (docs/schema.md);
                                 SIGHUP reloads it with the policy
    --remove-invalid             with --state and --schema: remove the stored
                                 values the schema does not allow, in one
                                 transaction, instead of refusing to start
    --name NAME                  well-known name to own (default dev.ordo.Bus)
    --state PATH                 keep the model (values, counters, changed-at, the
                                 last transaction id, the epoch) in the state file
                                 PATH and restore it on start (docs/storage.md);
                                 without it the model lives in memory
    --sync full|normal           how --state syncs: full (default) survives kill -9
                                 and power loss; normal survives kill -9 only
    --busy-poll-us N             with --state: after each sync, keep polling for the
                                 next call this many microseconds before sleeping
                                 (default 50, 0 to 1000000; 0 turns it off)
    --log-level LEVEL            error, warning, info (default), debug
    --max-keypaths-per-call N    entries in one Commit/Snapshot/Register (default 4096)
    --max-contracts-per-peer N   contracts one peer may hold (default 256)
    --max-contracts N            contracts on the bus (default 65536)
    --max-value-bytes N          bytes in one string/bytes value (default 1048576)
    --max-message-bytes N        size of a reply or Notify built (default 33554432)
    --max-outgoing-bytes N       outgoing queue before Notify signals drop (default 67108864)
    --writer-timeout-ms N        a writer contract's default timeout-ms (default 2000)
    --max-writer-timeout-ms N    the largest timeout-ms a writer may ask for (default 5000)
    -h, --help                   show this help

  """

func fail(_ message: String, code: Int32 = 2) -> Never {
  writeLine(2, "ordod: \(message)")
  exit(code)
}

var address: String?
var listenAddresses: [String] = []
var noBus = false
var forcePrivate = false
var systemBus = false
var policyFile: String?
var schemaFile: String?
var removeInvalid = false
var name = ordoDefaultName
var level = LogLevel.info
var limits = ServiceLimits()
var statePath: String?
var syncMode: SyncMode?
var busyPollUs: Int?

var args = Array(CommandLine.arguments.dropFirst())
func value(_ option: String, _ args: inout [String]) -> String {
  guard !args.isEmpty else { fail("\(option) needs a value") }
  return args.removeFirst()
}
func number(_ option: String, _ args: inout [String]) -> Int {
  let v = value(option, &args)
  guard let n = Int(v), n > 0 else { fail("\(option) needs a positive number, got \"\(v)\"") }
  return n
}
while !args.isEmpty {
  let a = args.removeFirst()
  switch a {
  case "--address": address = value(a, &args)
  case "--private": forcePrivate = true
  case "--listen": listenAddresses.append(value(a, &args))
  case "--no-bus": noBus = true
  case "--system": systemBus = true
  case "--policy": policyFile = value(a, &args)
  case "--schema": schemaFile = value(a, &args)
  case "--remove-invalid": removeInvalid = true
  case "--name":
    name = value(a, &args)
    if let problem = busNameProblem(name) { fail("--name: \(problem)") }
  case "--state":
    let v = value(a, &args)
    guard !v.isEmpty else { fail("--state needs a path") }
    statePath = v
  case "--sync":
    do { syncMode = try SyncMode(parsing: value(a, &args)) } catch { fail(error.message) }
  case "--busy-poll-us":
    let v = value(a, &args)
    // Checked here, before the state file is opened, against the range
    // setBusyPoll takes.
    let range = DBusService.busyPollRange
    guard let n = Int(v), range.contains(.microseconds(n)) else {
      let most = Int(range.upperBound / .microseconds(1))
      fail("--busy-poll-us needs a number of microseconds from 0 to \(most), got \"\(v)\"")
    }
    busyPollUs = n
  case "--log-level":
    let v = value(a, &args)
    guard let l = LogLevel(name: v) else { fail("unknown log level \"\(v)\": error, warning, info or debug") }
    level = l
  case "--max-keypaths-per-call": limits.maxKeypathsPerCall = number(a, &args)
  case "--max-contracts-per-peer": limits.maxContractsPerPeer = number(a, &args)
  case "--max-contracts": limits.maxContracts = number(a, &args)
  case "--max-value-bytes": limits.maxValueBytes = number(a, &args)
  case "--max-message-bytes": limits.maxMessageBytes = number(a, &args)
  case "--max-outgoing-bytes": limits.maxOutgoingBytes = number(a, &args)
  case "--writer-timeout-ms": limits.defaultWriterTimeoutMs = UInt32(clamping: number(a, &args))
  case "--max-writer-timeout-ms": limits.maxWriterTimeoutMs = UInt32(clamping: number(a, &args))
  case "-h", "--help":
    writeLine(1, usage)
    exit(0)
  default: fail("unknown option \"\(a)\"\n\(usage)")
  }
}

if systemBus && (address != nil || forcePrivate) { fail("--system cannot be combined with --address or --private") }
if noBus && listenAddresses.isEmpty { fail("--no-bus needs --listen ADDRESS") }
for a in listenAddresses {
  do { try DBusService.checkListenAddress(a) } catch { fail(error.message) }
}
if noBus && (systemBus || address != nil || forcePrivate) { fail("--no-bus cannot be combined with --system, --address or --private") }
guard limits.defaultWriterTimeoutMs <= limits.maxWriterTimeoutMs else {
  fail("--writer-timeout-ms \(limits.defaultWriterTimeoutMs) is more than --max-writer-timeout-ms \(limits.maxWriterTimeoutMs)")
}
// A policy that does not parse stops ordod before it serves.
var policy: Policy?
if let policyFile {
  do { policy = try Policy(contentsOf: policyFile) } catch { fail("policy refused: \(error.description)", code: 1) }
  policyPath.withLock { $0 = policyFile }
}

if syncMode != nil && statePath == nil { fail("--sync needs --state PATH") }
if busyPollUs != nil && statePath == nil { fail("--busy-poll-us needs --state PATH") }
if removeInvalid && (statePath == nil || schemaFile == nil) { fail("--remove-invalid needs --state PATH and --schema FILE") }
// A schema that does not validate stops ordod before it serves.
var schema: Schema?
if let schemaFile {
  do { schema = try Schema(contentsOfFile: schemaFile) } catch { fail("schema refused: \(error.message)", code: 1) }
  schemaPath.withLock { $0 = schemaFile }
}

// The state file is opened (and the model restored) before anything
// serves: a file that is locked, corrupt, of a future format or foreign
// stops ordod here, with the store's message naming the file and the
// problem; it never starts empty over it.
let bus = Bus()
var durable: DurableState?
if let statePath {
  do {
    durable = try DurableState.attach(bus: bus, path: statePath, sync: syncMode ?? .full, mode: .grouped)
  } catch {
    fail("refusing to start: \(error.message)", code: 1)
  }
}
// The restored state must obey the schema: ordod never drops data
// silently; --remove-invalid removes the offending values on purpose.
if let schema {
  let invalid = bus.schemaViolations(schema)
  if !invalid.isEmpty {
    guard removeInvalid else {
      durable?.close()
      fail(
        "refusing to start: \(invalid.count) stored value(s) of \(statePath ?? "the state") break the schema \(schemaFile ?? ""); "
          + "start with --remove-invalid to remove them:\n" + invalid.map { "  \($0.problem)" }.joined(separator: "\n"), code: 1)
    }
    do {
      try bus.transaction { () throws(OrdoError) in for v in invalid { try bus.remove(v.keypath) } }
      try durable?.sync()
    } catch {
      durable?.close()
      fail("refusing to start: removing the values the schema does not allow failed: \(error)", code: 1)
    }
    for v in invalid { writeLine(2, "ordod: warning: --remove-invalid: removed \(v.problem)") }
  }
  do { try bus.replaceSchema(schema) } catch { fail("refusing to start: \(error.message)", code: 1) }
}

installSignalThread()
let logLevel = level
let logger: @Sendable (LogLevel, String) -> Void = { l, message in
  writeLine(2, "ordod: \(l): \(message)")
}

var daemon: PrivateDaemon?
// Started by D-Bus activation on a bus other than the system bus: serve
// the bus that started us.
if !noBus && address == nil && !systemBus, let starter = getenv("DBUS_STARTER_ADDRESS").map({ String(cString: $0) }), !starter.isEmpty,
  getenv("DBUS_STARTER_BUS_TYPE").map({ String(cString: $0) }) != "system"
{
  address = starter
}
if !noBus && address == nil && !systemBus {
  let session = getenv("DBUS_SESSION_BUS_ADDRESS").map { String(cString: $0) } ?? ""
  if forcePrivate || session.isEmpty {
    do {
      let d = try PrivateDaemon(quiet: logLevel < .debug, stable: PrivateDaemon.stableDirectory(for: name))
      daemon = d
      address = d.address
      if logLevel >= .info {
        logger(.info, d.reused ? "took over the private dbus-daemon a previous ordod left (pid \(d.pid))" : "started a private dbus-daemon (pid \(d.pid))")
      }
    } catch {
      fail(error.message, code: 1)
    }
  } else {
    address = session
  }
}

let service: DBusService
do {
  service = try DBusService(
    bus: bus, address: address, systemBus: systemBus, name: name, busDaemon: !noBus, limits: limits, policy: policy,
    logLevel: logLevel, logger: logger)
} catch {
  daemon?.stop()
  durable?.close()
  fail(error.message, code: 1)
}
var directAddresses: [String] = []
for a in listenAddresses {
  do { directAddresses.append(try service.listen(a)) } catch {
    service.close()
    daemon?.stop()
    durable?.close()
    fail(error.message, code: 1)
  }
}
if let durable {
  service.setDurability(StoreDurability(durable, logger: logger))
  if let busyPollUs {
    do { try service.setBusyPoll(.microseconds(busyPollUs)) } catch { fail(error.message) }
  }
  if logLevel >= .info {
    logger(
      .info,
      "state file \(durable.path) (sync \(durable.syncMode.rawValue)): \(durable.created ? "created, " : "")epoch \(bus.epoch), last transaction \(bus.transactionID), \(bus.statistics.values) values"
    )
  }
} else if logLevel >= .info {
  logger(.info, "no --state: the model lives in memory (epoch \(bus.epoch))")
}
serviceToStop.withLock { $0 = service }
if stopRequested.load(ordering: .relaxed) { service.stop() }
if let policy, logLevel >= .info { logger(.info, "access policy \(policy.source): \(policy.rules.count) rules") }
if systemBus {
  if logLevel >= .info { logger(.info, "serving on the system bus") }
} else if !noBus {
  writeLine(1, "DBUS_SESSION_BUS_ADDRESS=\(address ?? "")")
}
if !directAddresses.isEmpty { writeLine(1, "ORDO_ADDRESS=\(directAddresses.joined(separator: ";"))") }

var status: Int32 = 0
do {
  try service.run()
} catch {
  logger(.error, error.message)
  status = 1
}
serviceToStop.withLock { $0 = nil }
service.close()
if let durable {
  if let dropped = durable.close() {
    logger(.warning, "state file \(durable.path): transactions \(dropped.lowerBound)…\(dropped.upperBound) were committed but never synced (not acknowledged)")
  }
}
if let daemon {
  daemon.stop()
  if logLevel >= .info { logger(.info, "stopped the private dbus-daemon") }
}
exit(status)
