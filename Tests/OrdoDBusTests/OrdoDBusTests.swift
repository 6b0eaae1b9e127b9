import Ordo
import OrdoDBus
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The embedded introspection XML is the shipped docs/dev.ordo.Bus1.xml
/// (regenerate with `make dbus-introspection`).
@Test func introspectionMatchesShippedXML() throws {
  var path = #filePath
  for _ in 0..<3 { path = String(path[..<path.lastIndex(of: "/")!]) }
  path += "/docs/dev.ordo.Bus1.xml"
  let f = try #require(fopen(path, "r"), "cannot open \(path)")
  defer { fclose(f) }
  var bytes: [UInt8] = []
  var buf = [UInt8](repeating: 0, count: 4096)
  while true {
    let n = fread(&buf, 1, buf.count, f)
    if n <= 0 { break }
    bytes += buf[0..<n]
  }
  #expect(String(decoding: bytes, as: UTF8.self) == introspectionXML)
}

@Test func valueTextParsesTypedAndInferredValues() throws {
  #expect(try ValueText.parse("int64:5") == .int64(5))
  #expect(try ValueText.parse("x:-0x10") == .int64(-16))
  #expect(try ValueText.parse("5") == .int64(5))
  #expect(try ValueText.parse("b:yes") == .bool(true))
  #expect(try ValueText.parse("false") == .bool(false))
  #expect(try ValueText.parse("0.25") == .double(0.25))
  #expect(try ValueText.parse("d:-0.0") == .double(-0.0))
  #expect(try ValueText.parse("s:a:b=c") == .string("a:b=c"))
  #expect(try ValueText.parse("hello world") == .string("hello world"))
  #expect(try ValueText.parse("unknown:prefix") == .string("unknown:prefix"))
  #expect(try ValueText.parse("ay:00ff") == .bytes([0, 255]))
  #expect(try ValueText.parse("bytes:") == .bytes([]))
  #expect(try ValueText.parse("1e3") == .double(1000))
  #expect(try ValueText.parse("e5") == .string("e5"))
  for bad in ["int64:abc", "b:maybe", "ay:0", "ay:zz", "d:x", "x:99999999999999999999"] {
    #expect(throws: OrdoError.self) { try ValueText.parse(bad) }
  }
}

@Test func valueTextFormatsAndRoundTrips() throws {
  let values: [Value] = [.bool(true), .int64(Int64.min), .double(1.5), .double(-0.0), .string("a b"), .bytes([1, 2])]
  for v in values {
    #expect(try ValueText.parse(ValueText.format(v)) == v)
  }
  #expect(ValueText.format(.string("a \"b\""), quoted: true) == #"string:"a \"b\"""#)
  #expect(ValueText.jsonValue(.int64(5)) == #"{"type":"int64","value":5}"#)
  #expect(ValueText.jsonValue(.double(.nan)) == #"{"type":"double","value":"nan"}"#)
  #expect(ValueText.jsonValue(.bytes([0xab])) == #"{"type":"bytes","value":"ab"}"#)
  #expect(ValueText.json("\u{1}\n") == #""\u0001\n""#)
}

@Test func remoteErrorCodes() {
  #expect(OrdoRemoteError(name: "dev.ordo.Error.InvalidKeypath", message: "").code == .invalidKeypath)
  #expect(OrdoRemoteError(name: "dev.ordo.Error.AccessDenied", message: "").code == nil)
  #expect(OrdoRemoteError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "").code == nil)
}

/// A name that is not a D-Bus bus name is refused before anything connects
/// (libdbus aborts the process when one reaches `dbus_bus_request_name` or
/// a message's destination), with the rules in the message.
@Test func invalidBusNamesAreRefusedFirst() throws {
  for name in ["", "a", "dev..ordo", ".dev.ordo", "1abc.def", "not a name", String(repeating: "a.", count: 128) + "b"] {
    let e = #expect(throws: OrdoError.self) { _ = try DBusService(bus: Bus(), address: "unix:path=/nonexistent/x", name: name) }
    #expect(e?.code == .invalidArgument)
    #expect(e?.message.contains("is not a D-Bus bus name") == true)
    let r = #expect(throws: OrdoRemoteError.self) { _ = try OrdoClient(address: "unix:path=/nonexistent/x", name: name) }
    #expect(r?.name == DBusErrorName.invalidArgs)
    #expect(busNameProblem(name) != nil)
  }
  for name in ["dev.ordo.Bus", "org.example.Model-2", ":1.42", "a._b"] { #expect(busNameProblem(name) == nil, "\(name)") }
}

/// A service and a client in one process, on a private dbus-daemon.
@Test func serviceAndClientInProcess() throws {
  let daemon = try PrivateDaemon()
  defer { daemon.stop() }
  let address = daemon.address

  let bus = Bus()
  let service = try DBusService(bus: bus, address: address, name: "dev.ordo.Test")
  // The service runs on its own thread; the client blocks on this one.
  let stopService = runService(service)
  defer { stopService() }
  let client = try OrdoClient(address: address, name: "dev.ordo.Test", timeoutMs: 5000)
  var got: [RemoteNotification] = []
  let path = try client.register(name: "c", reads: ["a.*"]) { got.append($0) }
  #expect(path.hasPrefix(ordoContractPathPrefix))
  #expect(try client.commit(set: [("a.x", .int64(3)), ("a.s", .string("t"))]) == 1)
  let deadline = time(nil) + 10
  while got.isEmpty && time(nil) < deadline { client.process(timeoutMs: 100) }
  #expect(got.count == 1)
  #expect(got.first?.values == ["a.x": .int64(3), "a.s": .string("t")])
  let (v, n) = try client.get("a.x")
  #expect(v == .int64(3))
  #expect(n == 1)
  #expect(bus.transactionID == 1)
  do {
    _ = try client.get("missing")
    Issue.record("Get of a missing keypath succeeded")
  } catch {
    #expect(error.code == .notFound)
  }
  // What libdbus would cut short (a NUL) or abort on (a bad object path)
  // is refused before anything is sent.
  func refused(_ what: String, _ call: () throws(OrdoRemoteError) -> Void) {
    do {
      try call()
      Issue.record("\(what) was sent")
    } catch {
      #expect(error.name == DBusErrorName.invalidArgs, "\(what): \(error)")
    }
  }
  refused("a NUL in a value") { () throws(OrdoRemoteError) in _ = try client.commit(set: [("a.x", .string("a\u{0}b"))]) }
  refused("a NUL in a keypath") { () throws(OrdoRemoteError) in _ = try client.get("a.x\u{0}.y") }
  refused("a bad object path") { () throws(OrdoRemoteError) in try client.unregister("not a path") }
  refused("a path with a trailing /") { () throws(OrdoRemoteError) in try client.unregister(ordoContractPathPrefix + "1/") }
  let merging = MergingWriter(client: client)
  let refused = #expect(throws: OrdoRemoteError.self) { try merging.set("a.x", .string("\u{0}")) }
  #expect(refused?.code == .invalidArgument)
  #expect(bus.transactionID == 1)
  #expect(try client.get("a.x").0 == .int64(3))
  client.close()
}

final class ServiceBox: @unchecked Sendable {
  let service: DBusService
  init(_ s: DBusService) { service = s }
}

/// A private dbus-daemon for one test; `stop()` kills it (SIGKILL: it must
/// go even if SIGTERM is blocked or ignored) and reaps it.
/// A private dbus-daemon, a bus served on it as `dev.ordo.Test` (on a
/// thread of its own) and a client of it; ``stop()`` stops the three, the
/// client first.
final class ServedBus {
  let daemon: PrivateDaemon
  let bus = Bus()
  let client: OrdoClient
  private let stopService: () -> Void

  init(limits: ServiceLimits = ServiceLimits()) throws {
    daemon = try PrivateDaemon()
    do {
      let service = try DBusService(bus: bus, address: daemon.address, name: "dev.ordo.Test", limits: limits)
      stopService = runService(service)
      do {
        client = try OrdoClient(address: daemon.address, name: "dev.ordo.Test", timeoutMs: 5000)
      } catch {
        stopService()
        throw error
      }
    } catch {
      daemon.stop()
      throw error
    }
  }

  func stop() {
    client.close()
    stopService()
    daemon.stop()
  }
}

struct PrivateDaemon {
  let address: String
  let pid: pid_t

  init() throws {
    (address, pid) = try startPrivateDaemon()
    try #require(!address.isEmpty, "dbus-daemon printed no address")
  }

  func stop() {
    kill(pid, SIGKILL)
    var st: Int32 = 0
    waitpid(pid, &st, 0)
  }
}

/// Starts a private dbus-daemon; returns its address and pid (kill with
/// SIGKILL).
func startPrivateDaemon() throws -> (String, pid_t) {
  try spawnReadingLine(["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"])
}

/// Starts `args` (looked up in PATH) with its standard output on a pipe
/// and its standard error on /dev/null; returns the first line it prints
/// and its pid. The test runner's threads block some signals; the process
/// gets an empty signal mask so that it does not inherit them.
func spawnReadingLine(_ args: [String]) throws -> (String, pid_t) {
  var fds: [Int32] = [0, 0]
  #expect(pipe(&fds) == 0)
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
  posix_spawn_file_actions_addclose(&actions, fds[0])
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
  var argv: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
  var attr = posix_spawnattr_t()
  posix_spawnattr_init(&attr)
  var empty = sigset_t()
  sigemptyset(&empty)
  posix_spawnattr_setsigmask(&attr, &empty)
  posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
  defer { posix_spawnattr_destroy(&attr) }
  var pid: pid_t = 0
  let rc = posix_spawnp(&pid, args[0], &actions, &attr, &argv, nil)
  for p in argv { free(p) }
  posix_spawn_file_actions_destroy(&actions)
  close(fds[1])
  try #require(rc == 0, "cannot start \(args[0])")
  var line: [UInt8] = []
  var byte: UInt8 = 0
  while read(fds[0], &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
  close(fds[0])
  return (String(decoding: line, as: UTF8.self), pid)
}

/// A remote writer client answering on its own thread.
final class WriterThread: @unchecked Sendable {
  let address: String
  let stop = Atomic<Bool>(false)
  let ready = Atomic<Bool>(false)
  let answered = Atomic<Int>(0)
  var tid = pthread_t()
  init(address: String) { self.address = address }

  func run() {
    guard let client = try? OrdoClient(address: address, name: "dev.ordo.Test", timeoutMs: 5000) else { return }
    // computed data (-1): total = a + b, read by a local data contract.
    _ = try? client.registerWriter(name: "total", reads: ["in.*"], writes: ["out.total"], priority: -1, timeoutMs: 5000) { [unowned client] note in
      // (unowned: the client keeps its writers' callbacks.)
      // Snapshot for the inputs not in this Notify; the Notify's values are
      // the running transaction's (a Snapshot during a pass on a host
      // thread sees the last committed state).
      var inputs: [String: Value] = [:]
      for (k, v) in (try? client.snapshot(["in.*"]))?.values ?? [] { inputs[k] = v }
      inputs.merge(note.values) { $1 }
      var sum: Int64 = 0
      for (_, v) in inputs { if case .int64(let x) = v { sum += x } }
      self.answered.add(1, ordering: .relaxed)
      return RemoteWrites(set: ["out.total": .int64(sum)])
    }
    ready.store(true, ordering: .relaxed)
    while !stop.load(ordering: .relaxed) { client.process(timeoutMs: 50) }
    client.close()
  }
}

/// A remote writer contract (OrdoClient.registerWriter) whose output a
/// local Swift contract on the published bus reads: passes run on the
/// service thread (a remote Commit) and on another thread (a local commit).
@Test func remoteWriterFeedsLocalContract() throws {
  let daemon = try PrivateDaemon()
  defer { daemon.stop() }
  let address = daemon.address
  let bus = Bus()
  let service = try DBusService(bus: bus, address: address, name: "dev.ordo.Test")
  let stopService = runService(service)
  defer { stopService() }
  let writer = WriterThread(address: address)
  pthread_create(&writer.tid, nil, { raw in
    let w = Unmanaged<WriterThread>.fromOpaque(raw!).takeRetainedValue()
    w.run()
    return nil
  }, Unmanaged.passRetained(writer).toOpaque())
  defer {
    writer.stop.store(true, ordering: .relaxed)
    pthread_join(writer.tid, nil)
  }
  let deadline = time(nil) + 10
  while !writer.ready.load(ordering: .relaxed) && time(nil) < deadline { usleep(10_000) }
  let ready = writer.ready.load(ordering: .relaxed)
  try #require(ready)

  let seen = Mutex<[Int64]>([])
  try bus.register(name: "local-view", reads: ["out.total"], writes: ["out.label"]) { ctx in
    if case .int64(let t)? = try ctx.value("out.total") {
      seen.withLock { $0.append(t) }
      try ctx.set("out.label", .string("total \(t)"))
    }
  }
  // A remote Commit: the pass runs on the service thread.
  let client = try OrdoClient(address: address, name: "dev.ordo.Test", timeoutMs: 5000)
  #expect(try client.commit(set: [("in.a", .int64(2)), ("in.b", .int64(3))]) == 1)
  #expect(seen.withLock { $0 } == [5])
  #expect(try client.get("out.label").value == .string("total 5"))
  // A local commit on this thread: the writer is served by hand-over.
  bus.begin()
  try bus.set("in.b", .int64(10))
  #expect(try bus.commit() == 2)
  #expect(seen.withLock { $0 } == [5, 12])
  #expect(try bus.value("out.label") == .string("total 12"))
  #expect(writer.answered.load(ordering: .relaxed) == 2)
  let stats = try client.stats()
  #expect(stats.first { $0.0 == "completes" }?.1 == .uint(2))
  #expect(stats.first { $0.0 == "timeouts" }?.1 == .uint(0))
  client.close()
}

/// A writer registered with notify-initial answers its initial call (empty
/// list, the last committed id) with a Complete that the service accepts.
@Test func notifyInitialWriterAnswersItsInitialCall() throws {
  let served = try ServedBus()
  defer { served.stop() }
  let (bus, client) = (served.bus, served.client)
  #expect(try client.commit(set: [("in.a", .int64(2)), ("in.b", .int64(3))]) == 1)
  var calls: [RemoteNotification] = []
  var refused: [OrdoRemoteError] = []
  client.onCompleteError = { _, _, e in refused.append(e) }
  let path = try client.registerWriter(name: "total", reads: ["in.*"], writes: ["out.total"], priority: -1, notifyInitial: true, timeoutMs: 5000) {
    [unowned client] note in
    calls.append(note)
    let sum = ((try? client.snapshot(["in.*"]))?.values ?? []).reduce(Int64(0)) { if case .int64(let x) = $1.1 { $0 + x } else { $0 } }
    return RemoteWrites(set: ["out.total": .int64(sum)])
  }
  let deadline = time(nil) + 10
  while bus.transactionID < 2 && time(nil) < deadline { client.process(timeoutMs: 50) }
  #expect(calls.map { [$0.contract, String($0.transaction), $0.changed.joined()] } == [[path, "1", ""]])
  #expect(refused.isEmpty, "\(refused)")
  #expect(try bus.value("out.total") == .int64(5))
  #expect(try client.stats().first { $0.0 == "timeouts" }?.1 == .uint(0))
}

// MARK: - Policy (parse, match, explain)

private let names: Policy.Resolver = { ["alice": 1000, "settingsd": 900, "apps": 500, "normalizer": 901][$0] }

@Test func policyParsesAndMatchesWithDenyWinning() throws {
  let p = try Policy(
    parsing: """
      # comment
      allow everyone read pub.**
      allow user:alice,uid:7 read,write app.** x.*.y
      deny group:apps read pub.secret.**   # trailing comment
      allow gid:500 writer app.norm.**
      """, user: names, group: names)
  #expect(p.rules.count == 4)
  let alice = PeerIdentity(uid: 1000, gids: [1000])
  let app = PeerIdentity(uid: 2000, gids: [500])
  // read
  #expect(p.check(alice, .read, "pub.a").allowed)
  #expect(p.check(app, .read, "pub.a").allowed)
  let d = p.check(app, .read, "pub.secret.k")
  #expect(!d.allowed)
  #expect(d.reason == "denied by line 4 (deny group:apps read pub.secret.**)")
  #expect(p.check(app, .read, "other").reason == "no rule allows it")
  // Patterns: allowed only when all they match is allowed and no deny overlaps.
  #expect(p.check(alice, .read, "pub.**").allowed)
  #expect(!p.check(app, .read, "pub.**").allowed)
  #expect(!p.check(app, .read, "pub.*.k").allowed)
  #expect(p.check(app, .read, "pub.open.*").allowed)
  #expect(!p.check(app, .read, "**").allowed)
  // write
  #expect(p.check(alice, .write, "app.a.b").allowed)
  #expect(p.check(alice, .write, "x.q.y").allowed)
  #expect(!p.check(alice, .write, "x.q.z").allowed)
  #expect(!p.check(alice, .write, "x.**").allowed)
  #expect(p.check(PeerIdentity(uid: 7, gids: []), .write, "app").allowed)
  #expect(!p.check(app, .write, "app.a").allowed)
  // writer
  #expect(p.check(app, .writer, "app.norm.*").allowed)
  #expect(!p.check(app, .writer, "app.*").allowed)
  // The read filter agrees with check.
  let f = p.readable(by: app)
  #expect(f.allows("pub.a") && !f.allows("pub.secret.k") && !f.allows("pub.secret") && !f.allows("app.x"))
}

@Test func policyErrorsNameTheLine() {
  func line(_ text: String) -> Int? {
    do {
      _ = try Policy(parsing: text, user: names, group: names)
      return nil
    } catch { return error.line }
  }
  #expect(line("allow everyone read a\npermit everyone read a\n") == 2)
  #expect(line("allow everyone fly a") == 1)
  #expect(line("\n\nallow everyone read") == 3)
  #expect(line("allow user:bob read a") == 1)
  #expect(line("allow uid:x read a") == 1)
  #expect(line("allow nobody read a") == 1)
  #expect(line("allow everyone read a..b") == 1)
  #expect(line("allow everyone read a.**.b") == 1)
  #expect(line("allow everyone read,write a.**\ndeny everyone write a.b") == nil)
}

@Test func patternRelations() throws {
  func p(_ s: String) throws -> PolicyPattern { try PolicyPattern(s) }
  #expect(try p("a.b").isWithin(p("a.*")))
  #expect(try p("a.b.c").isWithin(p("a.**")))
  #expect(try p("a").isWithin(p("a.**")))
  #expect(try !p("a.**").isWithin(p("a.*")))
  #expect(try !p("a.*").isWithin(p("a.b")))
  #expect(try p("a.*.c").isWithin(p("a.*.*")))
  #expect(try p("**").isWithin(p("**")))
  #expect(try p("a.*").overlaps(p("a.b")))
  #expect(try p("a.**").overlaps(p("a.b.c")))
  #expect(try !p("a.*").overlaps(p("a.b.c")))
  #expect(try !p("a.b").overlaps(p("a.c")))
  #expect(try p("**").overlaps(p("z")))
}

/// Runs a service on its own thread until `stop` (returns the joiner).
func runService(_ service: DBusService) -> () -> Void {
  let box = ServiceBox(service)
  var tid = pthread_t()
  let ctx = Unmanaged.passRetained(box).toOpaque()
  pthread_create(&tid, nil, { raw in
    let box = Unmanaged<ServiceBox>.fromOpaque(raw!).takeRetainedValue()
    try? box.service.run()
    return nil
  }, ctx)
  return {
    service.stop()
    pthread_join(tid, nil)
  }
}

/// Resynchronization through OrdoClient (SPEC §10): the Epoch property,
/// Changes (values, removed, counters, since past the last id), and the
/// owner-change callback when another service takes the name.
@Test func clientChangesEpochAndOwnerChange() throws {
  let daemon = try PrivateDaemon()
  defer { daemon.stop() }
  let address = daemon.address
  let bus = Bus()
  var service: DBusService? = try DBusService(bus: bus, address: address, name: "dev.ordo.Test")
  var join = runService(service!)
  let client = try OrdoClient(address: address, name: "dev.ordo.Test", timeoutMs: 5000)
  #expect(try client.epoch == bus.epoch)
  #expect(try client.commit(set: [("d.a", .int64(1)), ("d.b", .string("b"))]) == 1)
  #expect(try client.commit(set: [("d.c", .bool(true))], remove: ["d.b"]) == 2)
  #expect(try client.commit(touch: ["d.t"]) == 3)
  #expect(try client.transaction == 3)
  let ch = try client.changes(since: 1, patterns: ["d.*"])
  // D-Bus `Changes` carries no changed-at (the core's result does).
  var direct = try bus.changes(since: 1, ["d.*"])
  direct.changedAt = [:]
  #expect(ch == direct)
  #expect(ch.values == ["d.c": .bool(true)])
  #expect(ch.removed == ["d.b", "d.t"])
  #expect(ch.counters == ["d.b": 2, "d.c": 1, "d.t": 1])
  #expect(ch.transaction == 3)
  do {
    _ = try client.changes(since: 4, patterns: ["**"])
    Issue.record("Changes since a transaction after the last one succeeded")
  } catch {
    #expect(error.code == .invalidArgument)
    #expect(error.message.contains(bus.epoch))
  }
  // Another service takes the name: the client is told (nil, then the new
  // owner); without reconnect its contracts are gone.
  var owners: [String?] = []
  client.onOwnerChange = { owners.append($0) }
  client.reconnect = false
  var notes = 0
  try client.register(name: "w", reads: ["d.**"]) { _ in notes += 1 }
  let first = client.serviceOwner
  #expect(first == service?.uniqueName)
  join()
  service?.close()
  service = nil
  let bus2 = Bus()
  let service2 = try DBusService(bus: bus2, address: address, name: "dev.ordo.Test")
  join = runService(service2)
  defer { join() }
  let deadline = time(nil) + 10
  while owners.count < 2 && time(nil) < deadline { client.process(timeoutMs: 100) }
  #expect(owners == [nil, service2.uniqueName])
  #expect(client.serviceOwner == service2.uniqueName)
  #expect(try client.epoch == bus2.epoch)
  #expect(bus2.epoch != bus.epoch)
  // The old contract is gone with its owner: a commit on the new bus calls nothing.
  #expect(try client.commit(set: [("d.a", .int64(2))]) == 1)
  client.process(timeoutMs: 200)
  #expect(notes == 0)
  client.close()
}

/// `ordod` (beside the test binary) serving on the bus daemon at
/// `address`, or with `direct` only on its socket there (`--no-bus
/// --listen`); returns its pid once it printed its ready line.
func startOrdod(_ address: String, _ args: [String] = [], direct: Bool = false) throws -> pid_t {
  var exe = [CChar](repeating: 0, count: 4096)
  let n = readlink("/proc/self/exe", &exe, exe.count - 1)
  try #require(n > 0)
  let me = String(decoding: exe[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  let ordod = String(me[..<me.lastIndex(of: "/")!]) + "/ordod"
  let serve = direct ? ["--no-bus", "--listen", address] : ["--address", address]
  let (line, pid) = try spawnReadingLine([ordod] + serve + args)
  let ready = (direct ? "ORDO_ADDRESS=" : "DBUS_SESSION_BUS_ADDRESS=") + address
  try #require(line == ready, "ordod printed \(line)")
  return pid
}

func killAndReap(_ pid: pid_t) {
  kill(pid, SIGKILL)
  var st: Int32 = 0
  waitpid(pid, &st, 0)
}

/// `ordod --no-bus --listen` on a socket of its own temporary directory;
/// `restart()` kills it (kill -9) and starts another there.
final class DirectOrdod {
  let dir: String
  let address: String
  private(set) var pid: pid_t

  init() throws {
    var template = Array("/tmp/ordo-direct-XXXXXX".utf8CString)
    dir = try #require(mkdtemp(&template).map { String(cString: $0) })
    address = "unix:path=\(dir)/bus"
    do {
      pid = try startOrdod(address, direct: true)
    } catch {
      rmdir(dir)
      throw error
    }
  }

  func restart() throws {
    killAndReap(pid)
    pid = try startOrdod(address, direct: true)
  }

  func stop() {
    killAndReap(pid)
    unlink(dir + "/bus")
    rmdir(dir)
  }
}

/// OrdoClient across `ordod` killed (kill -9) and started again: with the
/// same state (same epoch: a `changes` catch-up of what it missed), then
/// without (another epoch: a `snapshot`). Every change is delivered once;
/// a writer registers again and is called initially. Through the bus
/// daemon the client sees the name's owner change; over a direct
/// connection it sees the connection close and opens it again.
@Test(arguments: [false, true]) func clientSurvivesOrdodRestarts(direct: Bool) throws {
  let daemon = try PrivateDaemon()
  defer { daemon.stop() }
  var template = Array("/tmp/ordo-client-restart-XXXXXX".utf8CString)
  let dir = try #require(mkdtemp(&template).map { String(cString: $0) })
  // The state, the files SQLite and ordod's commit log keep beside it, the socket.
  defer {
    for f in ["/state.db", "/state.db-wal", "/state.db-shm", "/state.db-journal", "/state.db-log", "/bus", ""] {
      _ = f.isEmpty ? rmdir(dir) : unlink(dir + f)
    }
  }
  let state = ["--state", dir + "/state.db"]
  let address = direct ? "unix:path=\(dir)/bus" : daemon.address
  func connect() throws -> OrdoClient {
    direct ? try OrdoClient(direct: address, timeoutMs: 5000) : try OrdoClient(address: address, timeoutMs: 5000)
  }
  var ordod = try startOrdod(address, state, direct: direct)
  defer { killAndReap(ordod) }
  let client = try connect()
  defer { client.close() }
  let committer = try connect()
  defer { committer.close() }
  var notes: [RemoteNotification] = []
  try client.register(name: "view", reads: ["doc.*"]) { notes.append($0) }
  // The same view with a cache: refilled by its initial call after each restart.
  var cached: [RemoteNotification] = []
  try client.register(name: "cached view", reads: ["doc.*"], cache: true) { cached.append($0) }
  // A writer that only initial calls reach: it counts the doc keypaths.
  var writerCalls: [RemoteNotification] = []
  try client.registerWriter(name: "counter", reads: ["calc.never"], writes: ["calc.docs"], timeoutMs: 5000) { [unowned client] note in
    writerCalls.append(note)
    let n = (try? client.snapshot(["doc.*"]))?.values.count ?? -1
    return RemoteWrites(set: ["calc.docs": .int64(Int64(n))])
  }
  var owners: [String?] = []
  client.onOwnerChange = { owners.append($0) }
  func processUntil(_ done: () -> Bool) {
    let deadline = time(nil) + 20
    while !done() && time(nil) < deadline { client.process(timeoutMs: 50) }
  }
  for i in 1...3 { #expect(try committer.commit(set: [("doc.k\(i)", .int64(Int64(i)))]) == UInt64(i)) }
  processUntil { notes.count == 3 }
  #expect(try committer.commit(set: [("doc.k4", .int64(4))]) == 4)
  killAndReap(ordod)
  ordod = try startOrdod(address, state, direct: direct)
  // Committed while the client's contracts are away (it is not processing).
  #expect(try committer.commit(set: [("doc.k5", .int64(5))]) == 5)
  #expect(try committer.commit(set: [("doc.k6", .int64(6))]) == 6)
  processUntil { notes.contains { $0.kind == .changes } && owners.count == 2 && !writerCalls.isEmpty }
  #expect(try committer.commit(set: [("doc.k7", .int64(7))]) == 8)  // 7: the writer's initial call
  processUntil { notes.last?.transaction == 8 }
  #expect(try committer.get("calc.docs").value == .int64(6))
  let delivered = notes.flatMap(\.changed)
  #expect(delivered.sorted() == (1...7).map { "doc.k\($0)" })  // each once
  #expect(notes.map(\.transaction) == notes.map(\.transaction).sorted())
  #expect(notes.filter { $0.kind == .changes }.count == 1)
  #expect(notes.last.map { [$0.kind.rawValue] + $0.changed } == ["notify", "doc.k7"])
  #expect(writerCalls.map(\.changed) == [[]])
  processUntil { cached.last?.transaction == 8 }
  let docs = Dictionary(uniqueKeysWithValues: (1...7).map { ("doc.k\($0)", Value.int64(Int64($0))) })
  #expect(cached.last?.cache == docs)
  #expect(cached.map(\.kind) == [.notify] + Array(repeating: .notify, count: cached.count - 3) + [.changes, .notify])
  #expect(cached.dropFirst().flatMap(\.changed).sorted() == (1...7).map { "doc.k\($0)" })  // each once

  // Without state: another epoch, a snapshot of the new (empty) bus.
  killAndReap(ordod)
  ordod = try startOrdod(address, direct: direct)
  processUntil { notes.last?.kind == .snapshot && writerCalls.count == 2 }
  let snap = try #require(notes.last)
  #expect(snap.kind == .snapshot && snap.values.isEmpty && snap.changed.isEmpty)
  #expect(writerCalls.map(\.changed) == [[], []])
  #expect(try committer.get("calc.docs").value == .int64(0))
  #expect(try committer.commit(set: [("doc.k8", .int64(8))]) == 2)
  processUntil { notes.last?.transaction == 2 }
  #expect(notes.last.map { [$0.kind.rawValue] + $0.changed } == ["notify", "doc.k8"])
  #expect(owners.count == 4 && owners[0] == nil && owners[2] == nil)
  processUntil { cached.last?.transaction == 2 }
  let refilled = cached[cached.count - 2]
  #expect(refilled.kind == .snapshot && refilled.cache == [:] && refilled.changed == (1...7).map { "doc.k\($0)" })
  #expect(cached.last?.cache == ["doc.k8": .int64(8)])
}

/// A merged `Commit` in flight when its connection is lost fails once the
/// connection is opened again (here by another call), not after the
/// client's timeout: its reply cannot come on the new connection.
@Test func mergedCommitOnALostConnectionFailsAtOnce() throws {
  let ordod = try DirectOrdod()
  defer { ordod.stop() }
  let client = try OrdoClient(direct: ordod.address, timeoutMs: 5000)
  defer { client.close() }
  let writer = client.mergingWriter()
  #expect(try client.commit(set: [("m.b", .int64(1))]) == 1)  // the connection is set up
  kill(ordod.pid, SIGSTOP)
  let w = try writer.set("m.a", .int64(1))  // sent, never answered
  try ordod.restart()
  #expect(try client.commit(set: [("m.b", .int64(2))]) == 1)  // opens the connection again
  #expect(client.generation == 1)
  var t0 = timespec(), t1 = timespec()
  clock_gettime(CLOCK_MONOTONIC, &t0)
  #expect(throws: OrdoRemoteError.self) { try writer.flush() }
  clock_gettime(CLOCK_MONOTONIC, &t1)
  #expect(t1.tv_sec - t0.tv_sec < 2, "the lost Commit waited for the client's timeout")
  guard case .failed(let e) = writer.state(w) else {
    Issue.record("the lost Commit is \(writer.state(w))")
    return
  }
  #expect(e.name == DBusErrorName.dbus && e.message.contains("lost"))
  #expect(try client.get("m.b").value == .int64(2))
}

/// A program's own loop (poll ``OrdoClient/socket``, then `process(0)`)
/// across `ordod` started again behind a direct connection: the calls made
/// while the contracts come back (the registration, and here a call from
/// `onOwnerChange`) read the re-registered contract's initial call into
/// libdbus' queue, where the socket no longer shows it. `process` delivers
/// it before it returns, so the loop is not left waiting on a quiet socket.
@Test func processDeliversWhatItsCallsRead() throws {
  let ordod = try DirectOrdod()
  defer { ordod.stop() }
  let client = try OrdoClient(direct: ordod.address, timeoutMs: 5000)
  defer { client.close() }
  var notes: [RemoteNotification] = []
  try client.register(name: "view", reads: ["doc.*"], cache: true) { notes.append($0) }
  var owners: [String?] = []
  var transactions: [UInt64] = []
  client.onOwnerChange = { [unowned client] owner in
    owners.append(owner)
    if owner != nil, let t = try? client.transaction { transactions.append(t) }
  }
  // The program's loop: process what is there (what `register` read too),
  // then wait for the socket (while the connection is opened again there
  // is none: wait as ordo_client_fd's timer does). Five quiet seconds on
  // the socket end it.
  func loop(until done: () -> Bool) {
    while true {
      client.process(timeoutMs: 0)
      if done() { return }
      if let s = client.socket {
        var p = pollfd(fd: s, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 5000) > 0 else { return }
      } else {
        usleep(100_000)
      }
    }
  }
  loop { !notes.isEmpty }
  #expect(notes.map(\.kind) == [.notify])
  try ordod.restart()
  loop { notes.count == 2 }
  #expect(owners == [nil, ordod.address])
  #expect(transactions == [0])
  #expect(notes.map(\.kind) == [.notify, .snapshot])
}

/// A durability hook that records what the service asks of it; its
/// `acknowledged()` takes half a second.
final class RecordingDurability: Durability {
  let events = Mutex<[String]>([])
  let bus: Bus
  init(bus: Bus) { self.bus = bus }

  func sync() -> DurabilityOutcome {
    let t = bus.transactionID
    events.withLock { $0.append("sync \(t)") }
    return DurabilityOutcome(durable: t)
  }

  func acknowledged() {
    events.withLock { $0.append("acknowledged") }
    usleep(500_000)
  }
}

/// With a durability hook, a Commit's reply waits for `sync()`, and
/// `acknowledged()` runs once the reply was sent: its half second does not
/// delay the reply (what `ordod --state` relies on to write its commit log
/// into the database after acknowledging).
@Test func acknowledgedRunsAfterTheReplies() throws {
  let daemon = try PrivateDaemon()
  defer { daemon.stop() }
  let address = daemon.address
  let bus = Bus()
  let service = try DBusService(bus: bus, address: address, name: "dev.ordo.Test")
  let durability = RecordingDurability(bus: bus)
  service.setDurability(durability)
  let stop = runService(service)
  defer { stop() }
  let client = try OrdoClient(address: address, name: "dev.ordo.Test", timeoutMs: 5000)
  defer { client.close() }
  var t0 = timespec(), t1 = timespec()
  clock_gettime(CLOCK_MONOTONIC, &t0)
  #expect(try client.commit(set: [("a.x", .int64(1))]) == 1)
  clock_gettime(CLOCK_MONOTONIC, &t1)
  let seconds = Double(t1.tv_sec - t0.tv_sec) + Double(t1.tv_nsec - t0.tv_nsec) / 1e9
  #expect(seconds < 0.4, "the reply waited for acknowledged(): \(seconds) s")
  let deadline = time(nil) + 10
  while durability.events.withLock({ $0.count < 2 }) && time(nil) < deadline { usleep(10_000) }
  #expect(durability.events.withLock { $0 } == ["sync 1", "acknowledged"])
  // The next Commit is answered once acknowledged() returned.
  #expect(try client.commit(set: [("a.x", .int64(2))]) == 2)
  #expect(durability.events.withLock { Array($0.prefix(3)) } == ["sync 1", "acknowledged", "sync 2"])
}

/// `setBusyPoll` takes 0…1 s; anything else is refused and changes nothing.
@Test func busyPollLimits() throws {
  let service = try DBusService(bus: Bus(), busDaemon: false)
  defer { service.close() }
  #expect(service.busyPoll == .microseconds(50))
  try service.setBusyPoll(.milliseconds(2))
  #expect(service.busyPoll == .milliseconds(2))
  for bad in [Duration.microseconds(-1), .seconds(1) + .nanoseconds(1)] {
    do {
      try service.setBusyPoll(bad)
      Issue.record("busy poll \(bad) was accepted")
    } catch {
      #expect(error.code == .invalidArgument)
      #expect(error.message == "a busy poll lasts from 0 to 1 second, not \(bad)")
    }
    #expect(service.busyPoll == .milliseconds(2))
  }
  try service.setBusyPoll(.zero)
  #expect(service.busyPoll == .zero)
}

/// `OrdoClient.commit(expect:owned:)` and `owners` (SPEC §15) against an
/// in-process service: a condition that fails applies nothing; a closed
/// client's owned values are removed in one transaction.
@Test func clientConditionsAndOwnedValues() throws {
  let served = try ServedBus()
  defer { served.stop() }
  let (daemon, bus, client) = (served.daemon, served.bus, served.client)
  #expect(try client.commit(set: [("n", .int64(1))], expect: [("n", 0)]) == 1)
  do {
    _ = try client.commit(set: [("n", .int64(5)), ("m", .int64(5))], expect: [("n", 0)])
    Issue.record("a commit whose condition failed was applied")
  } catch {
    #expect(error.code == .conflict)
    #expect(error.message.contains("\"n\" was expected at counter 0 but is at 1"))
  }
  #expect(try bus.value("n") == .int64(1))
  #expect(try bus.value("m") == nil)
  let provider = try OrdoClient(address: daemon.address, name: "dev.ordo.Test", timeoutMs: 5000)
  #expect(try provider.commit(set: [("p.a", .bool(true))], owned: true) == 2)
  let owners = try client.owners()
  #expect(owners.map(\.keypath) == ["p.a"] && owners.map(\.owner) == [provider.uniqueName])
  provider.close()
  let deadline = time(nil) + 10
  while (try bus.value("p.a")) != nil && time(nil) < deadline { usleep(10_000) }
  #expect(try bus.value("p.a") == nil)
  #expect(bus.transactionID == 3)
  #expect(try client.owners().isEmpty)
}
