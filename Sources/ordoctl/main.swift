// ordoctl: the command-line client of a bus published over D-Bus (SPEC §8).
// See docs/dbus.md.
import Ordo
import OrdoDBus

#if canImport(Glibc)
import Glibc
#endif

let usage = """
  usage: ordoctl [--address ADDR | --system | --direct ADDR] [--name NAME] [--timeout MS] COMMAND [ARGS…]

  commands:
    get KEY…                       print values (one KEY: the value alone); a schema's
                                   default is marked "(default)"
    set KEY=VALUE… [--expect KEY=COUNTER]…
                                   set values in one transaction; prints its id (with a
                                   schema, a bare VALUE is read as the declared type);
                                   with --expect, only if KEY's counter is still COUNTER
                                   (else status 1, Conflict, nothing applied)
    set --merge [--max-batch N]    read KEY=VALUE, touch KEY, rm KEY lines from stdin and
                                   write them as they come, merged: lines read while a
                                   Commit is in flight join the next one (at most N
                                   entries, default 4096); prints writes=N commits=M txn=LAST
    touch KEY…                     mark keypaths changed in one transaction
    rm KEY…                        remove values in one transaction (KEY.** removes the tree)
    watch PATTERN… [--priority N] [--json] [--initial] [--count N] [--contract NAME]
          [--resume FILE [--reconnect-timeout S]]
                                   register an observer and print one line per Notify;
                                   with --resume, catch up from the position saved in
                                   FILE (and after ordod restarts or a dropped Notify)
    changes SINCE [PATTERN…] [--json]
                                   what changed after transaction SINCE (default **)
    snapshot [PATTERN…] [--json]   values and counters (default pattern **)
    contracts                      the registered contracts, in pass order (with the
                                   reads and writes they never used so far)
    graph [--styled]               the contract dependency graph (Graphviz DOT; --styled:
                                   with ordoctl's columns and colours)
    graph --svg FILE | --png FILE  render it with Graphviz's dot: phases and levels left
                                   to right, priority contracts, writers and observers apart
    trace [PATTERN…] [--json] [--count N]
                                   print every pass touching PATTERN (default **): its
                                   contracts in order, each with its outcome, because,
                                   writes, refusals and time
    why CONTRACT                   why a contract (name, path or id) ran in the last
                                   transaction that called it, or why it did not run in
                                   the last transaction
    lint [--json]                  the pairs where a later contract's write pattern may
                                   write what an earlier contract reads (found only at
                                   run time otherwise); status 1 when there is any
    stats                          the service's counters
    owners [PATTERN…]              the owned values (default pattern **) and their owners
    schema [PATTERN…]              the service's schema as a tree: types, defaults,
                                   constraints, descriptions (docs/schema.md)
    schema --check FILE            validate a schema file (no bus needed)
    codegen --swift|--c|--python [--output DIR] [--name NAME] FILE
                                   typed accessors generated from a schema file (no bus
                                   needed; docs/schema.md, "Generated accessors")

  values: TYPE:TEXT with TYPE b|bool, x|int64|int, d|double, s|string, ay|bytes (hex),
  e.g. n=int64:5 title=s:Songs ratio=d:0.5 on=b:true raw=ay:00ff; without a known
  prefix true/false are bools, integers int64, numbers with . or e doubles, the
  rest strings.

  The service: --direct ADDR connects to it peer to peer (ordod --listen ADDR, no bus
  daemon); --address, --system name a bus daemon; with none of them, ORDO_ADDRESS (a
  direct address) if set, else DBUS_SESSION_BUS_ADDRESS. On a bus, --name (default
  dev.ordo.Bus) names the service.
  After a lone --, no argument is an option (a keypath may start with -).

  """

func out(_ s: String) {
  var line = s
  line += "\n"
  line.withUTF8 { buf in
    var off = 0
    while off < buf.count {
      let n = write(1, buf.baseAddress! + off, buf.count - off)
      if n <= 0 { return }
      off += n
    }
  }
}

func fail(_ message: String, code: Int32 = 1) -> Never {
  var line = "ordoctl: " + message + "\n"
  line.withUTF8 { _ = write(2, $0.baseAddress!, $0.count) }
  exit(code)
}

// Swift repairs invalid UTF-8 in CommandLine.arguments (U+FFFD): refuse it
// instead, so that no value or keypath is silently changed.
for i in 1..<Int(CommandLine.argc) {
  guard let p = CommandLine.unsafeArgv[i], String(validatingCString: p) != nil else {
    fail("argument \(i) is not valid UTF-8 (keypaths and string values are UTF-8; raw bytes go in as ay:HEX)", code: 2)
  }
}

/// A command's arguments, split: an argument that starts with `--` is an
/// option (one in `valued` takes the next argument as its value, the last
/// one given wins) until a lone `--`, after which every argument is an
/// operand (a keypath may start with `-`). An unknown option is a usage
/// error.
func parseArguments(_ args: [String], command: String, flags: Set<String> = [], valued: Set<String> = [])
  -> (options: [String: String], operands: [String])
{
  var options: [String: String] = [:]
  var operands: [String] = []
  var rest = args[...]
  while let a = rest.popFirst() {
    if !a.hasPrefix("--") {
      operands.append(a)
    } else if a == "--" {
      operands.append(contentsOf: rest)
      break
    } else if flags.contains(a) {
      options[a] = ""
    } else if valued.contains(a) {
      guard let v = rest.popFirst() else { fail("\(command) \(a) needs a value", code: 2) }
      options[a] = v
    } else {
      fail("unknown \(command) option \(a) (an operand that starts with -- goes after a lone --)", code: 2)
    }
  }
  return (options, operands)
}

/// The value of a counting option (`--count`): a positive number, 0 when
/// it is not given; anything else is a usage error.
func positiveCount(_ options: [String: String], _ option: String) -> Int {
  guard let v = options[option] else { return 0 }
  guard let n = Int(v), n > 0 else { fail("\(option) needs a positive number", code: 2) }
  return n
}

/// A client of the service: directly at `address` (`--direct`), or on the
/// bus daemon at `address` (nil: `ORDO_ADDRESS`, else the session bus).
func connect(address: String?, direct: Bool, service: String, timeoutMs: Int32) throws(OrdoRemoteError) -> OrdoClient {
  if direct, let address { return try OrdoClient(direct: address, name: service, timeoutMs: timeoutMs) }
  return try OrdoClient(address: address, name: service, timeoutMs: timeoutMs)
}

var args = Array(CommandLine.arguments.dropFirst())
var address: String?
var direct = false
var service = ordoDefaultName
var timeoutMs: Int32 = 10_000

// Global options come before the command.
while let a = args.first, a.hasPrefix("-") {
  args.removeFirst()
  switch a {
  case "--address", "--direct":
    guard let v = args.first, !v.isEmpty else { fail("\(a) needs a value", code: 2) }
    args.removeFirst()
    address = v
    direct = a == "--direct"
  case "--system":
    // The system bus: its address from the environment or the standard socket.
    address = getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) } ?? "unix:path=/var/run/dbus/system_bus_socket"
    direct = false
  case "--name":
    guard !args.isEmpty else { fail("--name needs a value", code: 2) }
    service = args.removeFirst()
    if let problem = busNameProblem(service) { fail("--name: \(problem)", code: 2) }
  case "--timeout":
    guard let v = args.first.flatMap({ Int32($0) }), v > 0 else { fail("--timeout needs a positive number of milliseconds", code: 2) }
    args.removeFirst()
    timeoutMs = v
  case "-h", "--help":
    out(usage)
    exit(0)
  default:
    fail("unknown option \(a)\n\(usage)", code: 2)
  }
}
guard !args.isEmpty else { fail("no command\n\(usage)", code: 2) }
let command = args.removeFirst()

// A command's arguments are checked before connecting: what a command does
// with the connection is `action`, run once the command line is known good,
// so that a usage error (exit status 2) never waits for a bus.
let action: (OrdoClient) -> Void

func run(_ body: () throws(OrdoRemoteError) -> Void) {
  do { try body() } catch { fail(error.description) }
}

switch command {
case "get":
  let keys = parseArguments(args, command: "get").operands
  guard !keys.isEmpty else { fail("get needs at least one keypath", code: 2) }
  action = { client in
    run { () throws(OrdoRemoteError) in
      // A keypath whose value is its schema default is absent from a
      // Snapshot, which holds stored values only.
      let stored = try client.schema == nil ? nil : try client.snapshot(keys).values.map(\.0)
      for k in keys {
        let (v, _) = try client.get(k)
        let mark = stored.map { $0.contains(k) ? "" : " (default)" } ?? ""
        out((keys.count == 1 ? ValueText.format(v) : "\(k)=\(ValueText.format(v))") + mark)
      }
    }
  }

case "set" where args.first == "--merge":
  var maxBatch = 4096
  if args.count == 3, args[1] == "--max-batch" {
    guard let n = Int(args[2]), n > 0 else { fail("--max-batch needs a positive number of entries", code: 2) }
    maxBatch = n
  } else if args.count != 1 {
    fail("set --merge [--max-batch N] reads its writes from stdin: no other arguments", code: 2)
  }
  action = { [maxBatch] client in mergedSet(client, maxBatch: maxBatch) }

case "set":
  // --expect KEY=COUNTER, repeatable: the commit's conditions (SPEC §15).
  var expect: [(String, UInt64)] = []
  var setArgs: [String] = []
  var rest = args[...]
  while let a = rest.popFirst() {
    guard a == "--expect" else {
      setArgs.append(a)
      if a == "--" { setArgs.append(contentsOf: rest); break }
      continue
    }
    guard let v = rest.popFirst() else { fail("set --expect needs KEY=COUNTER", code: 2) }
    guard let eq = v.firstIndex(of: "="), let n = UInt64(v[v.index(after: eq)...]) else {
      fail("set --expect \"\(v)\" is not KEY=COUNTER (a counter is an integer >= 0)", code: 2)
    }
    expect.append((String(v[..<eq]), n))
  }
  let assignments = parseArguments(setArgs, command: "set").operands
  guard !assignments.isEmpty else { fail("set needs KEY=VALUE arguments", code: 2) }
  var texts: [(key: String, text: String)] = []
  for a in assignments {
    guard let eq = a.firstIndex(of: "=") else { fail("\"\(a)\" is not KEY=VALUE", code: 2) }
    let text = String(a[a.index(after: eq)...])
    // A value with a type prefix is checked before connecting.
    if ValueText.hasTypePrefix(text) {
      do { _ = try ValueText.parse(text) } catch { fail("\(a): \(error.message)", code: 2) }
    }
    texts.append((String(a[..<eq]), text))
  }
  action = { [texts, expect] client in
    run { () throws(OrdoRemoteError) in
      // With a schema, a bare value is read as its keypath's declared type.
      let schema = texts.allSatisfy { ValueText.hasTypePrefix($0.text) } ? nil : try client.schema
      var sets: [(String, Value)] = []
      for (k, text) in texts {
        do throws(OrdoError) {
          sets.append((k, try ValueText.parse(text, declared: schema?.declaration(for: k)?.type)))
        } catch {
          fail("\(k)=\(text): \(error.message)", code: 2)
        }
      }
      out(String(expect.isEmpty ? try client.commit(set: sets) : try client.commit(set: sets, expect: expect)))
    }
  }

case "owners":
  let patterns = parseArguments(args, command: "owners").operands
  action = { client in
    run { () throws(OrdoRemoteError) in
      for (k, owner) in try client.owners(patterns.isEmpty ? ["**"] : patterns) { out("\(k)\t\(owner)") }
    }
  }

case "touch":
  let keys = parseArguments(args, command: "touch").operands
  guard !keys.isEmpty else { fail("touch needs at least one keypath", code: 2) }
  action = { client in run { () throws(OrdoRemoteError) in out(String(try client.commit(touch: keys))) } }

case "rm":
  let keys = parseArguments(args, command: "rm").operands
  guard !keys.isEmpty else { fail("rm needs at least one keypath", code: 2) }
  action = { client in run { () throws(OrdoRemoteError) in out(String(try client.commit(remove: keys))) } }

case "watch":
  let (o, patterns) = parseArguments(
    args, command: "watch", flags: ["--json", "--initial"],
    valued: ["--priority", "--count", "--contract", "--resume", "--reconnect-timeout"])
  let json = o["--json"] != nil
  let initial = o["--initial"] != nil
  var priority: Int32?
  if let v = o["--priority"] {
    guard let p = Int32(v) else { fail("--priority needs an int32", code: 2) }
    priority = p
  }
  let count = positiveCount(o, "--count")
  if o["--contract"]?.isEmpty == true { fail("--contract needs a name", code: 2) }
  if o["--resume"]?.isEmpty == true { fail("--resume needs a file", code: 2) }
  let resumeFile = o["--resume"]
  var reconnectTimeout: Int64 = 30
  if let v = o["--reconnect-timeout"] {
    guard let t = Int64(v), t >= 0, t <= 1_000_000 else {
      fail("--reconnect-timeout needs a number of seconds (0: wait forever)", code: 2)
    }
    reconnectTimeout = t
  }
  guard !patterns.isEmpty else { fail("watch needs at least one pattern (** for everything)", code: 2) }
  if resumeFile != nil && initial {
    fail("--initial and --resume do not go together: --resume starts with a catch-up (changes: or snapshot:)", code: 2)
  }
  action = { [priority, reconnectTimeout] client in
    let contractName = o["--contract"] ?? "ordoctl-watch-\(getpid())-\(client.uniqueName)"
    if let file = resumeFile {
      let o = ResumeOptions(
        address: address, direct: direct, service: service, timeoutMs: timeoutMs, patterns: patterns, file: file, priority: priority,
        json: json, count: count, contractName: contractName, reconnectTimeoutMs: reconnectTimeout * 1000)
      ResumingWatch(o, client: client).run()
    }
    var seen = 0
    installStopHandlers()
    // Without --resume nothing can catch up after the service restarts: say
    // so and stop rather than wait on a contract that is gone.
    client.reconnect = false
    client.onOwnerChange = { owner in
      let what = owner == nil ? "left the bus" : "restarted (now \(owner!))"
      fail("the service \(service) \(what): this watch's contract is gone; watch --resume FILE follows restarts and catches up")
    }
    run { () throws(OrdoRemoteError) in
      try client.register(name: contractName, reads: patterns, priority: priority, notifyInitial: initial) { note in
        seen += 1
        if json {
          let changed = note.changed.map(ValueText.json).joined(separator: ",")
          let values = note.changed.compactMap { k in note.values[k].map { ValueText.json(k) + ":" + ValueText.jsonValue($0) } }
          out("{\"contract\":\(ValueText.json(note.contract)),\"txn\":\(note.transaction),\"changed\":[\(changed)],\"values\":{\(values.joined(separator: ","))}}")
        } else {
          let items = note.changed.map { k in note.values[k].map { "\(k)=\(ValueText.format($0, quoted: true))" } ?? k }
          out((["txn=\(note.transaction)"] + items).joined(separator: " "))
        }
      }
    }
    while !stopRequested() && (count == 0 || seen < count) {
      if !client.process(timeoutMs: 200) { fail("the connection to the bus closed") }
    }
  }

case "snapshot":
  let (o, operands) = parseArguments(args, command: "snapshot", flags: ["--json"])
  let json = o["--json"] != nil
  let patterns = operands.isEmpty ? ["**"] : operands
  action = { client in
    run { () throws(OrdoRemoteError) in
      let s = try client.snapshot(patterns)
      let counters = Dictionary(s.counters, uniquingKeysWith: { a, _ in a })
      if json {
        let values = s.values.map { ValueText.json($0.0) + ":" + ValueText.jsonValue($0.1) }
        let cs = s.counters.map { ValueText.json($0.0) + ":" + String($0.1) }
        out("{\"txn\":\(s.transaction),\"values\":{\(values.joined(separator: ","))},\"counters\":{\(cs.joined(separator: ","))}}")
      } else {
        let valued = Dictionary(s.values, uniquingKeysWith: { a, _ in a })
        for k in Set(valued.keys).union(counters.keys).sorted() {
          let v = valued[k].map { "=" + ValueText.format($0, quoted: true) } ?? ""
          out("\(k)\(v) counter=\(counters[k] ?? 0)")
        }
        out("txn=\(s.transaction)")
      }
    }
  }

case "changes":
  let (o, operands) = parseArguments(args, command: "changes", flags: ["--json"])
  guard let first = operands.first else { fail("changes needs a transaction id: changes SINCE [PATTERN…] [--json]", code: 2) }
  guard let since = UInt64(first) else { fail("changes: \"\(first)\" is not a transaction id (an unsigned integer)", code: 2) }
  let json = o["--json"] != nil
  let patterns = operands.count == 1 ? ["**"] : Array(operands.dropFirst())
  action = { client in
    run { () throws(OrdoRemoteError) in
      let ch = try client.changes(since: since, patterns: patterns)
      let keys = Set(ch.values.keys).union(ch.removed).sorted()
      if json {
        let values = keys.compactMap { k in ch.values[k].map { ValueText.json(k) + ":" + ValueText.jsonValue($0) } }
        let removed = ch.removed.sorted().map(ValueText.json)
        let cs = keys.map { ValueText.json($0) + ":" + String(ch.counters[$0] ?? 0) }
        out("{\"txn\":\(ch.transaction),\"values\":{\(values.joined(separator: ","))},\"removed\":[\(removed.joined(separator: ","))],\"counters\":{\(cs.joined(separator: ","))}}")
      } else {
        for k in keys {
          let what = ch.values[k].map { "=" + ValueText.format($0, quoted: true) } ?? " removed"
          out("\(k)\(what) counter=\(ch.counters[k] ?? 0)")
        }
        out("txn=\(ch.transaction)")
      }
    }
  }

case "contracts":
  _ = parseArguments(args, command: "contracts")
  action = { client in
    run { () throws(OrdoRemoteError) in
      for c in try client.contracts() {
        let f = Dictionary(c, uniquingKeysWith: { a, _ in a })
        let rank = f["priority"].map { "priority=\($0)" } ?? "level=\(f["level"]?.description ?? "0")"
        let owner = f["owner"]?.description ?? ""
        // A writer: its timeout and whether it is suspended (docs/reliability.md).
        let writer = f["timeout-ms"].map { " timeout-ms=\($0) suspended=\(f["suspended"]?.description ?? "false")" } ?? ""
        let cache = f["cache"] != nil ? " cache=true" : ""
        out(
          "\(f["path"]?.description ?? "?") name=\(ValueText.json(f["name"]?.description ?? "")) kind=\(f["kind"]?.description ?? "?") \(rank) owner=\(owner.isEmpty ? "-" : owner) reads=\(f["reads"]?.description ?? "[]") writes=\(f["writes"]?.description ?? "[]") calls=\(f["calls"]?.description ?? "0")\(writer)\(cache) unused-reads=\(f["unused-reads"]?.description ?? "[]") unused-writes=\(f["unused-writes"]?.description ?? "[]")"
        )
      }
    }
  }

case "graph":
  action = Devtools.graphCommand(args)

case "trace":
  action = Devtools.traceCommand(args)

case "why":
  action = Devtools.whyCommand(args)

case "lint":
  action = Devtools.lintCommand(args)

case "stats":
  _ = parseArguments(args, command: "stats")
  action = { client in
    run { () throws(OrdoRemoteError) in
      for (k, v) in try client.stats() { out("\(k)=\(v)") }
    }
  }

case "schema":
  action = SchemaCommand.make(args)

case "codegen":
  action = CodegenCommand.make(args)

default:
  fail("unknown command \"\(command)\"\n\(usage)", code: 2)
}

let client: OrdoClient
do {
  client = try connect(address: address, direct: direct, service: service, timeoutMs: timeoutMs)
} catch {
  fail(error.description)
}
action(client)
client.close()
exit(0)
