import Ordo
import Synchronization

/// Makes a bus durable: its model (values, counters, changed-at, the last
/// transaction id, the epoch) lives in a `StateFile` and comes back from it
/// (SPEC §10, §11; docs/storage.md).
///
/// `attach(bus:path:sync:mode:)` opens the state file, replaces the bus's
/// model with the file's, and installs the bus's commit hook, which is told
/// of every transaction just before it commits in memory. What happens then
/// depends on the mode:
///
/// - ``Mode/grouped`` (the default; for `ordod`): the hook only queues the
///   transaction (no I/O with the bus's lock held). ``sync()`` writes every
///   queued transaction and makes them durable with one SQLite `COMMIT`
///   (group commit). A transaction is acknowledged — a `Commit` reply, an
///   observer's `Notify` — only after a `sync()` that covers it returned.
///   When `sync()` fails, the queued transactions are gone from disk, so
///   memory goes back to the disk state (the bus is restored from the file)
///   and the failure names the transactions that were lost.
///   With `SyncMode.full` a group becomes durable in the state file's
///   commit log (one write, one `fdatasync`); ``applyLog()`` then moves it
///   into the database without a sync of its own — call it once the
///   acknowledgements are out, so that a waiting writer does not wait for
///   it (`ordod` does; docs/storage.md, "The commit log"). A record of the
///   log holds one transaction of at most 256 MiB of changes: a larger one
///   is refused at commit with `OrdoError.Code.storage`, alone.
/// - ``Mode/eachCommit`` (for in-process Swift hosts): the hook writes and
///   syncs the transaction itself, so `Bus.commit()` returns only once the
///   transaction is durable; when it cannot be stored, the core discards it
///   (memory as before) and `commit()` throws `OrdoError.Code.storage`. One
///   `fsync` per transaction, with the bus's lock held during it.
///
/// The hook runs after the pass's last callback: in-process contracts are
/// called before their transaction is durable (in both modes). Keep the
/// `DurableState` for as long as the bus should be durable: `close()`, or
/// its last reference going away, detaches it and closes the file.
public final class DurableState: Sendable {
  /// Who acknowledges a transaction as durable (see the type's comment).
  public enum Mode: String, Sendable, CaseIterable {
    /// Transactions are queued at commit; `sync()` makes them durable
    /// together (group commit).
    case grouped
    /// Every commit writes and syncs its transaction before it returns.
    case eachCommit = "each-commit"
  }

  /// The bus this state belongs to.
  public let bus: Bus
  /// The state file's path.
  public let path: String
  /// The sync setting of the state file.
  public let syncMode: SyncMode
  /// The mode.
  public let mode: Mode
  /// Whether `attach` created the state file (a new epoch).
  public let created: Bool

  private let core: Core
  /// Serializes `sync()` calls (held across the file's I/O, never by the
  /// commit hook).
  private let syncing = Locked<Void>(())

  /// Buses with a durable state attached, so that a second attach is refused.
  private static let attached = Locked<Set<ObjectIdentifier>>([])

  private init(bus: Bus, file: StateFile, mode: Mode, durable: UInt64) {
    self.bus = bus
    self.path = file.path
    self.syncMode = file.syncMode
    self.mode = mode
    self.created = file.created
    self.core = Core(file: file, durable: durable)
  }

  deinit {
    detach()
  }

  /// Opens (or creates) the state file at `path`, replaces `bus`'s model
  /// with the stored one — every keypath with its value or tombstone,
  /// counter, changed-at and ownership, the last transaction id and the
  /// epoch — and from then on stores every transaction committed on `bus`.
  /// A new file gives the bus an empty model and the file's new epoch.
  /// Contracts stay registered and are not called for the restored model.
  ///
  /// Owned values do not outlive their owners, and no owner outlives the
  /// process (SPEC §15): when the stored model holds owned values, the
  /// first transaction after the restore removes them all, with a normal
  /// pass (contracts that read them are called), and is durable when
  /// `attach` returns (in grouped mode it syncs).
  ///
  /// - Throws: every refusal of `StateFile.open` (locked, corrupt, future
  ///   format, foreign, storage); `invalidArgument` when `bus` already has
  ///   a durable state, or has a transaction open on this thread. Nothing
  ///   changes when these throw. `storage` when the transaction removing
  ///   the owned values cannot be stored: then nothing is attached, and
  ///   the bus holds the stored model.
  public static func attach(bus: Bus, path: String, sync: SyncMode = .full, mode: Mode = .grouped) throws(StoreError)
    -> DurableState
  {
    // Refused before the file is opened: a refused attach creates nothing.
    if bus.isInTransaction {
      throw StoreError(
        .invalidArgument, path: path,
        message: "state file \(path): the bus has a transaction open on this thread (or runs one of its callbacks); attach outside it (nothing was opened)")
    }
    let id = ObjectIdentifier(bus)
    let claimed = attached.withLock { $0.insert(id).inserted }
    if !claimed {
      throw StoreError(
        .invalidArgument, path: path,
        message: "state file \(path): this bus already has a durable state attached; close it first")
    }
    do throws(StoreError) {
      let file = try StateFile.open(path: path, sync: sync, commitLog: mode == .grouped)
      do throws(StoreError) {
        let state = try file.load()
        let durable = DurableState(bus: bus, file: file, mode: mode, durable: state.lastTransaction)
        // The hook goes in before the restore and refuses commits until it
        // is done, so that no transaction of another thread slips between.
        durable.core.state.withLock { $0.recovery = "the state file is being attached" }
        durable.install()
        do throws(StoreError) {
          try restore(bus, from: state, path: path)
          durable.core.state.withLock { $0.recovery = nil }
          try durable.removeOwnedValues(of: state)
        } catch {
          durable.detach()
          throw error
        }
        return durable
      } catch {
        file.close()
        throw error
      }
    } catch {
      _ = attached.withLock { $0.remove(id) }
      throw error
    }
  }

  /// The epoch of the stored state (and of the bus).
  public var epoch: String { core.file.epoch }

  /// The id of the last transaction made durable.
  public var lastDurableTransaction: UInt64 { core.state.withLock { $0.durable } }

  /// The id of the last transaction committed in memory and accepted for
  /// storing (equal to `lastDurableTransaction` in `eachCommit` mode and
  /// right after a `sync()`).
  public var lastCommittedTransaction: UInt64 { core.state.withLock { $0.committed } }

  /// Whether the state file is closed (by `close()`).
  public var isClosed: Bool { core.state.withLock { $0.closed } }

  /// Makes every transaction committed so far durable, with one SQLite
  /// `COMMIT` (one `fsync` with `SyncMode.full`), and returns the id of the
  /// last durable transaction. Transactions committed on other threads
  /// while it runs wait for the next `sync()`. In `eachCommit` mode there
  /// is nothing left to do: it returns `lastDurableTransaction`.
  ///
  /// - Throws: `SyncFailure`. When the file system refuses (disk full, I/O
  ///   error, file-size limit), the queued transactions are dropped from
  ///   the file, the bus's model is restored from the file (the durable
  ///   state), and `lost` names the transactions that were committed in
  ///   memory and are now gone: their callers get a storage error. The ids
  ///   are used again by the next commits. If even restoring fails, commits
  ///   are refused (`OrdoError.Code.storage`) until a later `sync()`
  ///   restores the bus. Called inside a transaction or a callback, or
  ///   after `close()`, it throws without changing anything.
  @discardableResult
  public func sync() throws(SyncFailure) -> UInt64 {
    if bus.isInTransaction {
      throw SyncFailure(
        error: StoreError(
          .invalidArgument, path: path,
          message: "state file \(path): sync inside a transaction or a callback (the transaction is not committed yet)"),
        lost: nil, refusingCommits: false)
    }
    return try syncing.withLock { (_: inout Void) throws(SyncFailure) -> UInt64 in try syncLocked() }
  }

  /// `sync()` with `syncing` held.
  private func syncLocked() throws(SyncFailure) -> UInt64 {
    let (batch, pending, closed) = core.state.withLock { s in
      let batch = s.queue
      s.queue.removeAll()
      return (batch, s.recovery != nil, s.closed)
    }
    if closed {
      throw SyncFailure(
        error: StoreError(.closed, path: path, message: "state file \(path): closed"), lost: nil, refusingCommits: false)
    }
    if pending {
      // A restore failed earlier: try again before anything else.
      try retryRestore()
      return core.state.withLock { $0.durable }
    }
    guard let last = batch.last?.transaction else { return core.state.withLock { $0.durable } }
    do throws(StoreError) {
      for t in batch { try core.file.append(transaction: t.transaction, changes: t.changes) }
      try core.file.sync()
    } catch {
      // The group is dropped (a storage failure dropped it already; an
      // append refused as invalid leaves it open): the file stays as at
      // the last sync.
      core.file.discard()
      try recover(after: error)
    }
    core.state.withLock { $0.durable = max($0.durable, last) }
    return last
  }

  /// Moves the transactions that `sync()` made durable in the state file's
  /// commit log into its database (grouped mode with `SyncMode.full`;
  /// otherwise there is nothing to do). Not needed for durability: a
  /// transaction is durable once `sync()` returned, and opening the state
  /// file applies what the log holds. A storage failure throws `storage`:
  /// the transactions stay durable in the log, the next call tries again,
  /// and `sync()` goes on working.
  public func applyLog() throws(StoreError) {
    try syncing.withLock { (_: inout Void) throws(StoreError) in try core.file.applyLog() }
  }

  /// Detaches the durable state from the bus and closes the state file
  /// (releasing its lock). The bus keeps its model and goes on in memory.
  /// Transactions queued but not synced are not written: call `sync()`
  /// first. Returns their ids (nil when there were none). Later `sync()`s
  /// throw `closed`.
  @discardableResult
  public func close() -> ClosedRange<UInt64>? {
    detach()
  }

  // MARK: - Inside

  @discardableResult
  private func detach() -> ClosedRange<UInt64>? {
    let wasOpen = core.state.withLock { s in
      let open = !s.closed
      s.closed = true
      return open
    }
    guard wasOpen else { return nil }
    bus.setCommitHook(nil)
    let dropped: ClosedRange<UInt64>? = core.state.withLock { s in
      defer { s.queue.removeAll() }
      return s.committed > s.durable ? (s.durable + 1)...s.committed : nil
    }
    syncing.withLock { _ in core.file.close() }
    _ = DurableState.attached.withLock { $0.remove(ObjectIdentifier(bus)) }
    return dropped
  }

  private func install() {
    let core = self.core
    switch mode {
    case .grouped:
      bus.setCommitHook { txn, changes in try core.queue(txn, changes) }
    case .eachCommit:
      bus.setCommitHook { txn, changes in try core.store(txn, changes) }
    }
  }

  /// After a failed sync: refuses commits, restores the bus from the file
  /// (the durable state) and throws what was lost.
  private func recover(after error: StoreError) throws(SyncFailure) -> Never {
    core.state.withLock { $0.recovery = error.message }
    let restoreError = restoreFromFile()
    let lost: ClosedRange<UInt64>? = core.state.withLock { s in
      // Everything committed after the durable state is gone: the failed
      // group and whatever was committed on top of it meanwhile (queued,
      // or refused by the hook once recovery was set).
      let range: ClosedRange<UInt64>? = s.committed > s.durable ? (s.durable + 1)...s.committed : nil
      s.queue.removeAll()
      if restoreError == nil {
        s.committed = s.durable
        s.recovery = nil
      }
      return range
    }
    if let restoreError {
      throw SyncFailure(
        error: StoreError(
          restoreError.kind, path: path,
          message: "\(error.message); then the bus could not be restored from the file: \(restoreError.message); commits are refused until a sync restores it"
        ),
        lost: lost, refusingCommits: true)
    }
    throw SyncFailure(error: error, lost: lost, refusingCommits: false)
  }

  /// A restore failed after an earlier failed sync: tries again (the hook
  /// has refused every commit since, so nothing more is lost).
  private func retryRestore() throws(SyncFailure) {
    if let restoreError = restoreFromFile() {
      throw SyncFailure(
        error: StoreError(
          restoreError.kind, path: path,
          message: "the bus could not be restored from the file: \(restoreError.message); commits are refused until a sync restores it"),
        lost: nil, refusingCommits: true)
    }
    core.state.withLock { s in
      s.queue.removeAll()
      s.committed = s.durable
      s.recovery = nil
    }
  }

  /// Restores the bus from the file's durable state. Restoring waits for a
  /// transaction running on another thread; its commit hook refuses it
  /// meanwhile (recovery is set). Returns the error, if any.
  ///
  /// Unlike `attach`, it removes no owned values: their owners are alive
  /// and keep them. Those the file holds as owned that no live owner holds
  /// (ended or released in a lost transaction) stay, held by the
  /// placeholder owner, until the next restart removes them; removing
  /// them here would commit one more transaction after each failed sync,
  /// for the next sync to fail on again while the disk is full.
  private func restoreFromFile() -> StoreError? {
    do {
      let state = try core.file.load()
      try DurableState.restore(bus, from: state, path: path)
      core.state.withLock { $0.durable = state.lastTransaction }
      return nil
    } catch {
      return error
    }
  }

  /// Removes the owned values a restore brought back (see `attach`) in
  /// one transaction, and makes it durable.
  private func removeOwnedValues(of state: StoredState) throws(StoreError) {
    guard state.keypaths.contains(where: \.owned) else { return }
    let what = "the removal of the owned values of the previous run; nothing was attached"
    if bus.releaseRestoredOwnedValues() == 0 {
      // No transaction: the each-commit hook refused it, or live owners of
      // this process hold every value (nothing to remove).
      if let refusal = core.state.withLock({ $0.refusal }) {
        throw StoreError(.storage, path: path, message: "\(refusal.message) (\(what))")
      }
      return
    }
    guard mode == .grouped else { return }
    do {
      try sync()
    } catch {
      throw StoreError(error.error.kind, path: path, message: "\(error.description) (\(what))")
    }
  }

  /// Replaces the bus's model with a stored state. Its owned values that
  /// no live owner of the bus holds go to the bus's placeholder owner,
  /// which `Bus.releaseRestoredOwnedValues()` releases.
  private static func restore(_ bus: Bus, from state: StoredState, path: String) throws(StoreError) {
    let keypaths = state.keypaths.map {
      KeyState(keypath: $0.keypath, value: $0.value, counter: $0.counter, changedAt: $0.changedAt, owned: $0.owned)
    }
    do {
      try bus.restore(epoch: state.epoch, lastTransaction: state.lastTransaction, keypaths: keypaths)
    } catch {
      throw StoreError(
        .invalidArgument, path: path, message: "state file \(path): cannot restore the bus: \(error.message)")
    }
  }

  /// What the commit hook shares with `sync()`.
  final class Core: Sendable {
    struct Queued: Sendable {
      let transaction: UInt64
      let changes: [StoredKeypath]
    }

    struct State: Sendable {
      /// Committed in memory, not yet written (grouped mode).
      var queue: [Queued] = []
      /// The last transaction the hook accepted.
      var committed: UInt64
      /// The last durable transaction.
      var durable: UInt64
      /// Set from a failed sync until the bus is restored: the hook refuses.
      var recovery: String?
      /// Why the each-commit hook last failed to store a transaction (the
      /// core reports it to the committer; `attach` names it too).
      var refusal: StoreError?
      var closed = false
    }

    let file: StateFile
    let state: Locked<State>
    /// Whether the file's groups go to its commit log, whose records hold
    /// at most `CommitLog.maxRecord` bytes each.
    let logged: Bool

    init(file: StateFile, durable: UInt64) {
      self.file = file
      self.state = Locked(State(committed: durable, durable: durable))
      logged = file.usesCommitLog
    }

    /// Grouped mode's hook (bus lock held): queues the transaction. One
    /// too large for a record of the commit log is refused here, alone
    /// (queued, it would fail its whole group at the next sync).
    func queue(_ txn: UInt64, _ changes: [KeyState]) throws(StoreError) {
      let stored = changes.map(stored)
      if logged {
        let size = CommitLog.recordSize(stored)
        if size > CommitLog.maxRecord {
          throw StoreError(
            .storage, path: file.path,
            message:
              "state file \(file.path): transaction \(txn) refused: its changes take \(size) bytes, more than one record of the commit log holds (\(CommitLog.maxRecord)); commit them in smaller transactions"
          )
        }
      }
      try state.withLock { (s: inout State) throws(StoreError) in
        guard try accept(&s, txn) else { return }
        s.queue.append(Queued(transaction: txn, changes: stored))
        s.committed = txn
      }
    }

    /// Each-commit mode's hook (bus lock held): stores and syncs the
    /// transaction. A failure leaves the file as at the last transaction.
    func store(_ txn: UInt64, _ changes: [KeyState]) throws(StoreError) {
      try state.withLock { (s: inout State) throws(StoreError) in
        guard try accept(&s, txn) else { return }
        do throws(StoreError) {
          try file.append(transaction: txn, changes: changes.map(stored))
          try file.sync()
        } catch {
          s.refusal = error
          throw error
        }
        s.committed = txn
        s.durable = txn
      }
    }

    /// Whether to store the transaction: not once `close()` began (the
    /// bus goes on in memory, as it will once the hook is gone). Throws
    /// while a restore is pending, or for an id out of sequence.
    private func accept(_ s: inout State, _ txn: UInt64) throws(StoreError) -> Bool {
      if s.closed { return false }
      if let why = s.recovery {
        throw StoreError(
          .storage, path: file.path,
          message: "state file \(file.path): transaction \(txn) refused while the bus is restored from the state file (\(why))")
      }
      if txn != s.committed + 1 {
        throw StoreError(
          .invalidArgument, path: file.path,
          message: "state file \(file.path): transaction \(txn) does not follow the last stored transaction \(s.committed)")
      }
      return true
    }

    private func stored(_ k: KeyState) -> StoredKeypath {
      StoredKeypath(keypath: k.keypath, value: k.value, counter: k.counter, changedAt: k.changedAt, owned: k.owned)
    }
  }
}

/// Why `DurableState.sync()` failed, and what it cost.
public struct SyncFailure: Error, Sendable, CustomStringConvertible {
  /// The reason (kind `storage` for the file system; `invalidArgument` or
  /// `closed` for a call that changed nothing).
  public let error: StoreError
  /// The transactions that were committed in memory and are gone (neither
  /// on disk nor in memory any more): each of their callers gets a storage
  /// error. nil when none were lost.
  public let lost: ClosedRange<UInt64>?
  /// Whether the bus could not be restored from the file: then every
  /// commit is refused with `OrdoError.Code.storage` until a later `sync()`
  /// restores it.
  public let refusingCommits: Bool

  public init(error: StoreError, lost: ClosedRange<UInt64>?, refusingCommits: Bool) {
    self.error = error
    self.lost = lost
    self.refusingCommits = refusingCommits
  }

  public var description: String {
    let what = lost.map { $0.count == 1 ? "; transaction \($0.lowerBound) was lost" : "; transactions \($0.lowerBound)…\($0.upperBound) were lost" } ?? ""
    return error.message + what
  }
}
