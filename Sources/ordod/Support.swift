import CDBus
import Ordo
import OrdoDBus
import OrdoStore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Writes a line to a file descriptor (no buffering: logs and the address
/// line appear at once, even through a pipe).
func writeLine(_ fd: Int32, _ s: String) {
  var line = s
  line += "\n"
  line.withUTF8 { buf in
    var off = 0
    while off < buf.count {
      let n = write(fd, buf.baseAddress! + off, buf.count - off)
      if n <= 0 {
        if n < 0 && ordo_errno() == EINTR { continue }
        return
      }
      off += n
    }
  }
}

/// The service SIGINT/SIGTERM stop.
let serviceToStop = Mutex<DBusService?>(nil)
let stopRequested = Atomic<Bool>(false)
/// The `--policy` file SIGHUP reloads (nil: SIGHUP is ignored).
let policyPath = Mutex<String?>(nil)

/// The `--schema` file SIGHUP reloads (nil: no schema).
let schemaPath = Mutex<String?>(nil)

/// Reads the schema file again and puts it in force (SPEC §14): a file
/// that does not validate, or a schema that would leave a registered
/// contract or a stored value invalid, is refused with the list and the
/// old schema stays.
func reloadSchema() {
  guard let path = schemaPath.withLock({ $0 }) else { return }
  do {
    let schema = try Schema(contentsOfFile: path)
    guard let service = serviceToStop.withLock({ $0 }) else { return }
    try service.bus.replaceSchema(schema)
    writeLine(2, "ordod: info: SIGHUP: reloaded the schema \(path) (\(schema.declarations.count) keypaths)")
  } catch {
    writeLine(2, "ordod: error: SIGHUP: schema refused, the old schema stays: \(error.message)")
  }
}

/// Reads the policy file again and puts it in force; a file that does not
/// parse is refused and the old policy stays (SPEC §12).
func reloadPolicy() {
  guard let path = policyPath.withLock({ $0 }) else { return }
  do {
    let p = try Policy(contentsOf: path)
    serviceToStop.withLock { $0?.setPolicy(p) }
    writeLine(2, "ordod: info: SIGHUP: reloaded the access policy \(path) (\(p.rules.count) rules)")
  } catch {
    writeLine(2, "ordod: error: SIGHUP: policy refused, the old policy stays: \(error.description)")
  }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in every thread and waits for them on a
/// thread of their own: SIGINT and SIGTERM stop the service, SIGHUP reloads
/// the access policy. Call before any other thread starts.
func installSignalThread() {
  signal(SIGPIPE, SIG_IGN)
  var set = sigset_t()
  sigemptyset(&set)
  sigaddset(&set, SIGINT)
  sigaddset(&set, SIGTERM)
  sigaddset(&set, SIGHUP)
  pthread_sigmask(SIG_BLOCK, &set, nil)
  var tid = pthread_t()
  pthread_create(&tid, nil, { _ in
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGINT)
    sigaddset(&set, SIGTERM)
    sigaddset(&set, SIGHUP)
    while true {
      var sig: Int32 = 0
      while sigwait(&set, &sig) != 0 {}
      if sig == SIGHUP {
        reloadPolicy()
        reloadSchema()
        continue
      }
      stopRequested.store(true, ordering: .relaxed)
      serviceToStop.withLock { $0?.stop() }
      return nil
    }
  }, nil)
  pthread_detach(tid)
}

/// A `dbus-daemon` started for this process, stopped by ``stop()``.
///
/// With a `stable` directory (``stableDirectory(for:)``: under
/// `$XDG_RUNTIME_DIR`) it listens at `unix:path=DIR/bus`, the same address
/// at every start, and this process holds `DIR/ordod.lock` while it
/// serves: a second ordod for the same name is refused, and the daemon a
/// killed ordod left behind (its socket alive, its pid in
/// `DIR/dbus-daemon.pid`, the lock free) is taken over, so that its
/// clients stay connected and see the service come back. Without one, it
/// listens in a fresh temporary directory.
final class PrivateDaemon {
  let pid: pid_t
  let address: String
  /// Whether it is a daemon a killed ordod left, taken over.
  let reused: Bool
  private let dir: String
  private var lock: Int32 = -1

  /// `$XDG_RUNTIME_DIR/ordo/NAME` (nil without `XDG_RUNTIME_DIR`): the
  /// stable place of the private bus serving `name`.
  static func stableDirectory(for name: String) -> String? {
    guard let run = getenv("XDG_RUNTIME_DIR").map({ String(cString: $0) }), run.hasPrefix("/") else { return nil }
    return run + "/ordo/" + name
  }

  /// Starts `dbus-daemon` with a configuration of its own in `stable` (or
  /// a fresh temporary directory) and reads the address it listens on; or
  /// takes over the one a killed ordod left in `stable`.
  init(quiet: Bool, stable: String?) throws(OrdoError) {
    if let stable {
      dir = stable
      let parent = String(stable[..<(stable.lastIndex(of: "/") ?? stable.endIndex)])
      for d in [parent, stable] where mkdir(d, 0o700) != 0 && ordo_errno() != EEXIST {
        throw OrdoError(.dbus, "cannot create \(d): errno \(ordo_errno())")
      }
      lock = open(stable + "/ordod.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
      guard lock >= 0 else { throw OrdoError(.dbus, "cannot open \(stable)/ordod.lock: errno \(ordo_errno())") }
      guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
        close(lock)
        throw OrdoError(.dbus, "another ordod serves the private bus at \(stable)/bus (it holds \(stable)/ordod.lock)")
      }
      if let left = Self.leftDaemon(in: stable) {
        pid = left
        address = "unix:path=\(stable)/bus"
        reused = true
        return
      }
      // What a killed ordod left and nothing serves any more.
      unlink(stable + "/bus")
      unlink(stable + "/dbus-daemon.pid")
    } else {
      var template = Array("/tmp/ordod.XXXXXX".utf8CString)
      guard let d = mkdtemp(&template) else { throw OrdoError(.dbus, "cannot create a temporary directory: errno \(ordo_errno())") }
      dir = String(cString: d)
    }
    reused = false
    let listen = stable == nil ? "unix:dir=\(dir)" : "unix:path=\(dir)/bus"
    let config = """
      <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
       "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
      <busconfig>
        <type>session</type>
        <listen>\(listen)</listen>
        <auth>EXTERNAL</auth>
        <policy context="default">
          <allow send_destination="*" eavesdrop="true"/>
          <allow eavesdrop="true"/>
          <allow own="*"/>
        </policy>
        <!-- A peer that never reads its socket may have at most 64 MiB queued
             for it; further messages to it are dropped. -->
        <limit name="max_outgoing_bytes">67108864</limit>
        <limit name="max_incoming_bytes">134217728</limit>
        <limit name="max_message_size">134217728</limit>
        <limit name="max_completed_connections">4096</limit>
        <limit name="max_connections_per_user">4096</limit>
        <limit name="max_match_rules_per_connection">4096</limit>
        <limit name="max_replies_per_connection">4096</limit>
      </busconfig>

      """
    let configPath = dir + "/bus.conf"
    guard let f = fopen(configPath, "w") else { throw OrdoError(.dbus, "cannot write \(configPath): errno \(ordo_errno())") }
    fputs(config, f)
    fclose(f)

    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { throw OrdoError(.dbus, "pipe failed: errno \(ordo_errno())") }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
    posix_spawn_file_actions_addclose(&actions, fds[0])
    // Its warnings (e.g. it cannot raise the fd limit) only at debug level.
    if quiet { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
    // The daemon must not inherit our blocked signals: SIGTERM stops it.
    var attr = posix_spawnattr_t()
    posix_spawnattr_init(&attr)
    var none = sigset_t()
    sigemptyset(&none)
    posix_spawnattr_setsigmask(&attr, &none)
    posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
    let args = ["dbus-daemon", "--config-file=\(configPath)", "--nofork", "--nopidfile", "--print-address=1"]
    var argv: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
    var child: pid_t = 0
    let rc = posix_spawnp(&child, "dbus-daemon", &actions, &attr, &argv, ordo_environ())
    for p in argv { free(p) }
    posix_spawn_file_actions_destroy(&actions)
    posix_spawnattr_destroy(&attr)
    close(fds[1])
    guard rc == 0 else {
      close(fds[0])
      throw OrdoError(.dbus, "cannot start dbus-daemon (is the Debian package dbus-daemon installed?): error \(rc)")
    }
    pid = child
    // Read the address line.
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while read(fds[0], &byte, 1) == 1 {
      if byte == UInt8(ascii: "\n") { break }
      line.append(byte)
    }
    close(fds[0])
    let printed = String(decoding: line, as: UTF8.self)
    // The stable address is the same for the next daemon, whose guid differs.
    address = stable == nil || printed.isEmpty ? printed : listen
    guard !printed.isEmpty else {
      stop()
      throw OrdoError(.dbus, "dbus-daemon did not print its address")
    }
    if stable != nil, let f = fopen(dir + "/dbus-daemon.pid", "w") {
      fputs("\(pid)\n", f)
      fclose(f)
    }
  }

  /// The pid of the `dbus-daemon` a killed ordod left in `dir`: its pid
  /// file names a live `dbus-daemon` and its socket accepts connections.
  private static func leftDaemon(in dir: String) -> pid_t? {
    guard ordo_unix_socket_alive(dir + "/bus") == 1, let text = contents(dir + "/dbus-daemon.pid"),
      let pid = pid_t(text.split(separator: "\n").first ?? ""), pid > 0, kill(pid, 0) == 0,
      contents("/proc/\(pid)/comm") == "dbus-daemon\n"
    else { return nil }
    return pid
  }

  /// The first bytes of a small file.
  private static func contents(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buf = [UInt8](repeating: 0, count: 64)
    let n = read(fd, &buf, buf.count)
    return n > 0 ? String(decoding: buf[..<n], as: UTF8.self) : nil
  }

  /// Stops the daemon and removes its directory (and the lock).
  func stop() {
    kill(pid, SIGTERM)
    var status: Int32 = 0
    if reused {
      // Not this process's child: wait for it to go.
      for _ in 0..<200 where kill(pid, 0) == 0 { usleep(10_000) }
    } else {
      waitpid(pid, &status, 0)
    }
    unlink(dir + "/bus.conf")
    // The socket file, if any is left.
    if let dp = opendir(dir) {
      while let e = readdir(dp) {
        let name = withUnsafeBytes(of: e.pointee.d_name) { raw in String(cString: raw.bindMemory(to: CChar.self).baseAddress!) }
        if name != "." && name != ".." { unlink(dir + "/" + name) }
      }
      closedir(dp)
    }
    rmdir(dir)
    if lock >= 0 { close(lock) }
  }
}

/// Fills the service's durability hook with the bus's `DurableState`
/// (SPEC §11): `sync()` makes every committed transaction durable in one
/// SQLite COMMIT; when the state file refuses, `DurableState` has restored
/// the bus from the file and names the lost transactions.
final class StoreDurability: Durability {
  let state: DurableState
  let logger: @Sendable (LogLevel, String) -> Void

  init(_ state: DurableState, logger: @escaping @Sendable (LogLevel, String) -> Void) {
    self.state = state
    self.logger = logger
  }

  /// Whether the last `applyLog()` failed (its warning is logged once per
  /// run of failures). Service thread only.
  nonisolated(unsafe) private var applyFailing = false

  func acknowledged() {
    do {
      try state.applyLog()
      if applyFailing {
        applyFailing = false
        logger(.info, "the commit log is written into the database again")
      }
    } catch {
      if !applyFailing {
        applyFailing = true
        logger(.warning, "\(error.message) (retried after each sync)")
      }
    }
  }

  func sync() -> DurabilityOutcome {
    do {
      return DurabilityOutcome(durable: try state.sync())
    } catch {
      if error.refusingCommits {
        logger(.error, "commits are refused until the state file can be read again: \(error.error.message)")
      }
      return DurabilityOutcome(durable: state.lastDurableTransaction, lost: error.lost, reason: error.error.message)
    }
  }
}
