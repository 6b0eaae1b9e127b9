import CSQLite
import Ordo

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One transaction as the commit log holds it.
struct LoggedTransaction: Sendable {
  let transaction: UInt64
  let changes: [StoredKeypath]
}

/// The commit log of a state file (`PATH-log`, docs/storage.md "The commit
/// log"): where a group of transactions becomes durable — one `pwrite` of
/// its records and one `fdatasync` — before the database has it. The
/// transactions go into the SQLite database afterwards, without a sync of
/// their own (`StateFile.applyLog()`); a crash in between loses nothing, as
/// opening the state file applies the log's records the database lacks.
///
/// Layout: two header slots (offsets 0 and 512; the one with the larger
/// cycle number and a valid checksum is current, so that rewriting one
/// never leaves no valid header), then records from offset 4 096, each
/// 8-byte aligned: `u32 length, u32 0, u64 transaction, u64 checksum`, then
/// `length` bytes of changes. The checksum is FNV-1a 64 over the record's
/// first 16 bytes and its changes, started from the previous record's
/// checksum (the first record's: the cycle's random seed), so a record is
/// valid only after the records written before it in the same cycle: the
/// scan stops at the first record that is torn, zeroed, from an earlier
/// cycle, or left behind a shorter record written over its start.
///
/// The header's version is the log's layout; the changes' encoding follows
/// the state's format version (`StateFile.formatVersion`), and `open`
/// refuses a database of a newer one before it reads the log.
///
/// A reset (a new cycle: new seed, the other header slot) happens only
/// once the database holds every record durably; records then start again
/// at 4 096, overwriting the old ones in place. The file is written to its
/// working size when it is made, so that a sync rewrites allocated blocks
/// (as the WAL, `StateFile.preallocateWAL`).
///
/// A group is written as the whole 4 KiB pages it touches: the bytes of
/// the current page before it (kept in memory), its records, zeros to the
/// next page boundary. A write of part of a page that is not in the page
/// cache makes the kernel read that page from the disk first, inside the
/// `pwrite` of a `Commit` that waits; written whole, a page is never read.
final class CommitLog {
  static let slotSize = 512
  static let recordsStart: Int64 = 4096
  /// Written to this size at creation; a reset comes once records reach
  /// `resetAt`, so the appends rarely grow the file.
  static let workingSize: Int64 = 1 << 20
  static let resetAt: Int64 = 768 << 10
  static let magic: UInt64 = 0x3147_4F4C_4F44_524F  // "ORDOLOG1" in little-endian bytes
  static let version: UInt32 = 1
  static let headerBytes = 48
  static let recordHeader = 24
  /// The most bytes of changes one record holds (a transaction with more
  /// is refused by `StateFile.append`; D-Bus carries at most 128 MiB in a
  /// message). A record claiming more is damage.
  static let maxRecord = 256 << 20

  /// The state file's path (errors name it) and the log's (`PATH-log`).
  let statePath: String
  let path: String
  private(set) var fd: Int32
  private var cycle: UInt64
  private var slot: Int
  private var seed: UInt64
  private var epochHash: UInt64
  /// Where the next record goes; the chain value of the last durable one.
  private(set) var end: Int64
  private var chain: UInt64
  /// Records added since the last `write()`.
  private var pending: [UInt8] = []
  private var pendingChain: UInt64
  /// The bytes of the page `end` is in, from the page's start to `end`
  /// (what a write puts back before the group's records).
  private var page: [UInt8] = []
  /// The buffer a write assembles its pages in (kept between writes).
  private var pages: [UInt8] = []
  /// The unit the log is written in: the page cache's page (and the file
  /// system's block). Not the database's page (`StateFile.pageSize`).
  static let blockSize = 4096

  var hasPending: Bool { !pending.isEmpty }
  var needsReset: Bool { end >= CommitLog.resetAt }

  private init(statePath: String, fd: Int32, cycle: UInt64, slot: Int, seed: UInt64, epochHash: UInt64, end: Int64, chain: UInt64) {
    self.statePath = statePath
    self.path = statePath + "-log"
    self.fd = fd
    self.cycle = cycle
    self.slot = slot
    self.seed = seed
    self.epochHash = epochHash
    self.end = end
    self.chain = chain
    self.pendingChain = chain
  }

  /// What `open` found.
  struct Opened {
    let log: CommitLog
    /// The records of the current cycle, in order.
    let records: [LoggedTransaction]
    /// Whether the header names another epoch than `epoch`.
    let otherEpoch: Bool
  }

  /// The hash of an epoch that a header names.
  static func hash(epoch: String) -> UInt64 { fnv(fnvBasis, epoch.utf8) }

  /// Opens (or makes) the log of the state file at `statePath`, whose epoch
  /// is `epoch`, and reads the current cycle's valid records. With `roomy`
  /// a log short of its working size is written to it.
  static func open(statePath: String, epoch: String, roomy: Bool) throws(StoreError) -> Opened {
    let path = statePath + "-log"
    func fail(_ kind: StoreError.Kind, _ problem: String) -> StoreError { .stateFile(statePath, kind, problem) }
    let name = "the commit log \(path)"
    let fd = ordo_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    if fd < 0 { throw fail(.storage, "cannot open \(name): \(String(cString: strerror(ordo_errno())))") }
    /// Closes the log's descriptor and gives the error to throw.
    func closing(_ kind: StoreError.Kind, _ problem: String) -> StoreError {
      Glibc.close(fd)
      return fail(kind, problem)
    }
    var st = stat()
    if fstat(fd, &st) != 0 { throw closing(.storage, "cannot read \(name): \(String(cString: strerror(ordo_errno())))") }
    let size = Int64(st.st_size)
    let hash = hash(epoch: epoch)
    var headers: [(cycle: UInt64, seed: UInt64, epoch: UInt64, slot: Int)] = []
    var sawBytes = false
    if size >= recordsStart {
      var block = [UInt8](repeating: 0, count: Int(recordsStart))
      if !readFully(fd, &block, at: 0) {
        throw closing(.storage, "cannot read \(name): \(String(cString: strerror(ordo_errno())))")
      }
      sawBytes = block[0..<(2 * slotSize)].contains { $0 != 0 }
      for s in 0..<2 {
        if let h = parseHeader(block, at: s * slotSize) { headers.append((h.cycle, h.seed, h.epoch, s)) }
      }
    } else if size > 0 {
      var bytes = [UInt8](repeating: 0, count: Int(size))
      _ = readFully(fd, &bytes, at: 0)
      sawBytes = bytes.contains { $0 != 0 }
    }
    if headers.isEmpty {
      if sawBytes {
        throw closing(.corrupt, "is damaged: \(name) has no valid header (not an Ordo commit log, or damaged); refusing to use it")
      }
      // A new log (or one that was never given a header).
      let log = CommitLog(statePath: statePath, fd: fd, cycle: 0, slot: 1, seed: 0, epochHash: hash, end: recordsStart, chain: 0)
      if roomy { log.preallocate(from: size) }
      do throws(StoreError) {
        try log.reset()
      } catch {
        log.close()
        throw error
      }
      syncDirectory(of: path)
      return Opened(log: log, records: [], otherEpoch: false)
    }
    let h = headers.max { $0.cycle < $1.cycle }!
    let log = CommitLog(
      statePath: statePath, fd: fd, cycle: h.cycle, slot: h.slot, seed: h.seed, epochHash: h.epoch, end: recordsStart,
      chain: h.seed)
    let records: [LoggedTransaction]
    do throws(StoreError) {
      records = try log.scan(size: size)
    } catch {
      log.close()
      throw error
    }
    if roomy && size < workingSize { log.preallocate(from: size) }
    return Opened(log: log, records: records, otherEpoch: h.epoch != hash)
  }

  /// Reads the records of the current cycle from `recordsStart` on; leaves
  /// `end` and `chain` after the last valid one.
  private func scan(size: Int64) throws(StoreError) -> [LoggedTransaction] {
    var out: [LoggedTransaction] = []
    var offset = CommitLog.recordsStart
    var c = seed
    var head = [UInt8](repeating: 0, count: CommitLog.recordHeader)
    while offset + Int64(CommitLog.recordHeader) <= size {
      guard CommitLog.readFully(fd, &head, at: offset) else { break }
      let length = Int(load32(head, 0))
      guard length > 0, length <= CommitLog.maxRecord, load32(head, 4) == 0,
        offset + Int64(CommitLog.recordHeader + length) <= size
      else { break }
      var body = [UInt8](repeating: 0, count: length)
      guard CommitLog.readFully(fd, &body, at: offset + Int64(CommitLog.recordHeader)) else { break }
      let sum = CommitLog.fnv(CommitLog.fnv(c, head[0..<16]), body)
      guard sum == load64(head, 16) else { break }
      let txn = load64(head, 8)
      guard let changes = CommitLog.decode(body) else {
        throw .stateFile(
          statePath, .corrupt, "is damaged: the commit log \(path) holds transaction \(txn) in a form this ordod cannot read")
      }
      out.append(LoggedTransaction(transaction: txn, changes: changes))
      c = sum
      offset += Int64(CommitLog.padded(CommitLog.recordHeader + length))
    }
    end = offset
    chain = c
    pendingChain = c
    page = [UInt8](repeating: 0, count: Int(end % Int64(CommitLog.blockSize)))
    if !page.isEmpty && !CommitLog.readFully(fd, &page, at: end - Int64(page.count)) {
      throw .stateFile(
        statePath, .storage, "cannot read the commit log \(path): \(String(cString: strerror(ordo_errno())))")
    }
    return out
  }

  // MARK: Writing

  /// Adds one transaction's record to the pending group, encoded in place
  /// (its length and checksum filled in once the changes are there).
  func add(transaction: UInt64, changes: [StoredKeypath]) {
    let start = pending.count
    put32(&pending, 0)
    put32(&pending, 0)
    put64(&pending, transaction)
    put64(&pending, 0)
    let body = pending.count
    CommitLog.encode(changes, into: &pending)
    let length = pending.count - body
    // What StateFile.validate measures is what is written (debug builds).
    assert(length == CommitLog.recordSize(changes), "CommitLog.recordSize disagrees with encode")
    store32(&pending, start, UInt32(length))
    let sum = CommitLog.fnv(CommitLog.fnv(pendingChain, pending[start..<(start + 16)]), pending[body...])
    store64(&pending, start + 16, sum)
    while pending.count % 8 != 0 { pending.append(0) }
    pendingChain = sum
  }

  /// Makes the pending group durable: one `pwrite` of the whole pages it
  /// touches (from the start of `end`'s page: the bytes before `end`, the
  /// records, zeros to the next page boundary), one `fdatasync`. Returns
  /// the system's reason when that fails: then the group is dropped, and
  /// what was written is zeroed from `end` to the page boundary (best
  /// effort) so that a later scan cannot take records the caller was told
  /// are lost; the next group goes to the same place.
  func write() -> String? {
    guard !pending.isEmpty else { return nil }
    let start = end - Int64(page.count)
    assemble(with: pending)
    let problem: String? = pages.withUnsafeBytes { b -> String? in
      if let e = CommitLog.writeFully(fd, b, at: start) {
        return String(cString: strerror(e)) + (e == ENOSPC ? " (the disk is full)" : "")
      }
      return fdatasync(fd) == 0 ? nil : String(cString: strerror(ordo_errno()))
    }
    if let problem {
      assemble(with: [])
      _ = pages.withUnsafeBytes { CommitLog.writeFully(fd, $0, at: start) }
      drop()
      return problem
    }
    let written = page.count + pending.count
    end += Int64(pending.count)
    chain = pendingChain
    page.removeAll(keepingCapacity: true)
    page.append(contentsOf: pages[(written / CommitLog.blockSize * CommitLog.blockSize)..<written])
    CommitLog.empty(&pages)
    CommitLog.empty(&pending)
    return nil
  }

  /// The buffers keep their memory for the next group up to this size; a
  /// large transaction's is given back once it is written.
  static let keptCapacity = 1 << 20

  static func empty(_ buffer: inout [UInt8]) {
    buffer.removeAll(keepingCapacity: buffer.capacity <= keptCapacity)
  }

  /// `pages` = the current page's bytes before `end`, then `records`, then
  /// zeros to a page boundary (at least one page).
  private func assemble(with records: [UInt8]) {
    pages.removeAll(keepingCapacity: true)
    pages.append(contentsOf: page)
    pages.append(contentsOf: records)
    let size = max(CommitLog.blockSize, (pages.count + CommitLog.blockSize - 1) / CommitLog.blockSize * CommitLog.blockSize)
    pages.append(contentsOf: repeatElement(0, count: size - pages.count))
  }

  /// Drops the pending group.
  func drop() {
    CommitLog.empty(&pending)
    pendingChain = chain
  }

  /// Starts a new cycle in the other header slot (the caller has made the
  /// database hold every record durably): the records written so far are
  /// no longer valid, the next one goes to `recordsStart`. With `epoch`
  /// the new header names that epoch (a log left by another state).
  func reset(epoch: String? = nil) throws(StoreError) {
    precondition(pending.isEmpty, "a commit log reset with a group pending")
    var g = SystemRandomNumberGenerator()
    let newSeed = g.next() as UInt64
    let newSlot = 1 - slot
    let e = epoch.map(CommitLog.hash(epoch:)) ?? epochHash
    var h: [UInt8] = []
    put64(&h, CommitLog.magic)
    put32(&h, CommitLog.version)
    put32(&h, 0)
    put64(&h, cycle + 1)
    put64(&h, newSeed)
    put64(&h, e)
    put64(&h, CommitLog.fnv(CommitLog.fnvBasis, h))
    let failed = h.withUnsafeBytes { CommitLog.writeFully(fd, $0, at: Int64(newSlot * CommitLog.slotSize)) }
    if failed != nil || fdatasync(fd) != 0 {
      let e = failed ?? ordo_errno()
      throw .stateFile(statePath, .storage, "cannot write the commit log \(path): \(String(cString: strerror(e)))")
    }
    cycle += 1
    slot = newSlot
    seed = newSeed
    epochHash = e
    end = CommitLog.recordsStart
    chain = newSeed
    pendingChain = newSeed
    page.removeAll(keepingCapacity: true)
  }

  func close() {
    if fd >= 0 { Glibc.close(fd) }
    fd = -1
  }

  /// Zeros up to the working size, synced (best effort; see `open`).
  private func preallocate(from size: Int64) {
    guard size < CommitLog.workingSize else { return }
    let zeros = [UInt8](repeating: 0, count: 64 << 10)
    var offset = size
    while offset < CommitLog.workingSize {
      let n = Int(min(Int64(zeros.count), CommitLog.workingSize - offset))
      if zeros.withUnsafeBytes({ CommitLog.writeFully(fd, UnsafeRawBufferPointer(rebasing: $0[..<n]), at: offset) }) != nil {
        _ = ftruncate(fd, off_t(size))
        return
      }
      offset += Int64(n)
    }
    if fdatasync(fd) != 0 { _ = ftruncate(fd, off_t(size)) }
  }

  // MARK: Encoding

  static func padded(_ n: Int) -> Int { (n + 7) & ~7 }

  static let fnvBasis: UInt64 = 0xcbf2_9ce4_8422_2325

  static func fnv<C: Collection<UInt8>>(_ start: UInt64, _ bytes: C) -> UInt64 {
    var h = start
    for b in bytes { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }
    return h
  }

  private static func parseHeader(_ b: [UInt8], at o: Int) -> (cycle: UInt64, seed: UInt64, epoch: UInt64)? {
    let h = Array(b[o..<(o + headerBytes)])
    guard load64(h, 0) == magic, load32(h, 8) == version, load32(h, 12) == 0,
      fnv(fnvBasis, h[0..<40]) == load64(h, 40)
    else { return nil }
    return (load64(h, 16), load64(h, 24), load64(h, 32))
  }

  /// The bit of a change's type byte that marks its value owned. Records
  /// of a version 1 state never set it, so they read the same.
  static let ownedBit: UInt8 = 0x80

  /// `u32 count`, then per change: `u32 length` and the keypath's UTF-8,
  /// `u8 type` (0 none, 1 bool, 2 int64, 3 double, 4 string, 5 bytes; with
  /// `ownedBit` set when the value is owned) and the value (`u8`; 8 bytes;
  /// the double's bits; `u32 length` and bytes), `u64 counter`,
  /// `u64 changed-at`. Little-endian.
  static func encode(_ changes: [StoredKeypath], into out: inout [UInt8]) {
    put32(&out, UInt32(changes.count))
    for c in changes {
      var k = c.keypath
      k.withUTF8 { u in
        put32(&out, UInt32(u.count))
        out.append(contentsOf: u)
      }
      let owned = c.owned ? ownedBit : 0
      switch c.value {
      case .none: out.append(0)
      case .bool(let b)?:
        out.append(1 | owned)
        out.append(b ? 1 : 0)
      case .int64(let i)?:
        out.append(2 | owned)
        put64(&out, UInt64(bitPattern: i))
      case .double(let d)?:
        out.append(3 | owned)
        put64(&out, d.bitPattern)
      case .string(let s)?:
        out.append(4 | owned)
        var s = s
        s.withUTF8 { u in
          put32(&out, UInt32(u.count))
          out.append(contentsOf: u)
        }
      case .bytes(let b)?:
        out.append(5 | owned)
        put32(&out, UInt32(b.count))
        out.append(contentsOf: b)
      }
      put64(&out, c.counter)
      put64(&out, c.changedAt)
    }
  }

  /// The bytes `encode` writes for `changes`.
  static func recordSize(_ changes: [StoredKeypath]) -> Int {
    var n = 4
    for c in changes {
      n += 4 + c.keypath.utf8.count + 1 + 16
      switch c.value {
      case .none: break
      case .bool?: n += 1
      case .int64?, .double?: n += 8
      case .string(let s)?: n += 4 + s.utf8.count
      case .bytes(let b)?: n += 4 + b.count
      }
    }
    return n
  }

  /// The changes of a record, or nil when its bytes do not decode.
  static func decode(_ b: [UInt8]) -> [StoredKeypath]? {
    var i = 0
    func need(_ n: Int) -> Bool { n >= 0 && i + n <= b.count }
    func u32() -> Int? {
      guard need(4) else { return nil }
      defer { i += 4 }
      return Int(load32(b, i))
    }
    func u64() -> UInt64? {
      guard need(8) else { return nil }
      defer { i += 8 }
      return load64(b, i)
    }
    func bytes(_ n: Int) -> [UInt8]? {
      guard need(n) else { return nil }
      defer { i += n }
      return Array(b[i..<(i + n)])
    }
    guard let count = u32() else { return nil }
    var out: [StoredKeypath] = []
    for _ in 0..<count {
      guard let kl = u32(), let kb = bytes(kl), let keypath = String(validating: kb, as: UTF8.self), need(1) else {
        return nil
      }
      let type = b[i] & ~ownedBit, owned = b[i] & ownedBit != 0
      i += 1
      let value: Value?
      switch type {
      case 0:
        // A tombstone is never owned.
        guard !owned else { return nil }
        value = nil
      case 1:
        guard need(1), b[i] <= 1 else { return nil }
        value = .bool(b[i] == 1)
        i += 1
      case 2:
        guard let v = u64() else { return nil }
        value = .int64(Int64(bitPattern: v))
      case 3:
        guard let v = u64() else { return nil }
        value = .double(Double(bitPattern: v))
      case 4:
        guard let n = u32(), let sb = bytes(n), let s = String(validating: sb, as: UTF8.self) else { return nil }
        value = .string(s)
      case 5:
        guard let n = u32(), let v = bytes(n) else { return nil }
        value = .bytes(v)
      default: return nil
      }
      guard let counter = u64(), let changedAt = u64() else { return nil }
      out.append(StoredKeypath(keypath: keypath, value: value, counter: counter, changedAt: changedAt, owned: owned))
    }
    return i == b.count ? out : nil
  }

  /// Writes all of `bytes` at `offset`, again after a short write or an
  /// interrupted one; returns the errno of a failure (`ENOSPC` when the
  /// system writes nothing), nil when all went.
  static func writeFully(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Int32? {
    var done = 0
    while done < bytes.count {
      let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
      if n < 0 {
        let e = ordo_errno()
        if e == EINTR { continue }
        return e
      }
      if n == 0 { return ENOSPC }
      done += n
    }
    return nil
  }

  /// Reads `buf.count` bytes at `offset`; false when the file ends first or
  /// a read fails.
  static func readFully(_ fd: Int32, _ buf: inout [UInt8], at offset: Int64) -> Bool {
    let want = buf.count
    return buf.withUnsafeMutableBytes { p -> Bool in
      var done = 0
      while done < want {
        let n = pread(fd, p.baseAddress! + done, want - done, off_t(offset) + off_t(done))
        if n < 0 && ordo_errno() == EINTR { continue }
        if n <= 0 { return false }
        done += n
      }
      return true
    }
  }
}

private func put32(_ out: inout [UInt8], _ v: UInt32) {
  withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
}

private func put64(_ out: inout [UInt8], _ v: UInt64) {
  withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
}

private func store32(_ out: inout [UInt8], _ at: Int, _ v: UInt32) {
  for k in 0..<4 { out[at + k] = UInt8(truncatingIfNeeded: v >> (8 * k)) }
}

private func store64(_ out: inout [UInt8], _ at: Int, _ v: UInt64) {
  for k in 0..<8 { out[at + k] = UInt8(truncatingIfNeeded: v >> (8 * k)) }
}

private func load32(_ b: [UInt8], _ o: Int) -> UInt32 {
  var v: UInt32 = 0
  for k in 0..<4 { v |= UInt32(b[o + k]) << (8 * k) }
  return v
}

private func load64(_ b: [UInt8], _ o: Int) -> UInt64 {
  var v: UInt64 = 0
  for k in 0..<8 { v |= UInt64(b[o + k]) << (8 * k) }
  return v
}

/// Makes a new file's directory entry durable.
func syncDirectory(of path: String) {
  var dir = path
  if let slash = dir.lastIndex(of: "/") {
    dir = slash == dir.startIndex ? "/" : String(dir[..<slash])
  } else {
    dir = "."
  }
  let fd = ordo_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
  if fd >= 0 {
    fsync(fd)
    Glibc.close(fd)
  }
}
