// ordoctl trace, why and graph --svg/--png: the developer's views of a live
// bus (docs/devtools.md).
import Ordo
import OrdoDBus

#if canImport(Glibc)
import Glibc
#endif

/// The commands that ask the service, with the connection.
struct Devtools {
  let client: OrdoClient
}

// MARK: - Formatting

/// A duration for people: `840ns`, `12.3us`, `4.051ms`, `1.204s`.
func duration(_ ns: UInt64) -> String {
  func fixed(_ v: Double, _ digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let n = Int64((v * scale).rounded())
    let whole = n / Int64(scale)
    var frac = String(n % Int64(scale))
    while frac.count < digits { frac = "0" + frac }
    return "\(whole).\(frac)"
  }
  if ns < 1_000 { return "\(ns)ns" }
  if ns < 1_000_000 { return fixed(Double(ns) / 1e3, 1) + "us" }
  if ns < 1_000_000_000 { return fixed(Double(ns) / 1e6, 3) + "ms" }
  return fixed(Double(ns) / 1e9, 3) + "s"
}

func jsonList(_ a: [String]) -> String { "[" + a.map(ValueText.json).joined(separator: ",") + "]" }

/// One `Contracts()` entry as a dictionary.
typealias ContractFields = [String: RemoteField]

extension Dictionary where Key == String, Value == RemoteField {
  func str(_ k: String) -> String { if case .string(let s)? = self[k] { s } else { "" } }
  func num(_ k: String) -> UInt64 {
    switch self[k] {
    case .uint(let x)?: x
    case .int(let x)?: x < 0 ? 0 : UInt64(x)
    default: 0
    }
  }
  func list(_ k: String) -> [String] { if case .strings(let a)? = self[k] { a } else { [] } }
  func flag(_ k: String) -> Bool { if case .bool(let b)? = self[k] { b } else { false } }
  var priority: Int64? { if case .int(let p)? = self["priority"] { p } else { nil } }
  /// `priority 10`, `data level 2`, `every transaction`.
  var rank: String {
    if let p = priority { return "priority \(p)" }
    return str("kind") == "every-transaction" || (str("kind") != "data" && list("reads").isEmpty) ? "every transaction" : "data level \(num("level"))"
  }
  /// `observer`, `writer`, `every-transaction observer`.
  var role: String {
    let w = list("writes").isEmpty ? "observer" : "writer"
    if priority != nil { return "priority " + w }
    return list("reads").isEmpty ? "every-transaction " + w : w
  }
}

extension Devtools {
func contractFields() -> [ContractFields] {
  var list: [ContractFields] = []
  do {
    for c in try client.contracts() { list.append(Dictionary(c, uniquingKeysWith: { a, _ in a })) }
  } catch { fail(error.description) }
  return list.sorted { $0.num("position") < $1.num("position") }
}
}

// MARK: - trace

extension Devtools {
/// Checks `trace`'s arguments; what it does once connected.
static func traceCommand(_ argv: [String]) -> (OrdoClient) -> Void {
  let (o, operands) = parseArguments(argv, command: "trace", flags: ["--json"], valued: ["--count"])
  let json = o["--json"] != nil
  let count = positiveCount(o, "--count")
  let patterns = operands.isEmpty ? ["**"] : operands
  return { Devtools(client: $0).trace(patterns, json: json, count: count) }
}

func trace(_ patterns: [String], json: Bool, count: Int) {
  var seen = 0
  installStopHandlers()
  run { () throws(OrdoRemoteError) in
    try client.subscribeTrace(patterns) { t in
      seen += 1
      out(json ? traceJSON(t) : traceText(t))
    }
  }
  while !stopRequested() && (count == 0 || seen < count) {
    if !client.process(timeoutMs: 200) { fail("the connection to the bus closed") }
  }
}
}

func traceJSON(_ t: RemoteTrace) -> String {
  let steps = t.steps.map { s in
    "{\"contract\":\(ValueText.json(s.contract)),\"name\":\(ValueText.json(s.name)),\"txn\":\(s.transaction),\"outcome\":\(ValueText.json(s.outcome)),\"initial\":\(s.initial),\"because\":\(jsonList(s.because)),\"writes\":\(jsonList(s.writes)),\"refused\":\(jsonList(s.refused)),\"failure\":\(s.failure.map(ValueText.json) ?? "null"),\"duration_ns\":\(s.durationNS)\(s.truncated ? ",\"truncated\":true" : "")}"
  }
  return "{\"txn\":\(t.transaction),\"committed\":\(t.committed),\"changed\":\(jsonList(t.changed)),\"duration_ns\":\(t.durationNS),\"steps\":[\(steps.joined(separator: ","))]}"
}

/// One block per pass: a header line, one line per step in pass order,
/// indented lines for refusals and failures, and a blank line.
func traceText(_ t: RemoteTrace) -> String {
  var lines = ["txn \(t.transaction) \(t.committed ? "committed" : "not committed") in \(duration(t.durationNS)): changed \(t.changed.isEmpty ? "nothing" : t.changed.joined(separator: " "))"]
  let width = min(24, t.steps.map { $0.name.count }.max() ?? 0)
  for (i, s) in t.steps.enumerated() {
    var name = s.name
    while name.count < width { name += " " }
    var outcome = s.outcome
    while outcome.count < 12 { outcome += " " }
    var line = "  \(i + 1). \(name)  \(outcome) \(s.outcome == "called" || s.outcome == "failed" ? duration(s.durationNS) : "-")"
    if s.initial { line += "  initial call" }
    if !s.because.isEmpty { line += "  because \(s.because.joined(separator: " "))" }
    if !s.writes.isEmpty { line += "  wrote \(s.writes.joined(separator: " "))" }
    if s.truncated { line += "  (keypaths left out: the trace was too large)" }
    lines.append(line)
    for r in s.refused { lines.append("       refused \(r)") }
    if let f = s.failure { lines.append("       failure: \(f)") }
  }
  if t.steps.isEmpty { lines.append("  (no contract scheduled)") }
  return lines.joined(separator: "\n") + "\n"
}

// MARK: - why

/// Whether a write to some keypath matching write pattern `w` may affect a
/// reader of pattern `r` (the core's ordering rule, SPEC §4): the graph's
/// edge from a writer to a later reader.
func mayAffect(write w: String, reader r: String) -> Bool {
  func split(_ p: String) -> (fixed: [Substring], tree: Bool) {
    var s = p.split(separator: ".", omittingEmptySubsequences: false)
    if s.last == "**" {
      s.removeLast()
      return (s, true)
    }
    return (s, false)
  }
  let (a, _) = split(w)
  let (b, bTree) = split(r)
  if !bTree && a.count > b.count { return false }
  for i in 0..<min(a.count, b.count) where a[i] != "*" && b[i] != "*" && a[i] != b[i] { return false }
  return true
}

/// When each of `keys` last changed (its changed-at), found with `Changes`
/// calls: `Changes(since: s, [k])` lists `k` exactly when its changed-at is
/// after `s`, so the keys are split in halves of (lo, hi] until each
/// interval is one transaction.
extension Devtools {
func changedAt(_ keys: [String], last: UInt64) throws(OrdoRemoteError) -> [String: UInt64] {
  var out: [String: UInt64] = [:]
  var work: [(lo: UInt64, hi: UInt64, keys: [String])] = [(0, last, keys)]
  while let (lo, hi, ks) = work.popLast() {
    if ks.isEmpty { continue }
    if hi - lo <= 1 {
      for k in ks { out[k] = hi }
      continue
    }
    let mid = lo + (hi - lo) / 2
    let after = Set(try client.changes(since: mid, patterns: ks).counters.keys)
    work.append((mid, hi, ks.filter { after.contains($0) }))
    work.append((lo, mid, ks.filter { !after.contains($0) }))
  }
  return out
}
}

extension Devtools {
/// Checks `why`'s argument; what it does once connected.
static func whyCommand(_ argv: [String]) -> (OrdoClient) -> Void {
  let operands = parseArguments(argv, command: "why").operands
  guard operands.count == 1 else { fail("why needs one contract: a name, a path or an id (see ordoctl contracts)", code: 2) }
  return { Devtools(client: $0).why(operands[0]) }
}

func why(_ wanted: String) {
  let all = contractFields()
  let match = all.first { $0.str("path") == wanted || $0.str("name") == wanted || $0.str("path") == ordoContractPathPrefix + wanted }
  guard let c = match else {
    fail("no contract named \"\(wanted)\" (nor with that path or id); ordoctl contracts lists them")
  }
  run { () throws(OrdoRemoteError) in
    for line in try why(c, all) { out(line) }
  }
}
}

/// The explanation (docs/devtools.md "ordoctl why").
extension Devtools {
func why(_ c: ContractFields, _ all: [ContractFields]) throws(OrdoRemoteError) -> [String] {
  let last = try client.transaction
  let reads = c.list("reads")
  let writes = c.list("writes")
  let ran = c.num("last-txn")
  let position = c.num("position")
  let owner = c.str("owner")
  var lines: [String] = []
  lines.append("contract \(c.str("path")) \(ValueText.json(c.str("name"))): \(c.role), \(c.rank), position \(position) of \(all.count), owner \(owner.isEmpty ? "the service's host" : owner)")
  lines.append("  reads \(reads.isEmpty ? "nothing (runs after every transaction)" : reads.joined(separator: " "))")
  if !writes.isEmpty { lines.append("  writes \(writes.joined(separator: " "))") }
  var usage = "  calls \(c.num("calls")), failures \(c.num("failures")), last called in transaction \(ran == 0 ? "none" : String(ran))"
  if c["timeout-ms"] != nil { usage += ", timeout \(c.num("timeout-ms")) ms, \(c.flag("suspended") ? "SUSPENDED (its peer did not answer in time: its calls fail at once until the peer calls the service again)" : "not suspended")" }
  lines.append(usage)
  let unusedR = c.list("unused-reads")
  let unusedW = c.list("unused-writes")
  if !unusedR.isEmpty || !unusedW.isEmpty {
    lines.append("  never used so far: reads [\(unusedR.joined(separator: " "))] writes [\(unusedW.joined(separator: " "))]")
  }
  // Ordered after: the phase rule, then each earlier writer whose writes
  // may affect its reads.
  let earlier = all.filter { $0.num("position") < position }
  let upstream = earlier.compactMap { e -> String? in
    let hits = e.list("writes").filter { w in reads.contains { mayAffect(write: w, reader: $0) } }
    return hits.isEmpty ? nil : "\(ValueText.json(e.str("name"))) (#\(e.num("position")), \(e.rank), writes \(hits.joined(separator: " ")))"
  }
  if upstream.isEmpty {
    lines.append("  ordered after: no writer of its reads\(earlier.isEmpty ? " (it is first)" : "; \(earlier.count) earlier contract\(earlier.count == 1 ? "" : "s") by phase and rank")")
  } else {
    lines.append("  ordered after: " + upstream.joined(separator: ", "))
  }
  guard last > 0 else {
    lines.append("did not run: no transaction has committed yet")
    return lines
  }
  // Its reads' keypaths that ever changed, with when (at most 64, the most
  // recent first once known).
  let ever = reads.isEmpty ? [:] : try client.changes(since: 0, patterns: reads).counters
  var keys = ever.keys.sorted()
  let more = max(0, keys.count - 64)
  if more > 0 {
    // Prefer those changed since it last ran.
    let recent = Set(try client.changes(since: ran > 0 ? ran - 1 : 0, patterns: reads).counters.keys)
    keys = (keys.filter { recent.contains($0) } + keys.filter { !recent.contains($0) }).prefix(64).map { $0 }
  }
  let at = try changedAt(keys, last: last)
  func changedIn(_ t: UInt64) -> [String] { keys.filter { at[$0] == t } }

  if ran == last {
    lines.append("ran in the last transaction, \(last):")
    lines.append(contentsOf: because(c, in: last, changedIn(last)))
  } else {
    lines.append("did not run in the last transaction, \(last):")
    let mine = changedIn(last)
    if !reads.isEmpty && mine.isEmpty {
      let lastChanged = try client.changes(since: last - 1, patterns: ["**"]).counters.keys.sorted()
      let shown = lastChanged.prefix(8).joined(separator: " ") + (lastChanged.count > 8 ? " … (\(lastChanged.count) keypaths)" : "")
      lines.append("  none of its reads changed in it (it changed \(lastChanged.isEmpty ? "nothing you may read" : shown))")
    } else if reads.isEmpty {
      lines.append("  it runs after every transaction: it was registered after transaction \(last) or unregistered callbacks skipped it")
    } else {
      lines.append("  its reads changed in it (\(mine.joined(separator: " "))) but it was not called: it was registered after that transaction")
    }
    if ran > 0 {
      lines.append("last ran in transaction \(ran):")
      lines.append(contentsOf: because(c, in: ran, changedIn(ran)))
    } else {
      lines.append("it has never run")
    }
  }
  if !keys.isEmpty {
    lines.append("its reads, last changed:")
    let width = min(40, keys.map(\.count).max() ?? 0)
    for k in keys.sorted(by: { (at[$0] ?? 0, $0) > (at[$1] ?? 0, $1) }) {
      var name = k
      while name.count < width { name += " " }
      lines.append("  \(name)  transaction \(at[k] ?? 0)  counter \(ever[k] ?? 0)")
    }
    if more > 0 { lines.append("  … and \(more) more keypaths") }
  }
  return lines
}
}

func because(_ c: ContractFields, in txn: UInt64, _ changed: [String]) -> [String] {
  var lines: [String] = []
  if c.list("reads").isEmpty {
    lines.append("  because it runs after every transaction")
  } else if changed.isEmpty {
    lines.append("  none of its reads last changed in \(txn): an initial call (notify-initial), or its reads changed again since (see below)")
  } else {
    lines.append("  because \(changed.joined(separator: " ")) changed in transaction \(txn)")
  }
  if c.flag("suspended") { lines.append("  its call failed at once: its peer's writers are suspended") }
  return lines
}

// MARK: - graph

/// The quoted DOT id the core gives a contract or keypath node.
func dotID(_ prefix: String, _ s: String) -> String {
  var e = ""
  for ch in prefix + s {
    if ch == "\\" { e += "\\\\" } else if ch == "\"" { e += "\\\"" } else { e.append(ch) }
  }
  return "\"" + e + "\""
}

/// The core's DOT (`Graph()`) with styles and columns: each phase and level
/// one column, left to right in pass order; priority contracts orange and
/// bold, writers blue, observers white, every-transaction contracts dashed;
/// keypath patterns grey; a legend.
func styledGraph(_ dot: String, _ contracts: [ContractFields]) -> String {
  var body = dot
  while body.hasSuffix("\n") { body.removeLast() }
  guard body.hasSuffix("}") else { return dot }
  body.removeLast()
  var s = body
  s += "  // styles and columns added by ordoctl graph (docs/devtools.md)\n"
  s += "  graph [newrank=true, nodesep=0.3, ranksep=0.6, label=\"pass order: left to right (columns: priority, data levels, every transaction)\", labelloc=b, fontname=\"Helvetica\"];\n"
  var patterns = Set<String>()
  for c in contracts {
    patterns.formUnion(c.list("reads"))
    patterns.formUnion(c.list("writes"))
    let style: String
    if c.priority != nil {
      style = "style=\"filled,bold\", penwidth=2, fillcolor=\"#f6b26b\""
    } else if !c.list("writes").isEmpty {
      style = "style=\"filled\", fillcolor=\"#9fc5e8\""
    } else if c.list("reads").isEmpty {
      style = "style=\"filled,dashed\", fillcolor=\"#ffffff\""
    } else {
      style = "style=\"filled,rounded\", fillcolor=\"#ffffff\""
    }
    s += "  \(dotID("c:", c.str("name"))) [\(style), tooltip=\(ValueText.json(c.role + ", " + c.rank))];\n"
  }
  for p in patterns.sorted() { s += "  \(dotID("k:", p)) [style=filled, fillcolor=\"#eeeeee\", color=\"#999999\"];\n" }
  // Columns: one per priority, per data level, and one for every transaction.
  var columns: [(key: String, names: [String])] = []
  for c in contracts {
    let key = c.priority.map { "p\($0)" } ?? c.rank
    if let i = columns.firstIndex(where: { $0.key == key }) { columns[i].names.append(c.str("name")) } else { columns.append((key, [c.str("name")])) }
  }
  for col in columns {
    s += "  { rank=same; " + col.names.map { dotID("c:", $0) + ";" }.joined(separator: " ") + " }\n"
  }
  for i in columns.indices.dropFirst() {
    s += "  \(dotID("c:", columns[i - 1].names[0])) -> \(dotID("c:", columns[i].names[0])) [style=invis, minlen=2];\n"
  }
  s += """
      subgraph cluster_legend {
        label="legend"; fontname="Helvetica"; color="#bbbbbb";
        "legend:priority" [shape=box, label="priority contract", style="filled,bold", penwidth=2, fillcolor="#f6b26b"];
        "legend:writer" [shape=box, label="writer", style="filled", fillcolor="#9fc5e8"];
        "legend:observer" [shape=box, label="observer", style="filled,rounded", fillcolor="#ffffff"];
        "legend:every" [shape=box, label="every transaction", style="filled,dashed", fillcolor="#ffffff"];
        "legend:keypath" [shape=ellipse, label="pattern", style=filled, fillcolor="#eeeeee", color="#999999"];
        "legend:priority" -> "legend:writer" -> "legend:observer" -> "legend:every" -> "legend:keypath" [style=invis];
      }

    """
  return s + "}\n"
}

/// The directory of `tool` on PATH, or nil.
func onPath(_ tool: String) -> String? {
  let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
  for dir in path.split(separator: ":") where !dir.isEmpty {
    let p = dir + "/" + tool
    if access(p, X_OK) == 0 { return p }
  }
  return nil
}

/// Runs `argv` with `input` on its standard input; returns its exit status.
func runWithInput(_ argv: [String], _ input: String) -> Int32 {
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { fail("cannot make a pipe: \(String(cString: strerror(errno)))") }
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
  posix_spawn_file_actions_addclose(&actions, fds[1])
  posix_spawn_file_actions_addclose(&actions, fds[0])
  var cargs = argv.map { strdup($0) }
  cargs.append(nil)
  defer { for p in cargs { free(p) } }
  var pid: pid_t = 0
  let rc = posix_spawn(&pid, argv[0], &actions, nil, &cargs, environ)
  close(fds[0])
  guard rc == 0 else {
    close(fds[1])
    fail("cannot run \(argv[0]): \(String(cString: strerror(rc)))")
  }
  signal(SIGPIPE, SIG_IGN)
  var text = input
  text.withUTF8 { buf in
    var off = 0
    while off < buf.count {
      let n = write(fds[1], buf.baseAddress! + off, buf.count - off)
      if n <= 0 { break }
      off += n
    }
  }
  close(fds[1])
  var status: Int32 = 0
  while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
  // WIFEXITED / WEXITSTATUS
  return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
}

extension Devtools {
/// Checks `graph`'s arguments; what it does once connected.
static func graphCommand(_ argv: [String]) -> (OrdoClient) -> Void {
  var args = argv
  var format: String?
  var file: String?
  var styled = false
  while !args.isEmpty {
    let a = args.removeFirst()
    switch a {
    case "--svg", "--png":
      guard format == nil else { fail("graph: one of --svg FILE or --png FILE", code: 2) }
      guard let f = args.first, !f.isEmpty, !f.hasPrefix("--") else { fail("graph \(a) needs a file", code: 2) }
      args.removeFirst()
      format = String(a.dropFirst(2))
      file = f
    case "--styled": styled = true
    default: fail("unknown graph argument \(a); graph [--styled | --svg FILE | --png FILE]", code: 2)
    }
  }
  return { [format, file, styled] in Devtools(client: $0).graph(format: format, file: file, styled: styled) }
}

func graph(format: String?, file: String?, styled: Bool) {
  var dot = ""
  run { () throws(OrdoRemoteError) in dot = try client.graph() }
  guard let format, let file else {
    if styled { dot = styledGraph(dot, contractFields()) }
    while dot.hasSuffix("\n") { dot.removeLast() }
    out(dot)
    return
  }
  guard let tool = onPath("dot") else {
    fail("graph --\(format) needs Graphviz's dot, which is not on PATH: install Graphviz (Debian: apt-get install graphviz) or print the DOT with ordoctl graph --styled")
  }
  let status = runWithInput([tool, "-T" + format, "-o", file], styledGraph(dot, contractFields()))
  guard status == 0 else { fail("\(tool) -T\(format) -o \(file) failed (exit status \(status))") }
}
}
