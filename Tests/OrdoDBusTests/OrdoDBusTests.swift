import Ordo
import OrdoDBus
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

/// A service and a client in one process, on a private dbus-daemon.
@Test func serviceAndClientInProcess() throws {
  var fds: [Int32] = [0, 0]
  #expect(pipe(&fds) == 0)
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
  posix_spawn_file_actions_addclose(&actions, fds[0])
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
  let args = ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"]
  var argv: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
  // The test runner's threads block some signals; the daemon must not
  // inherit that mask, or SIGTERM would never reach it.
  var attr = posix_spawnattr_t()
  posix_spawnattr_init(&attr)
  var empty = sigset_t()
  sigemptyset(&empty)
  posix_spawnattr_setsigmask(&attr, &empty)
  posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
  defer { posix_spawnattr_destroy(&attr) }
  var pid: pid_t = 0
  let rc = posix_spawnp(&pid, "dbus-daemon", &actions, &attr, &argv, nil)
  for p in argv { free(p) }
  posix_spawn_file_actions_destroy(&actions)
  close(fds[1])
  try #require(rc == 0, "cannot start dbus-daemon")
  defer {
    // SIGKILL: the daemon must go even if SIGTERM is blocked or ignored.
    kill(pid, SIGKILL)
    var st: Int32 = 0
    waitpid(pid, &st, 0)
  }
  var line: [UInt8] = []
  var byte: UInt8 = 0
  while read(fds[0], &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
  close(fds[0])
  let address = String(decoding: line, as: UTF8.self)
  try #require(!address.isEmpty)

  let bus = Bus()
  let service = try DBusService(bus: bus, address: address, name: "dev.ordo.Test")
  // The service runs on its own thread; the client blocks on this one.
  let box = ServiceBox(service)
  var tid = pthread_t()
  let ctx = Unmanaged.passRetained(box).toOpaque()
  pthread_create(&tid, nil, { raw in
    let box = Unmanaged<ServiceBox>.fromOpaque(raw!).takeRetainedValue()
    try? box.service.run()
    return nil
  }, ctx)
  defer {
    service.stop()
    pthread_join(tid, nil)
  }
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
  client.close()
}

final class ServiceBox: @unchecked Sendable {
  let service: DBusService
  init(_ s: DBusService) { service = s }
}
