import Foundation
import Testing

@testable import Ordo

/// Conditional commits and owned values through the Swift API (SPEC §15).
@Suite struct ConditionsTests {
  @Test func aConditionThatHoldsCommits() throws {
    let bus = Bus()
    let txn = try bus.transaction(expecting: ["cart.count": 0]) { () throws(OrdoError) in
      try bus.set("cart.count", .int64(1))
    }
    #expect(txn == 1)
    #expect(try bus.counter("cart.count") == 1)
    try bus.transaction(expecting: ["cart.count": 1]) { () throws(OrdoError) in try bus.set("cart.count", .int64(2)) }
    #expect(try bus.value("cart.count") == .int64(2))
  }

  @Test func aConditionThatFailsAppliesNothingAndNotifiesNoOne() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.register(name: "reader", reads: ["cart.**"]) { calls.add("reader", $0) }
    try bus.transaction { () throws(OrdoError) in try bus.set("cart.count", .int64(5)) }
    _ = calls.take()
    bus.begin()
    try bus.set("cart.count", .int64(6))
    try bus.set("cart.other", .string("x"))
    try bus.expect("cart.count", counter: 0)
    let error = #expect(throws: OrdoError.self) { try bus.commit() }
    #expect(error?.code == .conflict)
    #expect(error?.message.contains("\"cart.count\"") == true)
    #expect(error?.message.contains("expected at counter 0 but is at 1") == true)
    #expect(try bus.value("cart.count") == .int64(5))
    #expect(try bus.value("cart.other") == nil)
    #expect(try bus.counter("cart.count") == 1)
    #expect(bus.transactionID == 1)
    #expect(calls.all.isEmpty)
    #expect(bus.statistics.conflicts == 1)
    #expect(bus.statistics.rollbacks == 0)
    // No id was used: the next transaction is 2.
    #expect(try bus.transaction { () throws(OrdoError) in try bus.set("cart.count", .int64(7)) } == 2)
  }

  @Test func aFailedConditionFailsEvenATransactionThatChangesNothing() throws {
    let bus = Bus()
    try bus.transaction { () throws(OrdoError) in try bus.touch("k") }
    #expect(codeOf { try bus.transaction(expecting: ["k": 0]) { () throws(OrdoError) in } } == .conflict)
    #expect(try bus.transaction(expecting: ["k": 1]) { () throws(OrdoError) in } == 0)
  }

  @Test func nestedConditionsBelongToTheOutermostCommit() throws {
    let bus = Bus()
    bus.begin()
    bus.begin()
    try bus.expect("k", counter: 3)
    try bus.set("k", .bool(true))
    #expect(try bus.commit() == 0)
    #expect(codeOf { try bus.commit() } == .conflict)
    #expect(try bus.value("k") == nil)
    // The bus is free again.
    #expect(codeOf { try bus.commit() } == .noTransaction)
    #expect(try bus.transaction { () throws(OrdoError) in try bus.set("k", .bool(true)) } == 1)
  }

  @Test func rollbackForgetsAFailedCondition() throws {
    let bus = Bus()
    bus.begin()
    try bus.expect("k", counter: 9)
    try bus.rollback()
    #expect(try bus.transaction { () throws(OrdoError) in try bus.set("k", .int64(1)) } == 1)
  }

  @Test func misuseIsRefused() throws {
    let bus = Bus()
    #expect(codeOf { try bus.expect("k", counter: 0) } == .noTransaction)
    bus.begin()
    #expect(codeOf { try bus.expect("k..x", counter: 0) } == .invalidKeypath)
    #expect(codeOf { try bus.expect("k.*", counter: 0) } == .invalidKeypath)
    try bus.commit()
    let seen = Box<OrdoError?>(nil)
    try bus.register(name: "c", reads: ["a"], writes: ["b"]) { _ in
      do throws(OrdoError) { try bus.expect("a", counter: 0) } catch { seen.value = error }
    }
    try bus.transaction { () throws(OrdoError) in try bus.set("a", .int64(1)) }
    #expect(seen.value?.code == .invalidArgument)
  }

  /// Read-modify-write from several threads, each retrying on a conflict,
  /// loses no update. The read is made outside the transaction, as a peer
  /// reads before it writes.
  @Test func readModifyWriteWithRetryLosesNoUpdate() async throws {
    let bus = Bus()
    let threads = 4
    let increments = 200
    await withTaskGroup(of: Void.self) { group in
      for _ in 0..<threads {
        group.addTask {
          for _ in 0..<increments {
            while true {
              let counter = try! bus.counter("cart.count")
              let value: Int64 = if case .int64(let v)? = try! bus.value("cart.count") { v } else { 0 }
              do {
                try bus.transaction(expecting: ["cart.count": counter]) { () throws(OrdoError) in
                  try bus.set("cart.count", .int64(value + 1))
                }
                break
              } catch {
                precondition((error as? OrdoError)?.code == .conflict)
              }
            }
          }
        }
      }
    }
    #expect(try bus.value("cart.count") == .int64(Int64(threads * increments)))
  }

  // MARK: - Owned values

  @Test func releasingAnOwnerRemovesItsValuesInOneTransaction() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.register(name: "reader", reads: ["presence.**"]) { calls.add("reader", $0) }
    let owner = Owner(bus, name: "provider")
    try bus.transaction(owner: owner) { () throws(OrdoError) in
      try bus.set("presence.alice", .bool(true))
      try bus.set("presence.bob", .bool(true))
    }
    try bus.transaction { () throws(OrdoError) in try bus.set("presence.carol", .bool(true)) }
    #expect(try bus.ownedValues() == [
      OwnedValue(keypath: "presence.alice", owner: "provider"), OwnedValue(keypath: "presence.bob", owner: "provider"),
    ])
    #expect(bus.statistics.ownedValues == 2)
    _ = calls.take()
    owner.release()
    #expect(calls.all == [Call(name: "reader", changed: ["presence.alice", "presence.bob"], txn: 3)])
    #expect(try bus.value("presence.alice") == nil)
    #expect(try bus.value("presence.carol") == .bool(true))
    #expect(try bus.ownedValues().isEmpty)
    owner.release()
    #expect(bus.transactionID == 3)
    #expect(codeOf { try bus.begin(owner: owner) } == .invalidArgument)
    // The refusal left the bus free: another thread's transaction runs.
    let done = DispatchSemaphore(value: 0)
    Thread {
      _ = try? bus.transaction { () throws(OrdoError) in try bus.set("other", .int64(1)) }
      done.signal()
    }.start()
    #expect(done.wait(timeout: .now() + 10) == .success)
    #expect(try bus.value("other") == .int64(1))
  }

  @Test func anOwnerGoesWithItsLastReference() throws {
    let bus = Bus()
    do {
      let owner = Owner(bus, name: "scoped")
      try bus.transaction(owner: owner) { () throws(OrdoError) in try bus.set("k", .int64(1)) }
      #expect(try bus.value("k") == .int64(1))
    }
    #expect(try bus.value("k") == nil)
    #expect(bus.transactionID == 2)
  }

  @Test func aPlainWriteEndsOwnershipAndAnotherOwnerTakesItOver() throws {
    let bus = Bus()
    let a = Owner(bus, name: "a")
    let b = Owner(bus, name: "b")
    try bus.transaction(owner: a) { () throws(OrdoError) in
      try bus.set("x", .int64(1))
      try bus.set("y", .int64(1))
      try bus.set("z", .int64(1))
    }
    // An equal-value plain write ends ownership too.
    try bus.transaction { () throws(OrdoError) in try bus.set("x", .int64(1)) }
    // An equal-value owned write hands the value over.
    try bus.transaction(owner: b) { () throws(OrdoError) in try bus.set("y", .int64(1)) }
    #expect(try bus.ownedValues().map(\.owner) == ["b", "a"])
    a.release()
    #expect(try bus.value("x") == .int64(1))
    #expect(try bus.value("y") == .int64(1))
    #expect(try bus.value("z") == nil)
    b.release()
    #expect(try bus.value("y") == nil)
  }

  @Test func ownedScopeEndsWithItsCommitAndRollbackOwnsNothing() throws {
    let bus = Bus()
    let owner = Owner(bus, name: "o")
    bus.begin()
    try bus.set("plain.before", .int64(1))
    try bus.begin(owner: owner)
    try bus.set("owned", .int64(1))
    try bus.commit()
    try bus.set("plain.after", .int64(1))
    try bus.commit()
    #expect(try bus.ownedValues().map(\.keypath) == ["owned"])
    try bus.begin(owner: owner)
    try bus.set("rolled", .int64(1))
    try bus.rollback()
    #expect(try bus.ownedValues().map(\.keypath) == ["owned"])
  }

  @Test func nestedOwnedScopesEndInOrder() throws {
    let bus = Bus()
    let a = Owner(bus, name: "a")
    let b = Owner(bus, name: "b")
    try bus.begin(owner: a)
    try bus.set("x", .int64(1))
    try bus.begin(owner: b)
    try bus.set("y", .int64(1))
    try bus.commit()
    try bus.set("z", .int64(1))
    try bus.commit()
    #expect(try bus.ownedValues() == [
      OwnedValue(keypath: "x", owner: "a"), OwnedValue(keypath: "y", owner: "b"), OwnedValue(keypath: "z", owner: "a"),
    ])
  }

  @Test func releaseInsideACallbackRemovesAfterThePass() throws {
    let bus = Bus()
    let owner = Owner(bus, name: "o")
    try bus.transaction(owner: owner) { () throws(OrdoError) in try bus.set("v", .int64(1)) }
    let calls = Calls()
    try bus.register(name: "r", reads: ["v", "go"]) { calls.add("r", $0) }
    try bus.register(name: "releaser", reads: ["go"]) { _ in owner.release() }
    try bus.transaction { () throws(OrdoError) in try bus.touch("go") }
    #expect(try bus.value("v") == nil)
    #expect(calls.all.map(\.txn) == [2, 3])
    #expect(calls.all.last?.changed == ["v"])
  }

  @Test func ownedWritesAreRefusedWhereTheyCannotBelong() throws {
    let bus = Bus()
    let other = Bus()
    let foreign = Owner(other, name: "foreign")
    #expect(codeOf { try bus.begin(owner: foreign) } == .invalidArgument)
    let owner = Owner(bus, name: "o")
    let seen = Box<OrdoError?>(nil)
    try bus.register(name: "c", reads: ["a"], writes: ["b"]) { _ in
      do throws(OrdoError) { try bus.begin(owner: owner) } catch { seen.value = error }
    }
    try bus.transaction { () throws(OrdoError) in try bus.set("a", .int64(1)) }
    #expect(seen.value?.code == .invalidArgument)
    #expect(bus.transactionID == 1)
  }

  @Test func aPersistenceLayerLearnsAndRestoresOwnership() throws {
    let bus = Bus()
    let seen = Box<[KeyState]>([])
    bus.setCommitHook { _, changes in seen.mutate { $0 += changes } }
    let owner = Owner(bus, name: "o")
    try bus.transaction(owner: owner) { () throws(OrdoError) in
      try bus.set("a", .int64(1))
      try bus.set("b", .int64(1))
    }
    #expect(seen.value.map(\.owned) == [true, true])
    seen.value = []
    // An equal-value plain write changes a's ownership, not its value: the
    // layer learns it with the transaction's changes.
    try bus.transaction { () throws(OrdoError) in
      try bus.set("a", .int64(1))
      try bus.set("c", .int64(5))
    }
    #expect(seen.value == [
      KeyState(keypath: "a", value: .int64(1), counter: 1, changedAt: 1, owned: false),
      KeyState(keypath: "c", value: .int64(5), counter: 1, changedAt: 2),
    ])

    let restored = Bus()
    let calls = Calls()
    try restored.register(name: "r", reads: ["**"]) { calls.add("r", $0) }
    try restored.restore(epoch: bus.epoch, lastTransaction: 2, keypaths: [
      KeyState(keypath: "b", value: .int64(1), counter: 1, changedAt: 1, owned: true),
      KeyState(keypath: "c", value: .int64(5), counter: 1, changedAt: 2),
    ])
    #expect(try restored.ownedValues() == [OwnedValue(keypath: "b", owner: "(no live owner)")])
    #expect(restored.releaseRestoredOwnedValues() == 3)
    #expect(calls.all == [Call(name: "r", changed: ["b"], txn: 3)])
    #expect(try restored.value("b") == nil)
    #expect(try restored.value("c") == .int64(5))
    #expect(restored.releaseRestoredOwnedValues() == 0)
  }
}
