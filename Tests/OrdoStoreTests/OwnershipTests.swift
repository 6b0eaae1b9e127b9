import Ordo
import OrdoStore
import Synchronization
import Testing

/// Every sync setting with every mode; `(full, grouped)` makes its groups
/// durable in the commit log.
let syncAndModes: [(SyncMode, DurableState.Mode)] = [
  (.full, .grouped), (.normal, .grouped), (.full, .eachCommit), (.normal, .eachCommit),
]

/// Owned values in durable state (SPEC §15): stored as owned, and removed
/// by the first transaction after a restart, since their owners are gone.
@Suite(.serialized) struct OwnershipTests {
  /// A state file `state.ordo` in `dir`, attached to a new bus, holding
  /// transactions 1 and 2, synced: `own.a` and `own.b` stay owned by the
  /// owner returned; a plain write ends the ownership of `own.c` (the same
  /// value: only its ownership changes), `own.d` (a new value) and `own.e`
  /// (removed); `plain` was never owned.
  func ownedHistory(in dir: TempDir, sync: SyncMode, mode: DurableState.Mode) throws
    -> (path: String, bus: Bus, durable: DurableState, owner: Owner)
  {
    let path = dir.file("state.ordo")
    let bus = Bus()
    let durable = try DurableState.attach(bus: bus, path: path, sync: sync, mode: mode)
    let owner = Owner(bus, name: "provider")
    try bus.transaction(owner: owner) { () throws(OrdoError) in
      for k in ["own.a", "own.c", "own.d", "own.e"] { try bus.set(k, .int64(1)) }
      try bus.set("own.b", .string("b"))
    }
    try bus.transaction { () throws(OrdoError) in
      try bus.set("own.c", .int64(1))
      try bus.set("own.d", .int64(2))
      try bus.remove("own.e")
      try bus.set("plain", .bool(true))
    }
    #expect(try bus.ownedValues().map { "\($0.keypath) \($0.owner)" } == ["own.a provider", "own.b provider"])
    #expect(try durable.sync() == 2)
    return (path, bus, durable, owner)
  }

  /// What `ownedHistory` stores.
  static let storedHistory = [
    StoredKeypath(keypath: "own.a", value: .int64(1), counter: 1, changedAt: 1, owned: true),
    StoredKeypath(keypath: "own.b", value: .string("b"), counter: 1, changedAt: 1, owned: true),
    StoredKeypath(keypath: "own.c", value: .int64(1), counter: 1, changedAt: 1),
    StoredKeypath(keypath: "own.d", value: .int64(2), counter: 2, changedAt: 2),
    StoredKeypath(keypath: "own.e", value: nil, counter: 2, changedAt: 2),
    StoredKeypath(keypath: "plain", value: .bool(true), counter: 1, changedAt: 2),
  ]

  /// The bus's state once transaction 3 removed the owned values of
  /// `ownedHistory`.
  static func afterRemoval(epoch: String) -> BusState {
    var state = BusState(epoch: epoch, transaction: 3, keypaths: [:])
    for k in storedHistory {
      state.keypaths[k.keypath] = .init(value: k.value, counter: k.counter, changedAt: k.changedAt)
    }
    for k in ["own.a", "own.b"] { state.keypaths[k] = .init(value: nil, counter: 2, changedAt: 3) }
    return state
  }

  /// The contract calls a bus makes: the keypaths each was told of, and
  /// the transaction.
  final class Reader: Sendable {
    let calls = Mutex<[String]>([])

    init(_ bus: Bus) throws {
      try bus.register(name: "reader", reads: ["own.*", "plain"]) { note in
        let changed = Array(note.changed).sorted().joined(separator: ",")
        self.calls.withLock { $0.append("\(changed) txn \(note.transaction)") }
      }
    }

    var all: [String] { calls.withLock { $0 } }
  }

  /// A bus attached to the state file at `path`, with a `Reader`
  /// registered before (so that it sees the first transaction).
  func reopen(_ path: String, sync: SyncMode, mode: DurableState.Mode) throws -> (Bus, DurableState, Reader) {
    let bus = Bus()
    let reader = try Reader(bus)
    return (bus, try DurableState.attach(bus: bus, path: path, sync: sync, mode: mode), reader)
  }

  @Test(arguments: syncAndModes)
  func ownedValuesComeBackOwnedAndTheFirstTransactionRemovesThem(sync: SyncMode, mode: DurableState.Mode) throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (path, bus, durable, owner) = try ownedHistory(in: dir, sync: sync, mode: mode)
    durable.close()
    // Released once the file is closed: the bus goes on in memory.
    owner.release()
    let file = try StateFile.open(path: path, sync: sync)
    #expect(try file.load().keypaths == OwnershipTests.storedHistory)
    file.close()

    // The restart: transaction 3 removes the owned values, durably, with a
    // pass that tells their reader once.
    let (again, reopened, reader) = try reopen(path, sync: sync, mode: mode)
    #expect(reader.all == ["own.a,own.b txn 3"])
    #expect(try BusState(again) == OwnershipTests.afterRemoval(epoch: bus.epoch))
    #expect(try again.ownedValues().isEmpty)
    #expect(reopened.lastDurableTransaction == 3 && reopened.lastCommittedTransaction == 3)
    reopened.close()

    // Nothing is owned any more: the next restart removes nothing.
    let (third, last, quiet) = try reopen(path, sync: sync, mode: mode)
    #expect(third.transactionID == 3 && quiet.all.isEmpty)
    #expect(try BusState(third) == OwnershipTests.afterRemoval(epoch: bus.epoch))
    last.close()
    let stored = try StateFile.open(path: path)
    #expect(try stored.load().keypaths.allSatisfy { !$0.owned })
    stored.close()
  }

  /// A crash (the files copied while the state is open, as a kill -9
  /// leaves them) keeps each value's ownership: the owned values are
  /// removed by the first transaction on the copy, the others stay; and
  /// a crash after that removal brings none of them back.
  @Test(arguments: syncAndModes)
  func aCrashKeepsOwnershipRight(sync: SyncMode, mode: DurableState.Mode) throws {
    let dir = TempDir()
    defer { dir.remove() }
    let (path, bus, durable, owner) = try ownedHistory(in: dir, sync: sync, mode: mode)
    crashImage(path, to: dir.file("crash.ordo"))

    let (first, afterCrash, reader) = try reopen(dir.file("crash.ordo"), sync: sync, mode: mode)
    #expect(reader.all == ["own.a,own.b txn 3"])
    #expect(try BusState(first) == OwnershipTests.afterRemoval(epoch: bus.epoch))
    crashImage(dir.file("crash.ordo"), to: dir.file("crash2.ordo"))

    let (second, afterSecondCrash, quiet) = try reopen(dir.file("crash2.ordo"), sync: sync, mode: mode)
    #expect(quiet.all.isEmpty)
    #expect(try BusState(second) == OwnershipTests.afterRemoval(epoch: bus.epoch))
    for d in [afterSecondCrash, afterCrash, durable] { d.close() }
    owner.release()
  }

  /// The flag goes through the commit log and the database alike, with a
  /// change that only ends a value's ownership (counter and changed-at as
  /// they were).
  @Test(arguments: [false, true])
  func theOwnedFlagIsStoredWithEachChange(commitLog: Bool) throws {
    let dir = TempDir()
    defer { dir.remove() }
    let path = dir.file("state.ordo")
    let f = try StateFile.open(path: path, commitLog: commitLog)
    #expect(f.usesCommitLog == commitLog)
    let a = StoredKeypath(keypath: "a", value: .bytes([1]), counter: 1, changedAt: 1, owned: true)
    let b = StoredKeypath(keypath: "b", value: .double(-0.0), counter: 1, changedAt: 2, owned: true)
    try f.append(transaction: 1, changes: [a, kp("c", .int64(1), 1, 1)])
    try f.append(transaction: 2, changes: [b, kp("a", .bytes([1]), 1, 1)])
    try f.sync()
    #expect("\(b)".hasSuffix("changed-at 2 owned") && "\(kp("a", .bytes([1]), 1, 1))".hasSuffix("changed-at 1"))
    let expected = [kp("a", .bytes([1]), 1, 1), b, kp("c", .int64(1), 1, 1)]
    crashImage(path, to: dir.file("crash.ordo"))
    let copy = try StateFile.open(path: dir.file("crash.ordo"))
    #expect(try copy.load().keypaths == expected)
    copy.close()
    #expect(try f.load().keypaths == expected)
    f.close()
  }
}
