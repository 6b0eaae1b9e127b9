import Ordo
import OrdoStore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A fresh temporary directory, removed with everything in it by `remove()`.
struct TempDir {
  let path: String

  init() {
    var template = Array("/tmp/ordo-store-test-XXXXXX".utf8CString)
    let p = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    path = String(cString: p!)
  }

  func file(_ name: String) -> String { "\(path)/\(name)" }

  func remove() { _ = run(["/bin/rm", "-rf", path]) }
}

/// The bytes of a file (nil if it cannot be read).
func contents(_ path: String) -> [UInt8]? {
  guard let f = fopen(path, "rbe") else { return nil }  // e: close-on-exec
  defer { fclose(f) }
  var out: [UInt8] = []
  var buf = [UInt8](repeating: 0, count: 65536)
  while true {
    let n = fread(&buf, 1, buf.count, f)
    if n <= 0 { break }
    out += buf[0..<n]
  }
  return out
}

func writeFile(_ path: String, _ bytes: [UInt8]) {
  let f = fopen(path, "wbe")!
  _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, bytes.count, f) }
  fclose(f)
}

/// The ordo-store-tool executable, built beside the test binary.
func toolPath() -> String {
  var buf = [CChar](repeating: 0, count: 4096)
  let n = readlink("/proc/self/exe", &buf, buf.count - 1)
  var exe = n > 0 ? String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
  while !exe.isEmpty, !exe.hasSuffix("/") { exe.removeLast() }
  // The test binary is .build/<config>/OrdoPackageTests.xctest.
  return exe + "ordo-store-tool"
}

/// A child process with its stdin and stdout on pipes.
final class Child {
  let pid: pid_t
  let input: Int32  // the child's stdin (write end)
  let output: Int32  // the child's stdout (read end)
  private var buffer: [UInt8] = []

  init(_ argv: [String]) {
    var toChild: [Int32] = [0, 0], fromChild: [Int32] = [0, 0]
    // Close-on-exec: another test's child must not inherit these ends.
    precondition(pipe(&toChild) == 0 && pipe(&fromChild) == 0)
    for fd in toChild + fromChild { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
    posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
    for fd in toChild + fromChild { posix_spawn_file_actions_addclose(&actions, fd) }
    var cargs = argv.map { strdup($0) } + [nil]
    var p: pid_t = 0
    let rc = posix_spawn(&p, argv[0], &actions, nil, &cargs, environ)
    posix_spawn_file_actions_destroy(&actions)
    for a in cargs { free(a) }
    precondition(rc == 0, "cannot start \(argv[0]): \(String(cString: strerror(rc)))")
    pid = p
    close(toChild[0])
    close(fromChild[1])
    input = toChild[1]
    output = fromChild[0]
  }

  /// The next line of output (without the newline), or nil at end of file
  /// or after `timeout` seconds.
  func line(timeout: Double = 120) -> String? {
    let deadline = now() + timeout
    while true {
      if let nl = buffer.firstIndex(of: 10) {
        let l = String(decoding: buffer[..<nl], as: UTF8.self)
        buffer.removeSubrange(...nl)
        return l
      }
      let left = deadline - now()
      if left <= 0 { return nil }
      var p = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
      if poll(&p, 1, Int32(left * 1000) + 1) <= 0 { continue }
      var chunk = [UInt8](repeating: 0, count: 4096)
      let n = read(output, &chunk, chunk.count)
      if n <= 0 { return nil }
      buffer += chunk[0..<n]
    }
  }

  /// Closes the child's stdin and waits for it; returns its exit status
  /// (or 128 + signal).
  @discardableResult
  func wait() -> Int32 {
    if input >= 0 { close(input) }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    close(output)
    if status & 0x7f != 0 { return 128 + (status & 0x7f) }
    return (status >> 8) & 0xff
  }

  func kill9() { _ = kill(pid, SIGKILL) }
}

/// Copies the state file's files (the database, its WAL and its commit
/// log, not SQLite's shared-memory index) as a crash would leave them:
/// everything written is in the files (the kill -9 rounds through a bus,
/// in BusTests, kill real processes).
func crashImage(_ path: String, to copy: String) {
  for suffix in ["", "-wal", "-log"] {
    if let bytes = contents(path + suffix) { writeFile(copy + suffix, bytes) }
  }
}

/// Runs a program to its end; returns its exit status.
@discardableResult
func run(_ argv: [String]) -> Int32 {
  let c = Child(argv)
  while c.line(timeout: 60) != nil {}
  return c.wait()
}

func now() -> Double {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Opening `path` fails with `kind`; the message names the file and
/// contains every fragment.
func expectRefused(
  _ path: String, _ kind: StoreError.Kind, _ fragments: [String], sourceLocation: SourceLocation = #_sourceLocation
) {
  do {
    let f = try StateFile.open(path: path)
    f.close()
    Issue.record("\(path) opened; expected \(kind)", sourceLocation: sourceLocation)
  } catch {
    #expect(error.kind == kind, "\(error.message)", sourceLocation: sourceLocation)
    #expect(error.path == path, sourceLocation: sourceLocation)
    for f in [path] + fragments {
      #expect(error.message.contains(f), "\"\(error.message)\" lacks \"\(f)\"", sourceLocation: sourceLocation)
    }
  }
}

/// A temporary directory with a tmpfs of `size` (e.g. "1m") mounted on it
/// (needs `canMount`): `fill()` takes all the space left, `free()` gives
/// it back, `remove()` unmounts and removes the directory.
struct SmallDisk {
  let dir = TempDir()
  var path: String { dir.path }

  init(size: String) {
    #expect(run(["/bin/mount", "-t", "tmpfs", "-o", "size=\(size)", "tmpfs", dir.path]) == 0)
  }

  func file(_ name: String) -> String { dir.file(name) }

  func fill() {
    // Close-on-exec: a child another test starts meanwhile must not keep the
    // filler open, or `free()` would give no space back.
    let fd = open(file("filler"), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
    let block = [UInt8](repeating: 7, count: 4096)
    while write(fd, block, block.count) > 0 {}
    close(fd)
  }

  func free() { unlink(file("filler")) }

  func remove() {
    run(["/bin/umount", dir.path])
    dir.remove()
  }
}

/// Whether this process may mount file systems (root in a namespace that
/// allows it); checked by mounting a tmpfs once.
let canMount: Bool = {
  let d = TempDir()
  defer { d.remove() }
  guard geteuid() == 0 else { return false }
  guard run(["/bin/mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d.path]) == 0 else { return false }
  run(["/bin/umount", d.path])
  return true
}()
