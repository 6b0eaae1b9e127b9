// `ordoctl watch --resume FILE`: a watch that prints every change once across
// its own restarts, ordod's restarts and dropped Notify signals (SPEC §10).
// See "Resuming a watch" in docs/dbus.md.
import Ordo
import OrdoDBus

#if canImport(Glibc)
import Glibc
#endif

/// Where a resumable watch is: the epoch of the bus it last read and the
/// last transaction whose changes it printed. Kept in the position file as
/// two lines, `epoch UUID` and `txn N`.
struct WatchPosition: Equatable {
  var epoch: String
  var transaction: UInt64

  var text: String { "epoch \(epoch)\ntxn \(transaction)\n" }

  init(epoch: String, transaction: UInt64) {
    self.epoch = epoch
    self.transaction = transaction
  }

  /// Parses the file's text; nil when it is not a position.
  init?(text: String) {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
    guard lines.count == 2, lines[0].hasPrefix("epoch "), lines[1].hasPrefix("txn ") else { return nil }
    let e = String(lines[0].dropFirst(6))
    guard !e.isEmpty, !e.contains(where: { $0 == " " }), let t = UInt64(lines[1].dropFirst(4)) else { return nil }
    epoch = e
    transaction = t
  }
}

/// The options of a resumable watch.
struct ResumeOptions {
  var address: String?
  /// `address` is a direct one (`--direct`).
  var direct: Bool
  var service: String
  var timeoutMs: Int32
  var patterns: [String]
  var file: String
  var priority: Int32?
  var json: Bool
  var count: Int
  var contractName: String
  /// How long to wait for the service (or the bus) to come back; 0: forever.
  var reconnectTimeoutMs: Int64
}

/// What one printed line reports.
enum WatchLine {
  case notify(RemoteNotification)
  case changes(Changes, epoch: String)
  case snapshot(values: [(String, Value)], counters: [(String, UInt64)], transaction: UInt64, epoch: String)

  var transaction: UInt64 {
    switch self {
    case .notify(let n): n.transaction
    case .changes(let c, _): c.transaction
    case .snapshot(_, _, let t, _): t
    }
  }

  func render(json: Bool) -> String {
    switch self {
    case .notify(let note):
      if json {
        let changed = note.changed.map(ValueText.json).joined(separator: ",")
        let values = note.changed.compactMap { k in note.values[k].map { ValueText.json(k) + ":" + ValueText.jsonValue($0) } }
        return "{\"kind\":\"notify\",\"contract\":\(ValueText.json(note.contract)),\"txn\":\(note.transaction),\"changed\":[\(changed)],\"values\":{\(values.joined(separator: ","))}}"
      }
      let items = note.changed.map { k in note.values[k].map { "\(k)=\(ValueText.format($0, quoted: true))" } ?? k }
      return (["txn=\(note.transaction)"] + items).joined(separator: " ")
    case .changes(let ch, let epoch):
      let keys = Set(ch.values.keys).union(ch.removed).sorted()
      if json {
        let values = keys.compactMap { k in ch.values[k].map { ValueText.json(k) + ":" + ValueText.jsonValue($0) } }
        let counters = keys.map { ValueText.json($0) + ":" + String(ch.counters[$0] ?? 0) }
        return "{\"kind\":\"changes\",\"epoch\":\(ValueText.json(epoch)),\"txn\":\(ch.transaction),\"changed\":[\(keys.map(ValueText.json).joined(separator: ","))],\"values\":{\(values.joined(separator: ","))},\"removed\":[\(ch.removed.sorted().map(ValueText.json).joined(separator: ","))],\"counters\":{\(counters.joined(separator: ","))}}"
      }
      let items = keys.map { k in ch.values[k].map { "\(k)=\(ValueText.format($0, quoted: true))" } ?? k }
      return (["txn=\(ch.transaction)", "changes:"] + items).joined(separator: " ")
    case .snapshot(let values, let counters, let txn, let epoch):
      let valued = Dictionary(values, uniquingKeysWith: { a, _ in a })
      let counted = Dictionary(counters, uniquingKeysWith: { a, _ in a })
      let keys = Set(valued.keys).union(counted.keys).sorted()
      if json {
        let vs = keys.compactMap { k in valued[k].map { ValueText.json(k) + ":" + ValueText.jsonValue($0) } }
        let cs = keys.map { ValueText.json($0) + ":" + String(counted[$0] ?? 0) }
        return "{\"kind\":\"snapshot\",\"epoch\":\(ValueText.json(epoch)),\"txn\":\(txn),\"changed\":[\(keys.map(ValueText.json).joined(separator: ","))],\"values\":{\(vs.joined(separator: ","))},\"counters\":{\(cs.joined(separator: ","))}}"
      }
      let items = keys.map { k in valued[k].map { "\(k)=\(ValueText.format($0, quoted: true))" } ?? k }
      return (["txn=\(txn)", "snapshot:"] + items).joined(separator: " ")
    }
  }
}

/// A watch that resumes (SPEC §10): it registers an observer, then catches
/// up from the saved position — same epoch: `Changes` since the saved txn,
/// printed as one `changes:` line; another epoch, no file or an unreadable
/// one: a full `Snapshot`, printed as one `snapshot:` line — and prints live
/// `Notify`s after it, skipping those the catch-up covered. After each
/// printed line it saves `(epoch, txn)` (temporary file, then rename). It
/// does the same when the service's owner changes (ordod restarted) or the
/// connection is made again, and when a `Notify`'s txn jumps past the last
/// one and `Changes` shows that something it should have seen in between
/// was missed (a `Notify` dropped by the bus daemon).
final class ResumingWatch {
  let o: ResumeOptions
  private var client: OrdoClient?
  private var saved: WatchPosition?
  /// The epoch of the service now and the last transaction printed.
  private var epoch: String?
  private var last: UInt64 = 0
  private var pending: [RemoteNotification] = []
  private var needSync = true
  private var printed = 0
  private let tempPath: String

  /// The owner of the service's name the watch registered with.
  private var syncedOwner: String?
  private var registeredPath: String?

  init(_ o: ResumeOptions, client: OrdoClient) {
    self.o = o
    self.client = client
    tempPath = o.file + ".tmp"
    saved = Self.load(o.file)
    // The watch registers again and catches up itself (its position file).
    client.reconnect = false
    client.onOwnerChange = { [unowned self] owner in self.ownerChanged(owner) }
  }

  private static func warn(_ s: String) {
    let line = "ordoctl: " + s + "\n"
    var copy = line
    copy.withUTF8 { _ = write(2, $0.baseAddress!, $0.count) }
  }

  /// The saved position, nil when there is none (or it cannot be read: a
  /// warning, then a full snapshot is the safe catch-up).
  private static func load(_ path: String) -> WatchPosition? {
    guard let f = fopen(path, "r") else {
      if errno != ENOENT { warn("cannot read the position file \(path): \(String(cString: strerror(errno))); starting from a full snapshot") }
      return nil
    }
    defer { fclose(f) }
    var bytes: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
      let n = fread(&buf, 1, buf.count, f)
      if n <= 0 { break }
      bytes += buf[0..<n]
      if bytes.count > 65536 { break }
    }
    guard let text = String(validating: bytes, as: UTF8.self), let p = WatchPosition(text: text) else {
      warn("the position file \(path) does not hold a position (\"epoch UUID\" and \"txn N\" lines); starting from a full snapshot")
      return nil
    }
    return p
  }

  /// Writes the position to the temporary file (made current by ``commitSave()``).
  private func prepareSave(_ p: WatchPosition) {
    let fd = open(tempPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { fail("cannot write the position file \(tempPath): \(String(cString: strerror(errno)))") }
    var text = p.text
    let ok = text.withUTF8 { b in write(fd, b.baseAddress!, b.count) == b.count }
    close(fd)
    guard ok else { fail("cannot write the position file \(tempPath): \(String(cString: strerror(errno)))") }
  }

  private func commitSave() {
    guard rename(tempPath, o.file) == 0 else { fail("cannot replace the position file \(o.file): \(String(cString: strerror(errno)))") }
  }

  /// Prints one line and saves the position after it. The new position is
  /// written to the temporary file before the line is printed and renamed
  /// over the file right after, so that a kill between the two can only
  /// repeat this one line at the next start, never lose one.
  private func emit(_ line: WatchLine) {
    guard let epoch else { return }
    let p = WatchPosition(epoch: epoch, transaction: line.transaction)
    prepareSave(p)
    out(line.render(json: o.json))
    commitSave()
    last = line.transaction
    saved = p
    printed += 1
    if o.count > 0 && printed >= o.count {
      unlink(tempPath)
      exit(0)
    }
  }

  /// Saves a position reached without printing (an empty catch-up).
  private func advance(to txn: UInt64) {
    last = txn
    guard let epoch else { return }
    let p = WatchPosition(epoch: epoch, transaction: txn)
    guard p != saved else { return }
    prepareSave(p)
    commitSave()
    saved = p
  }

  private static func nowMs() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
  }

  private func deadline() -> Int64 { o.reconnectTimeoutMs > 0 ? Self.nowMs() + o.reconnectTimeoutMs : Int64.max }

  /// Connects (again), registers and catches up, retrying while the bus or
  /// the service is away, until the reconnect timeout.
  private func connectAndSync() {
    let until = deadline()
    var reported = false
    while !stopRequested() {
      do {
        try syncOnce()
        if reported { Self.warn("\(o.service) is back (epoch \(epoch ?? "?")): resumed") }
        return
      } catch {
        if Self.nowMs() >= until {
          fail("\(o.service) did not come back within \(o.reconnectTimeoutMs / 1000) s: \(error.description)")
        }
        if !reported {
          Self.warn("waiting for \(o.service): \(error.description)")
          reported = true
        }
        usleep(100_000)
      }
    }
  }

  /// Whether the connection was lost once (later connections drop the guid).
  private var reconnecting = false

  /// The service left or another process took its name: its contract is
  /// gone; register again and catch up.
  private func ownerChanged(_ owner: String?) {
    if owner == nil || owner != syncedOwner { needSync = true }
  }

  private func syncOnce() throws(OrdoRemoteError) {
    if client?.isConnected != true {
      if client != nil { reconnecting = true }
      client?.close()
      client = nil
      registeredPath = nil
      // Again after a loss: the bus daemon (or direct socket) at that
      // address is a new one, with a new guid, so a guid in the address
      // would refuse it.
      let implicit = o.direct || getenv(ordoAddressVariable) != nil ? nil : getenv("DBUS_SESSION_BUS_ADDRESS").map { String(cString: $0) }
      let again = reconnecting ? (o.address ?? implicit).map(addressWithoutGUID) : o.address
      let c = try connect(address: again, direct: o.direct, service: o.service, timeoutMs: o.timeoutMs)
      c.reconnect = false
      c.onOwnerChange = { [unowned self] owner in self.ownerChanged(owner) }
      client = c
    }
    guard let c = client else { return }
    if let path = registeredPath, c.serviceOwner != nil, c.serviceOwner == syncedOwner {
      // A catch-up that failed after registering, with the same service:
      // its contract is still there.
      try? c.unregister(path)
    }
    registeredPath = nil
    pending.removeAll()
    // Register first: every transaction after the catch-up read is then
    // notified; those it covered are skipped by their txn.
    registeredPath = try c.register(name: o.contractName, reads: o.patterns, priority: o.priority) { [unowned self] note in
      self.pending.append(note)
    }
    needSync = false
    syncedOwner = c.serviceOwner
    let now = try c.epoch
    if let s = saved, s.epoch == now {
      epoch = now
      last = s.transaction
      do {
        let ch = try c.changes(since: s.transaction, patterns: o.patterns)
        if ch.values.isEmpty && ch.removed.isEmpty { advance(to: ch.transaction) } else { emit(.changes(ch, epoch: now)) }
        return
      } catch where error.code == .invalidArgument {
        // The saved txn is past this bus's history: another history.
      }
    }
    epoch = now
    let s = try c.snapshot(o.patterns)
    emit(.snapshot(values: s.values, counters: s.counters, transaction: s.transaction, epoch: now))
  }

  /// A live Notify: skipped when a catch-up covered it; when its txn jumps
  /// past the last one, `Changes` since the last one tells whether anything
  /// matching changed in between that it does not carry (a dropped Notify).
  private func accept(_ note: RemoteNotification) throws(OrdoRemoteError) {
    guard note.transaction > last else { return }
    if note.transaction > last + 1, let c = client {
      let ch = try c.changes(since: last, patterns: o.patterns)
      let keys = Set(ch.values.keys).union(ch.removed)
      if ch.transaction != note.transaction || !keys.isSubset(of: note.changed) {
        if keys.isEmpty { advance(to: ch.transaction) } else { emit(.changes(ch, epoch: epoch ?? "")) }
        return
      }
    }
    emit(.notify(note))
  }

  func run() -> Never {
    // A position that cannot be saved is found now, before a line is printed.
    var st = stat()
    if stat(o.file, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR {
      fail("--resume \(o.file) is a directory: name a file to keep the position in", code: 2)
    }
    let probe = open(tempPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
    guard probe >= 0 else { fail("cannot write the position file \(tempPath): \(String(cString: strerror(errno)))") }
    close(probe)
    installStopHandlers()
    while !stopRequested() {
      if needSync || client?.isConnected != true { connectAndSync() }
      guard let c = client else { continue }
      if !c.process(timeoutMs: 200) {
        Self.warn("the connection to the bus closed; reconnecting")
        needSync = true
        continue
      }
      if needSync {
        // The owner changed: what was pending came from the old one.
        pending.removeAll()
        continue
      }
      let notes = pending
      pending.removeAll()
      for n in notes {
        do { try accept(n) } catch {
          // The service went away while we asked: resume when it is back.
          needSync = true
          break
        }
      }
    }
    unlink(tempPath)
    client?.close()
    exit(0)
  }
}
