import CSQLite
import Ordo
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A durable Ordo state file: an SQLite database in WAL mode holding the
/// epoch, the last transaction id and every keypath's value, counter,
/// changed-at and ownership (SPEC §10, §11, §15; the format is in
/// docs/storage.md).
///
/// Writing is group commit: `append(transaction:changes:)` adds one
/// transaction's changed keypaths to the open group (an SQLite transaction),
/// `sync()` makes the whole group durable with one `COMMIT` (one `fsync`
/// with `SyncMode.full`), `discard()` drops it. When an append or a sync
/// fails, the whole open group is dropped and the file stays as it was at
/// the last successful sync; the state file remains usable.
///
/// One process at a time: `open` takes an exclusive `flock` on the database
/// file for as long as the state file is open, and refuses a file another
/// process holds. The methods are thread-safe (one lock around the
/// connection); `close()`, or the last reference going away, releases it.
public final class StateFile: Sendable {
  /// The format version this build writes (`PRAGMA user_version` and the
  /// `format` row of `meta`). Version 2 stores whether a value is owned;
  /// `open` upgrades a version 1 file in place (docs/storage.md).
  public static let formatVersion: Int64 = 2
  /// `PRAGMA application_id` of an Ordo state file: "ORDO" in ASCII.
  public static let applicationID: Int32 = 0x4F52_444F
  /// The database page size of a state file this build creates (`PRAGMA
  /// page_size`; a file keeps the size it was created with, and any size
  /// opens). 1 KiB rather than SQLite's 4 KiB: a transaction changes a
  /// few rows, and every page it touches is written whole to the WAL and
  /// copied at the next checkpoint, so smaller pages write a quarter of
  /// the bytes (docs/storage.md, "Page size").
  public static let pageSize = 1024

  /// The path the state file was opened with.
  public let path: String
  /// The sync setting.
  public let syncMode: SyncMode
  /// The epoch: a UUID string made when the file was created.
  public let epoch: String
  /// Whether `open` created the file (a new epoch) rather than loading one.
  public let created: Bool

  private let inner: Locked<Connection>

  private init(path: String, syncMode: SyncMode, epoch: String, created: Bool, connection: consuming sending Connection) {
    self.path = path
    self.syncMode = syncMode
    self.epoch = epoch
    self.created = created
    self.inner = Locked(connection)
  }

  deinit {
    inner.withLock { $0.close() }
  }

  /// Opens the state file at `path`, creating it (with a new epoch) when it
  /// does not exist or is empty, and checks it: a file another process
  /// holds, a file that is not an SQLite database or is damaged, a database
  /// of another application, a file of a future format version, or rows
  /// that break the format's rules are refused with a `StoreError` naming
  /// the file and the problem. An existing state is never replaced. A file
  /// of an earlier format version is upgraded once its rows are checked.
  ///
  /// The whole state is read and checked here; `load()` hands it over.
  ///
  /// With `commitLog` (and `SyncMode.full`), a group becomes durable in the
  /// state's commit log (`PATH-log`: one write and one `fdatasync`) and
  /// goes into the database later, at `applyLog()`, without a sync of its
  /// own (docs/storage.md, "The commit log"); opening applies what the log
  /// holds and the database lacks. `ordod --state` works this way.
  public static func open(path: String, sync: SyncMode = .full, commitLog: Bool = false) throws(StoreError)
    -> StateFile
  {
    let logMode = commitLog && sync == .full
    var c = try Connection.open(path: path, sync: sync, commitLog: logMode)
    do {
      var state = try c.read()
      // A log left by an earlier open with one is applied in any case.
      if logMode || access(path + "-log", F_OK) == 0 {
        if try c.openLog(state, keep: logMode) { state = try c.read() }
      }
      c.initial = state
      return StateFile(path: path, syncMode: sync, epoch: state.epoch, created: c.created, connection: c)
    } catch {
      c.close()
      throw error
    }
  }

  /// The durable state: the epoch, the last synced transaction id and every
  /// stored keypath (tombstones included), sorted by keypath. The first
  /// call returns what `open` read and checked; later calls read the file
  /// again. Refused (`invalidArgument`) while a group is open: `sync()` or
  /// `discard()` it first.
  public func load() throws(StoreError) -> StoredState {
    try inner.withLock { (c: inout Connection) throws(StoreError) -> StoredState in
      try c.usable()
      if c.groupOpen {
        throw c.error(.invalidArgument, "cannot load while transactions \(c.groupRange) are appended but not synced")
      }
      if !c.unapplied.isEmpty {
        // Durable in the log, not yet in the database: write them there,
        // or, when the database cannot take them now (a full disk), lay
        // them over what it holds.
        if (try? c.applyLog()) == nil {
          c.initial = nil
          return try c.readWithLog()
        }
      }
      if let state = c.initial {
        c.initial = nil
        return state
      }
      return try c.read()
    }
  }

  /// The id of the last transaction made durable by `sync()` (or read at
  /// `open`).
  public var lastSyncedTransaction: UInt64 {
    inner.withLock { $0.lastSynced }
  }

  /// The id of the last transaction appended to the open group, or
  /// `lastSyncedTransaction` when no group is open.
  public var lastAppendedTransaction: UInt64 {
    inner.withLock { $0.lastAppended }
  }

  /// Adds one transaction's changed keypaths to the open group (opening
  /// one if needed). `transaction` must be greater than every id appended
  /// or stored before; each change must name a valid keypath once, with
  /// `1 ≤ counter ≤ changedAt ≤ transaction`, and a tombstone is not owned.
  /// A change may keep its counter and changed-at and change only whether
  /// the value is owned. `changes` may be empty (a transaction whose pass
  /// cancelled every change keeps its id).
  ///
  /// Invalid input throws `invalidArgument` and changes nothing (the open
  /// group stays as it was). A storage failure throws `storage` and drops
  /// the whole open group: the file stays as it was at the last sync.
  public func append(transaction: UInt64, changes: [StoredKeypath]) throws(StoreError) {
    try inner.withLock { (c: inout Connection) throws(StoreError) in
      try c.usable()
      try c.validate(transaction: transaction, changes: changes)
      try c.append(transaction: transaction, changes: changes)
    }
  }

  /// Makes the open group durable with one SQLite `COMMIT` and returns the
  /// last durable transaction id. Without an open group it does nothing.
  /// On failure it throws `storage`, drops the group, and the file stays as
  /// it was at the last successful sync; later appends and syncs work again
  /// once the cause is gone (space freed).
  @discardableResult
  public func sync() throws(StoreError) -> UInt64 {
    try inner.withLock { (c: inout Connection) throws(StoreError) -> UInt64 in
      try c.usable()
      try c.commit()
      return c.lastSynced
    }
  }

  /// Whether groups become durable in the commit log (see `open`).
  public var usesCommitLog: Bool { inner.withLock { $0.log != nil } }

  /// Moves the transactions made durable in the commit log into the
  /// database, with no sync of their own (a crash before the database has
  /// them loses nothing: opening the state file applies them again), and
  /// starts the log anew once it has grown past its working size and the
  /// database holds every record durably. Without a commit log, or with
  /// nothing to apply, it does nothing. A storage failure throws `storage`;
  /// the transactions stay durable in the log and the next call tries
  /// again.
  public func applyLog() throws(StoreError) {
    try inner.withLock { (c: inout Connection) throws(StoreError) in
      try c.usable()
      try c.applyLog()
    }
  }

  /// Drops the open group (nothing of it reaches the file).
  public func discard() {
    inner.withLock { c in
      if c.db != nil { c.rollback() }
    }
  }

  /// Closes the database and releases the lock. An open group is dropped.
  /// Every later call throws `closed`.
  public func close() {
    inner.withLock { $0.close() }
  }
}

// MARK: - The connection

/// The SQLite connection, the lock and the group bookkeeping. Used only
/// under `StateFile.inner`'s lock.
struct Connection: ~Copyable {
  let path: String
  var db: OpaquePointer?
  var lockFD: Int32
  var created = false
  /// The database's format version (`PRAGMA user_version`).
  var format = StateFile.formatVersion
  var upsert: OpaquePointer?
  var setLast: OpaquePointer?
  // BEGIN IMMEDIATE and COMMIT, prepared once rather than parsed again at
  // every group (sqlite3_exec prepares, steps and finalizes each time).
  var begin: OpaquePointer?
  var commitGroup: OpaquePointer?
  var groupOpen = false
  var groupFirst: UInt64 = 0
  var lastSynced: UInt64 = 0
  var lastAppended: UInt64 = 0
  var initial: StoredState?
  /// The commit log, when groups become durable there (`StateFile.open`).
  var log: CommitLog?
  /// With a commit log: the transactions appended or durable in it that
  /// the database does not hold yet, in order.
  var unapplied: [LoggedTransaction] = []

  init(path: String, lockFD: Int32) {
    self.path = path
    self.lockFD = lockFD
  }

  var groupRange: String { groupFirst == lastAppended ? "\(groupFirst)" : "\(groupFirst)…\(lastAppended)" }

  func error(_ kind: StoreError.Kind, _ problem: String) -> StoreError {
    .stateFile(path, kind, problem)
  }

  /// SQLite's message for the last failure on `db`, with the system error
  /// behind an I/O failure when there is one.
  func reason(_ rc: Int32, osErrno: Int32 = 0) -> String {
    var text = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
    if let db, (rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_CANTOPEN
      || (rc & 0xff) == SQLITE_READONLY
    {
      // SQLite does not always keep the system error; the C errno of the
      // failed call is read right after it (`osErrno`).
      let e = sqlite3_system_errno(db) != 0 ? sqlite3_system_errno(db) : osErrno
      if e != 0 { text += " (\(String(cString: strerror(e))))" }
    }
    return text
  }

  func usable() throws(StoreError) {
    if db == nil { throw error(.closed, "closed") }
  }

  mutating func close() {
    if groupOpen { rollback() }
    if let log {
      // Best effort: the log keeps what the database does not get.
      if db != nil { try? applyLog(durably: true) }
      log.close()
      self.log = nil
    }
    sqlite3_finalize(upsert)
    sqlite3_finalize(setLast)
    sqlite3_finalize(begin)
    sqlite3_finalize(commitGroup)
    upsert = nil
    setLast = nil
    begin = nil
    commitGroup = nil
    if let db { sqlite3_close_v2(db) }
    db = nil
    // After SQLite has closed its descriptors (closing any descriptor of
    // the file drops the process's POSIX locks on it).
    // Unlocking acts on the open file description, so a copy of the
    // descriptor in a child process that is between fork and exec does not
    // keep the lock.
    if lockFD >= 0 {
      flock(lockFD, LOCK_UN)
      Glibc.close(lockFD)
    }
    lockFD = -1
    initial = nil
  }

  // MARK: Opening

  static func open(path: String, sync: SyncMode, commitLog: Bool) throws(StoreError) -> Connection {
    func fail(_ kind: StoreError.Kind, _ problem: String) -> StoreError { .stateFile(path, kind, problem) }
    if path.isEmpty { throw StoreError(.invalidArgument, path: path, message: "state file path is empty") }
    if path.utf8.contains(0) { throw fail(.invalidArgument, "the path contains a NUL byte") }

    var st = stat()
    let existed = stat(path, &st) == 0
    if existed && (st.st_mode & S_IFMT) != S_IFREG { throw fail(.storage, "not a regular file") }
    let fd = ordo_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    if fd < 0 {
      let e = ordo_errno()
      let what = existed ? "cannot open for writing" : "cannot create"
      throw fail(.storage, "\(what): \(String(cString: strerror(e)))")
    }
    // The database's -wal and -shm files, and the commit log, are made
    // beside it: say so when the directory does not allow it (SQLite
    // would only say "attempt to write a readonly database").
    let dir = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
    if access(dir, W_OK | X_OK) != 0 {
      let e = ordo_errno()
      _ = Glibc.close(fd)
      throw fail(.storage, "the directory \(dir) is not writable (\(String(cString: strerror(e)))): the state's -wal, -shm and -log files go beside it")
    }
    var c = Connection(path: path, lockFD: fd)
    if flock(fd, LOCK_EX | LOCK_NB) != 0 {
      let e = ordo_errno()
      c.close()
      if e == EWOULDBLOCK {
        throw fail(.locked, "locked by another ordod (another process has this state file open)")
      }
      throw fail(.storage, "cannot lock: \(String(cString: strerror(e)))")
    }
    do {
      try c.openDatabase(sync: sync, commitLog: commitLog)
    } catch {
      c.close()
      throw error
    }
    return c
  }

  private mutating func openDatabase(sync: SyncMode, commitLog: Bool) throws(StoreError) {
    var handle: OpaquePointer?
    let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
    db = handle
    if rc != SQLITE_OK { throw error(.storage, "cannot open the database: \(reason(rc))") }
    sqlite3_extended_result_codes(db, 1)
    sqlite3_busy_timeout(db, 0)

    // The first read of the header: fails for a file that is not a
    // database, and rolls back a creation that a crash interrupted (a hot
    // journal), leaving no pages.
    let pages = try pragmaInt("page_count", problem: "cannot read")
    if pages == 0 {
      // SQLite reads a file shorter than its header as an empty database:
      // only a file that is empty now (new, or a creation rolled back) is
      // made a state file; anything else in it is someone's data.
      var st = stat()
      if fstat(lockFD, &st) == 0, st.st_size > 0 {
        throw error(.corrupt, "is not an Ordo state file: \(st.st_size) bytes, too short for an SQLite database; refusing to replace it")
      }
      try create()
    } else {
      try check()
      if format < StateFile.formatVersion {
        // Only a file whose rows are all good is written to.
        _ = try read()
        try upgrade()
      }
    }
    let mode = try pragmaText("journal_mode = WAL", problem: "cannot switch to WAL mode")
    if mode.lowercased() != "wal" { throw error(.storage, "cannot switch to WAL mode (journal mode stays \(mode))") }
    // With the commit log, a group is durable once the log is synced; the
    // database gets it later and is synced when the log starts anew.
    try exec("PRAGMA synchronous = \(sync == .full && !commitLog ? "FULL" : "NORMAL")", problem: "cannot set the sync setting")
    // Keep the WAL from growing without bound after a large group, and
    // checkpoint when it has reached that size, not before.
    try exec("PRAGMA journal_size_limit = \(Connection.walSizeLimit)", problem: "cannot set the WAL size limit")
    let pageSize = try pragmaInt("page_size", problem: "cannot read")
    try exec(
      "PRAGMA wal_autocheckpoint = \(Connection.checkpointFrames(pageSize: pageSize))",
      problem: "cannot set the checkpoint interval")
    // A read opens the WAL file, which switching a new file to WAL mode
    // leaves for the next transaction.
    _ = try pragmaInt("page_count", problem: "cannot read")
    preallocateWAL()
    upsert = try prepare(
      "INSERT OR REPLACE INTO keypath(keypath, type, value, counter, changed_at, owned) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
    setLast = try prepare("UPDATE meta SET value = ?1 WHERE name = 'last_transaction'")
    begin = try prepare("BEGIN IMMEDIATE")
    commitGroup = try prepare("COMMIT")
  }

  /// Writes the schema, the epoch and the format version in one
  /// transaction (rollback journal: a crash leaves an empty file or a
  /// complete one), then syncs the directory entry.
  private mutating func create() throws(StoreError) {
    let epoch = makeUUID()
    // Before the first write: the page size of a database is fixed then.
    try exec("PRAGMA page_size = \(StateFile.pageSize)", problem: "cannot set the page size")
    try execSynced(
      """
      BEGIN IMMEDIATE;
      PRAGMA application_id = \(StateFile.applicationID);
      PRAGMA user_version = \(StateFile.formatVersion);
      CREATE TABLE meta(name TEXT PRIMARY KEY NOT NULL, value NOT NULL) WITHOUT ROWID;
      CREATE TABLE keypath(
        keypath TEXT PRIMARY KEY NOT NULL,
        type INTEGER NOT NULL,
        value,
        counter INTEGER NOT NULL,
        changed_at INTEGER NOT NULL,
        owned INTEGER NOT NULL DEFAULT 0
      ) WITHOUT ROWID;
      INSERT INTO meta(name, value) VALUES
        ('application', 'ordo'), ('format', \(StateFile.formatVersion)),
        ('epoch', '\(epoch)'), ('last_transaction', 0);
      COMMIT;
      """, problem: "cannot create the state")
    created = true
    syncDirectory(of: path)
  }

  /// Upgrades a file of an earlier format version to this build's in one
  /// synced SQLite transaction, so that a crash leaves it of the one
  /// version or the other. Version 1 lacks the column `owned` (no value of
  /// it is owned).
  private mutating func upgrade() throws(StoreError) {
    try execSynced(
      """
      BEGIN IMMEDIATE;
      ALTER TABLE keypath ADD COLUMN owned INTEGER NOT NULL DEFAULT 0;
      PRAGMA user_version = \(StateFile.formatVersion);
      UPDATE meta SET value = \(StateFile.formatVersion) WHERE name = 'format';
      COMMIT;
      """, problem: "cannot upgrade it from format version \(format) to \(StateFile.formatVersion)")
    format = StateFile.formatVersion
  }

  /// Runs `sql`, one SQLite transaction, with `synchronous = FULL` (the
  /// setting `openDatabase` makes afterwards replaces it); rolls it back
  /// when it fails.
  private func execSynced(_ sql: String, problem: String) throws(StoreError) {
    try exec("PRAGMA synchronous = FULL", problem: "cannot set the sync setting")
    do {
      try exec(sql, problem: problem)
    } catch {
      if sqlite3_get_autocommit(db) == 0 { sqlite3_exec(db, "ROLLBACK", nil, nil, nil) }
      throw error
    }
  }

  /// The WAL's working size (`journal_size_limit`): SQLite truncates it
  /// back to this after a group that grew it further. Its automatic
  /// checkpoint, once ``checkpointFrames(pageSize:)`` frames are in it,
  /// restarts it below.
  static let walSizeLimit: Int64 = 4 << 20

  /// The frames after which SQLite checkpoints the WAL (`PRAGMA
  /// wal_autocheckpoint`): as many as fill its working size, less 16 for a
  /// commit that ends past the mark (a frame is the page and a 24-byte
  /// header; the WAL starts with a 32-byte one). 3 986 with 1 KiB pages,
  /// 1 002 with 4 KiB (SQLite's default is 1 000); never fewer than 100
  /// (pages of 32 KiB and more then outgrow it). Each checkpoint stalls
  /// the thread that commits for a few milliseconds, so fewer of them
  /// means fewer slow commits (docs/storage.md, "Page size").
  static func checkpointFrames(pageSize: Int64) -> Int64 {
    max(100, (walSizeLimit - 32) / (pageSize + 24) - 16)
  }

  /// Whether the file system has room to spare for the WAL's and the
  /// commit log's working sizes (16 times the WAL's).
  var roomy: Bool {
    var vfs = statvfs()
    return statvfs(path, &vfs) == 0 && Int64(vfs.f_bavail) * Int64(vfs.f_frsize) >= 16 * Connection.walSizeLimit
  }

  /// SQLite's own handle of the WAL (nil before the WAL is open).
  func walFile() -> UnsafeMutablePointer<sqlite3_file>? {
    var wal: UnsafeMutablePointer<sqlite3_file>?
    guard sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) == SQLITE_OK else { return nil }
    return wal
  }

  /// Grows the WAL to its working size with written zeros and syncs them,
  /// so that from the first commit on every commit overwrites allocated
  /// blocks in place: an append makes each `fdatasync` write the inode too
  /// (the new size), a second I/O, which the first ≈ 500 commits after every
  /// start paid (docs/storage.md). Zeros past the WAL's last frame are no
  /// frames: SQLite's recovery stops at the first frame whose salt and
  /// checksum do not match, as it does at the stale frames it leaves there
  /// itself. Uses SQLite's own handle of the WAL (closing a second
  /// descriptor of a file would drop the process's `fcntl` locks on it).
  ///
  /// Only a speed-up, so best effort: skipped when the file system has less
  /// than 16 times that size free (a small tmpfs keeps its space), and a
  /// write that fails cuts the WAL back to the size it had.
  private func preallocateWAL() {
    guard roomy else { return }
    guard let wal = walFile(), let methods = wal.pointee.pMethods,
      let size = methods.pointee.xFileSize, let write = methods.pointee.xWrite,
      let truncate = methods.pointee.xTruncate, let sync = methods.pointee.xSync
    else { return }
    var start: sqlite3_int64 = 0
    guard size(wal, &start) == SQLITE_OK, start < Connection.walSizeLimit else { return }
    // The unix VFS writes at most 128 KiB - 1 bytes per call.
    let chunk = 64 << 10
    let zeros = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 4096)
    defer { zeros.deallocate() }
    zeros.initializeMemory(as: UInt8.self, repeating: 0, count: chunk)
    var offset = start
    while offset < Connection.walSizeLimit {
      let n = Int32(min(Int64(chunk), Connection.walSizeLimit - offset))
      guard write(wal, zeros, n, offset) == SQLITE_OK else {
        _ = truncate(wal, start)
        return
      }
      offset += sqlite3_int64(n)
    }
    if sync(wal, SQLITE_SYNC_NORMAL) != SQLITE_OK { _ = truncate(wal, start) }
  }

  /// An existing database: ours, not from the future, undamaged, with the
  /// tables (the rows are checked by `read`). Notes its format version.
  private mutating func check() throws(StoreError) {
    let app = try pragmaInt("application_id", problem: "cannot read")
    if app != Int64(StateFile.applicationID) {
      let tables = (try? names("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")) ?? []
      let hex = "0x" + String(UInt32(truncatingIfNeeded: app), radix: 16)
      throw error(
        .foreign,
        "is not an Ordo state file: an SQLite database of another application (application_id \(hex), tables: \(tables.isEmpty ? "none" : tables.joined(separator: ", "))); refusing to use it"
      )
    }
    let version = try pragmaInt("user_version", problem: "cannot read")
    if version > StateFile.formatVersion {
      throw error(
        .futureFormat,
        "has format version \(version), newer than this ordod reads (\(StateFile.formatVersion)); use a newer ordod")
    }
    if version < 1 { throw error(.corrupt, "is damaged: format version \(version)") }
    format = version
    let problems = try names("PRAGMA quick_check")
    if problems != ["ok"] {
      throw error(.corrupt, "is damaged (quick_check: \(problems.prefix(3).joined(separator: "; ")))")
    }
    let tables = Set(try names("SELECT name FROM sqlite_schema WHERE type = 'table'"))
    for t in ["meta", "keypath"] where !tables.contains(t) {
      throw error(.corrupt, "is damaged: the table \(t) is missing")
    }
  }

  // MARK: Reading

  /// Reads and checks the whole state.
  mutating func read() throws(StoreError) -> StoredState {
    var meta: [String: (type: Int32, int: Int64, text: String)] = [:]
    try each("SELECT name, value FROM meta") { (s: OpaquePointer) throws(StoreError) in
      let name = text(s, 0) ?? ""
      meta[name] = (sqlite3_column_type(s, 1), sqlite3_column_int64(s, 1), text(s, 1) ?? "")
    }
    func int(_ name: String) throws(StoreError) -> Int64 {
      guard let m = meta[name], m.type == SQLITE_INTEGER else {
        throw error(.corrupt, "is damaged: meta has no integer \(name)")
      }
      return m.int
    }
    guard let app = meta["application"], app.type == SQLITE_TEXT, app.text == "ordo" else {
      throw error(.corrupt, "is damaged: meta does not name the application ordo")
    }
    let stored = try int("format")
    if stored != format {
      throw error(.corrupt, "is damaged: meta says format \(stored), the header \(format)")
    }
    guard let epochRow = meta["epoch"], epochRow.type == SQLITE_TEXT, !epochRow.text.isEmpty else {
      throw error(.corrupt, "is damaged: meta has no epoch")
    }
    let last = try int("last_transaction")
    if last < 0 { throw error(.corrupt, "is damaged: last_transaction is \(last)") }
    let lastTransaction = UInt64(last)

    var keypaths: [StoredKeypath] = []
    // Version 1 has no column `owned`: nothing in it is owned.
    let owned = format >= 2 ? "owned" : "0"
    try each("SELECT keypath, type, value, counter, changed_at, \(owned) FROM keypath ORDER BY keypath") {
      (s: OpaquePointer) throws(StoreError) in
      keypaths.append(try row(s, last: lastTransaction))
    }
    lastSynced = lastTransaction
    lastAppended = lastTransaction
    return StoredState(epoch: epochRow.text, lastTransaction: lastTransaction, keypaths: keypaths)
  }

  /// The database's state with the transactions of the commit log that it
  /// does not hold yet laid over it (those the log made durable).
  mutating func readWithLog() throws(StoreError) -> StoredState {
    let synced = lastSynced, appended = lastAppended
    var state = try read()
    lastSynced = synced
    lastAppended = appended
    var byKeypath: [String: StoredKeypath] = [:]
    for k in state.keypaths { byKeypath[k.keypath] = k }
    for t in unapplied where t.transaction <= synced {
      for c in t.changes { byKeypath[c.keypath] = c }
      state.lastTransaction = t.transaction
    }
    state.keypaths = byKeypath.values.sorted { $0.keypath.utf8.lexicographicallyPrecedes($1.keypath.utf8) }
    return state
  }

  /// One row of `keypath`, checked.
  private func row(_ s: OpaquePointer, last: UInt64) throws(StoreError) -> StoredKeypath {
    guard sqlite3_column_type(s, 0) == SQLITE_TEXT, let keypath = text(s, 0) else {
      throw error(.corrupt, "is damaged: a keypath that is not text")
    }
    func bad(_ what: String) -> StoreError { error(.corrupt, "is damaged: keypath \"\(keypath)\": \(what)") }
    if (try? Keypath(keypath)) == nil { throw bad("not a valid keypath") }
    let type = sqlite3_column_int64(s, 1)
    let stored = sqlite3_column_type(s, 2)
    let value: Value?
    switch (type, stored) {
    case (0, SQLITE_NULL): value = nil
    case (1, SQLITE_INTEGER):
      let b = sqlite3_column_int64(s, 2)
      if b != 0 && b != 1 { throw bad("bool value \(b)") }
      value = .bool(b == 1)
    case (2, SQLITE_INTEGER): value = .int64(sqlite3_column_int64(s, 2))
    case (3, SQLITE_INTEGER): value = .double(Double(bitPattern: UInt64(bitPattern: sqlite3_column_int64(s, 2))))
    case (4, SQLITE_TEXT):
      guard let t = text(s, 2) else { throw bad("string value is not UTF-8") }
      value = .string(t)
    case (5, SQLITE_BLOB):
      let n = Int(sqlite3_column_bytes(s, 2))
      if n == 0 {
        value = .bytes([])
      } else {
        let p = sqlite3_column_blob(s, 2)!.assumingMemoryBound(to: UInt8.self)
        value = .bytes(Array(UnsafeBufferPointer(start: p, count: n)))
      }
    default: throw bad("value type \(type) does not match the stored value")
    }
    guard sqlite3_column_type(s, 3) == SQLITE_INTEGER, sqlite3_column_type(s, 4) == SQLITE_INTEGER else {
      throw bad("counter or changed_at is not an integer")
    }
    let counter = sqlite3_column_int64(s, 3), changedAt = sqlite3_column_int64(s, 4)
    if counter < 1 || counter > changedAt || UInt64(changedAt) > last {
      throw bad("counter \(counter) and changed-at \(changedAt) break 1 ≤ counter ≤ changed-at ≤ \(last)")
    }
    let owned = sqlite3_column_int64(s, 5)
    if sqlite3_column_type(s, 5) != SQLITE_INTEGER || (owned != 0 && owned != 1) {
      throw bad("owned is not 0 or 1")
    }
    if owned == 1 && value == nil { throw bad("a tombstone marked owned") }
    return StoredKeypath(
      keypath: keypath, value: value, counter: UInt64(counter), changedAt: UInt64(changedAt), owned: owned == 1)
  }

  // MARK: Writing

  func validate(transaction: UInt64, changes: [StoredKeypath]) throws(StoreError) {
    func bad(_ problem: String) -> StoreError { error(.invalidArgument, "transaction \(transaction): \(problem)") }
    if transaction <= lastAppended {
      throw bad("its id must be greater than the last stored or appended id \(lastAppended)")
    }
    if transaction > UInt64(Int64.max) { throw bad("its id is larger than \(Int64.max)") }
    if log != nil {
      let size = CommitLog.recordSize(changes)
      if size > CommitLog.maxRecord {
        throw bad("its changes take \(size) bytes, more than one record of the commit log holds (\(CommitLog.maxRecord))")
      }
    }
    var seen = Set<String>()
    if changes.count > 1 { seen.reserveCapacity(changes.count) }
    for c in changes {
      do {
        _ = try Keypath(c.keypath)
      } catch {
        throw bad(error.message)
      }
      // One change cannot repeat a keypath (no set to build).
      if changes.count > 1 && !seen.insert(c.keypath).inserted {
        throw bad("keypath \"\(c.keypath)\" appears twice")
      }
      if c.counter < 1 || c.counter > c.changedAt || c.changedAt > transaction {
        throw bad(
          "keypath \"\(c.keypath)\": counter \(c.counter) and changed-at \(c.changedAt) break 1 ≤ counter ≤ changed-at ≤ \(transaction)"
        )
      }
      if c.owned && c.value == nil { throw bad("keypath \"\(c.keypath)\": a tombstone cannot be owned") }
    }
  }

  mutating func append(transaction: UInt64, changes: [StoredKeypath]) throws(StoreError) {
    initial = nil  // what `open` read is no longer the state
    if let log {
      if !groupOpen {
        // A caller that never applies the log: keep what waits bounded.
        if unapplied.count >= Connection.unappliedLimit { try? applyLog() }
        groupOpen = true
        groupFirst = transaction
      }
      log.add(transaction: transaction, changes: changes)
      unapplied.append(LoggedTransaction(transaction: transaction, changes: changes))
      lastAppended = transaction
      return
    }
    if !groupOpen {
      let (rc, e) = step(begin)
      if rc != SQLITE_OK {
        throw error(.storage, "cannot store transaction \(transaction): \(reason(rc, osErrno: e))")
      }
      groupOpen = true
      groupFirst = transaction
    }
    if let (rc, e) = writeRows(transaction, changes) { try fail(transaction, rc, e) }
    lastAppended = transaction
  }

  /// Writes one transaction's rows and the last transaction id into the
  /// open SQLite transaction; returns SQLite's result and the C errno of
  /// the first failure, nil when all went in.
  private func writeRows(_ transaction: UInt64, _ changes: [StoredKeypath]) -> (Int32, Int32)? {
    for c in changes {
      let (rc, e) = bindAndStep(c)
      if rc != SQLITE_DONE { return (rc, e) }
    }
    sqlite3_bind_int64(setLast, 1, Int64(transaction))
    let rc = sqlite3_step(setLast)
    let e = ordo_errno()
    sqlite3_reset(setLast)
    return rc == SQLITE_DONE ? nil : (rc, e)
  }

  /// Drops the group after a failed write and throws the reason.
  private mutating func fail(_ transaction: UInt64, _ rc: Int32, _ osErrno: Int32) throws(StoreError) {
    let why = reason(rc, osErrno: osErrno)
    let dropped = groupFirst < transaction ? "; the unsynced transactions \(groupFirst)…\(transaction) were dropped" : ""
    rollback()
    throw error(.storage, "cannot store transaction \(transaction): \(why)\(dropped)")
  }

  /// Writes one row; returns SQLite's result and the C errno right after it.
  private func bindAndStep(_ c: StoredKeypath) -> (Int32, Int32) {
    let s = upsert
    defer {
      sqlite3_reset(s)
      sqlite3_clear_bindings(s)
    }
    var rc = bindText(s, 1, c.keypath)
    let type: Int64
    switch c.value {
    case .none:
      type = 0
      if rc == SQLITE_OK { rc = sqlite3_bind_null(s, 3) }
    case .bool(let b)?:
      type = 1
      if rc == SQLITE_OK { rc = sqlite3_bind_int64(s, 3, b ? 1 : 0) }
    case .int64(let i)?:
      type = 2
      if rc == SQLITE_OK { rc = sqlite3_bind_int64(s, 3, i) }
    case .double(let d)?:
      type = 3
      if rc == SQLITE_OK { rc = sqlite3_bind_int64(s, 3, Int64(bitPattern: d.bitPattern)) }
    case .string(let t)?:
      type = 4
      if rc == SQLITE_OK { rc = bindText(s, 3, t) }
    case .bytes(let b)?:
      type = 5
      if rc == SQLITE_OK {
        rc =
          b.isEmpty
          ? sqlite3_bind_zeroblob(s, 3, 0)
          : b.withUnsafeBytes { sqlite3_bind_blob(s, 3, $0.baseAddress, Int32($0.count), ordo_sqlite_transient()) }
      }
    }
    if rc == SQLITE_OK { rc = sqlite3_bind_int64(s, 2, type) }
    if rc == SQLITE_OK { rc = sqlite3_bind_int64(s, 4, Int64(c.counter)) }
    if rc == SQLITE_OK { rc = sqlite3_bind_int64(s, 5, Int64(c.changedAt)) }
    if rc == SQLITE_OK { rc = sqlite3_bind_int64(s, 6, c.owned ? 1 : 0) }
    if rc != SQLITE_OK { return (rc, 0) }
    rc = sqlite3_step(s)
    return (rc, ordo_errno())
  }

  private func bindText(_ s: OpaquePointer?, _ i: Int32, _ t: String) -> Int32 {
    var t = t
    return t.withUTF8 { p in
      // A NULL pointer would bind SQL NULL, not the empty string.
      p.count == 0
        ? sqlite3_bind_text(s, i, "", 0, ordo_sqlite_transient())
        : p.withMemoryRebound(to: CChar.self) {
          sqlite3_bind_text(s, i, $0.baseAddress, Int32($0.count), ordo_sqlite_transient())
        }
    }
  }

  mutating func commit() throws(StoreError) {
    guard groupOpen else { return }
    if let log {
      if let problem = log.write() {
        let range = groupRange
        rollback()
        throw error(
          .storage, "cannot make transactions \(range) durable: cannot write the commit log \(log.path): \(problem); they were dropped")
      }
      groupOpen = false
      lastSynced = lastAppended
      return
    }
    let (rc, e) = step(commitGroup)
    if rc != SQLITE_OK {
      let why = reason(rc, osErrno: e)
      let range = groupRange
      rollback()
      throw error(.storage, "cannot make transactions \(range) durable: \(why); they were dropped")
    }
    groupOpen = false
    lastSynced = lastAppended
  }

  mutating func rollback() {
    if let log {
      log.drop()
      let synced = lastSynced
      unapplied.removeAll { $0.transaction > synced }
    }
    if sqlite3_get_autocommit(db) == 0 { sqlite3_exec(db, "ROLLBACK", nil, nil, nil) }
    groupOpen = false
    lastAppended = lastSynced
  }

  // MARK: The commit log

  /// Transactions that may wait in the log when the caller never applies
  /// it; the next group applies them first.
  static let unappliedLimit = 4096

  /// Opens the commit log beside the database whose state is `state`, and
  /// applies (durably) the transactions it holds that the database lacks;
  /// returns whether there were any. Refuses a log that belongs to another
  /// state or skips a transaction. Without `keep` the log is closed again
  /// (an open without a commit log, after one with).
  mutating func openLog(_ state: StoredState, keep: Bool) throws(StoreError) -> Bool {
    let opened = try CommitLog.open(statePath: path, epoch: state.epoch, roomy: keep && roomy)
    var kept = false
    defer {
      // Refused (nothing written to it), or without the log from now on
      // (what it held is in the database): closed as it is.
      if !kept {
        opened.log.close()
        log = nil
      }
    }
    var todo = opened.records.filter { $0.transaction > state.lastTransaction }
    if opened.otherEpoch {
      // A log left from a state file that was removed: only a new
      // database may leave it behind.
      if !todo.isEmpty && !created {
        throw error(
          .corrupt,
          "is damaged: the commit log \(opened.log.path) belongs to another state (another epoch) and holds transactions the database lacks; refusing to use it"
        )
      }
      todo = []
    }
    for r in todo {
      do {
        try validate(transaction: r.transaction, changes: r.changes)
      } catch {
        throw self.error(.corrupt, "is damaged: the commit log \(opened.log.path): \(error.message)")
      }
      if r.transaction != lastAppended + 1 {
        throw error(
          .corrupt,
          "is damaged: the commit log \(opened.log.path) goes from transaction \(lastAppended) to \(r.transaction)")
      }
      lastAppended = r.transaction
    }
    log = opened.log
    if opened.otherEpoch {
      try opened.log.reset(epoch: state.epoch)
    } else if !todo.isEmpty {
      lastSynced = lastAppended
      unapplied = todo
      try applyLog(durably: true)
    }
    kept = keep
    return !todo.isEmpty
  }

  /// Writes the durable transactions of the log into the database (one
  /// SQLite transaction, no sync), then, once the log has reached
  /// `CommitLog.resetAt` (or with `durably`), syncs the WAL and starts the
  /// log anew. See `StateFile.applyLog()`.
  mutating func applyLog(durably: Bool = false) throws(StoreError) {
    guard let log else { return }
    let synced = lastSynced
    let ready = unapplied.prefix { $0.transaction <= synced }
    if !ready.isEmpty {
      func fail(_ rc: Int32, _ e: Int32) -> StoreError {
        let why = reason(rc, osErrno: e)
        if sqlite3_get_autocommit(db) == 0 { sqlite3_exec(db, "ROLLBACK", nil, nil, nil) }
        let first = ready.first!.transaction, last = ready.last!.transaction
        let range = first == last ? "\(first)" : "\(first)…\(last)"
        return error(
          .storage,
          "cannot write transactions \(range) from the commit log into the database: \(why); they stay durable in the commit log")
      }
      var (rc, e) = step(begin)
      if rc != SQLITE_OK { throw fail(rc, e) }
      for r in ready {
        if let (rc, e) = writeRows(r.transaction, r.changes) { throw fail(rc, e) }
      }
      (rc, e) = step(commitGroup)
      if rc != SQLITE_OK { throw fail(rc, e) }
      unapplied.removeFirst(ready.count)
    }
    guard unapplied.isEmpty, !log.hasPending, durably || log.needsReset else { return }
    // The database must hold every record durably before the log forgets
    // them: sync the WAL (SQLite's checkpoints sync what they copy).
    guard let wal = walFile(), let methods = wal.pointee.pMethods, let sync = methods.pointee.xSync else {
      throw error(.storage, "cannot sync the WAL before starting the commit log anew")
    }
    let rc = sync(wal, SQLITE_SYNC_NORMAL)
    if rc != SQLITE_OK {
      throw error(.storage, "cannot sync the WAL before starting the commit log anew: \(reason(rc, osErrno: ordo_errno()))")
    }
    try log.reset()
  }

  // MARK: SQL helpers

  /// Runs a prepared statement without results to its end and resets it;
  /// returns SQLITE_OK or the error, and the C errno right after the step.
  /// The statement's error message stays the connection's (for `reason`).
  private func step(_ s: OpaquePointer?) -> (Int32, Int32) {
    let rc = sqlite3_step(s)
    let e = ordo_errno()
    if rc == SQLITE_DONE {
      sqlite3_reset(s)
      return (SQLITE_OK, e)
    }
    // sqlite3_reset returns the same error and keeps its message.
    sqlite3_reset(s)
    return (rc == SQLITE_ROW ? SQLITE_ERROR : rc, e)
  }

  private func prepare(_ sql: String) throws(StoreError) -> OpaquePointer {
    var s: OpaquePointer?
    let rc = sqlite3_prepare_v2(db, sql, -1, &s, nil)
    guard rc == SQLITE_OK, let s else { throw error(.corrupt, "is damaged: \(reason(rc))") }
    return s
  }

  private func exec(_ sql: String, problem: String) throws(StoreError) {
    let rc = sqlite3_exec(db, sql, nil, nil, nil)
    if rc != SQLITE_OK { throw classify(rc, problem) }
  }

  /// A failure while reading an existing file: not a database or damaged
  /// (corrupt), or the file system (storage).
  private func classify(_ rc: Int32, _ problem: String) -> StoreError {
    switch rc & 0xff {
    case SQLITE_NOTADB: error(.corrupt, "is not an Ordo state file: \(reason(rc))")
    case SQLITE_CORRUPT: error(.corrupt, "is damaged: \(reason(rc))")
    case SQLITE_BUSY, SQLITE_LOCKED: error(.locked, "locked by another process: \(reason(rc))")
    default: error(.storage, "\(problem): \(reason(rc))")
    }
  }

  /// Runs a query, calling `body` for each row.
  private func each(_ sql: String, _ body: (OpaquePointer) throws(StoreError) -> Void) throws(StoreError) {
    var s: OpaquePointer?
    var rc = sqlite3_prepare_v2(db, sql, -1, &s, nil)
    guard rc == SQLITE_OK, let s else {
      // A missing table or column is a damaged file, not a file system problem.
      let e = (rc & 0xff) == SQLITE_ERROR ? error(.corrupt, "is damaged: \(reason(rc))") : classify(rc, "cannot read")
      sqlite3_finalize(s)
      throw e
    }
    defer { sqlite3_finalize(s) }
    while true {
      rc = sqlite3_step(s)
      if rc == SQLITE_DONE { return }
      if rc != SQLITE_ROW { throw classify(rc, "cannot read") }
      try body(s)
    }
  }

  private func names(_ sql: String) throws(StoreError) -> [String] {
    var out: [String] = []
    try each(sql) { (s: OpaquePointer) throws(StoreError) in out.append(text(s, 0) ?? "") }
    return out
  }

  private func pragmaInt(_ name: String, problem: String) throws(StoreError) -> Int64 {
    var v: Int64 = 0
    var s: OpaquePointer?
    var rc = sqlite3_prepare_v2(db, "PRAGMA \(name)", -1, &s, nil)
    defer { sqlite3_finalize(s) }
    if rc == SQLITE_OK {
      rc = sqlite3_step(s)
      if rc == SQLITE_ROW {
        v = sqlite3_column_int64(s, 0)
        return v
      }
    }
    throw classify(rc, problem)
  }

  private func pragmaText(_ name: String, problem: String) throws(StoreError) -> String {
    var s: OpaquePointer?
    var rc = sqlite3_prepare_v2(db, "PRAGMA \(name)", -1, &s, nil)
    defer { sqlite3_finalize(s) }
    if rc == SQLITE_OK {
      rc = sqlite3_step(s)
      if rc == SQLITE_ROW { return text(s!, 0) ?? "" }
    }
    throw classify(rc, problem)
  }
}

/// Column `i` as a string, or nil when it is NULL or not valid UTF-8.
private func text(_ s: OpaquePointer, _ i: Int32) -> String? {
  guard let p = sqlite3_column_text(s, i) else { return nil }
  let n = Int(sqlite3_column_bytes(s, i))
  return String(validating: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
}

/// A random (version 4) UUID in its usual text form.
func makeUUID() -> String {
  var g = SystemRandomNumberGenerator()
  var b = (0..<16).map { _ in UInt8.random(in: 0...255, using: &g) }
  b[6] = (b[6] & 0x0f) | 0x40
  b[8] = (b[8] & 0x3f) | 0x80
  let hex = b.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }
  return [0..<4, 4..<6, 6..<8, 8..<10, 10..<16].map { hex[$0].joined() }.joined(separator: "-")
}
