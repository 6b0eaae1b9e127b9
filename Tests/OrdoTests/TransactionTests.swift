import Foundation
import Testing

@testable import Ordo

struct Boom: Error, CustomStringConvertible {
  var description: String { "boom" }
}

/// SPEC §3: transactions, nesting, rollback; the Swift `transaction {}` API.
@Suite struct TransactionTests {
  @Test func writesNeedATransaction() {
    let bus = Bus()
    expectError(.noTransaction, ["set \"k\"", "outside a transaction"]) { try bus.set("k", .int64(1)) }
    expectError(.noTransaction, ["touch \"k\""]) { try bus.touch("k") }
    expectError(.noTransaction, ["remove \"k\""]) { try bus.remove("k") }
    expectError(.noTransaction, ["removeTree \"k\""]) { try bus.removeTree("k") }
    expectError(.noTransaction, ["commit"]) { try bus.commit() }
    expectError(.noTransaction, ["rollback"]) { try bus.rollback() }
    #expect(bus.statistics.values == 0)
  }

  @Test func nestedCommitsJoinTheOutermost() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "w", reads: ["n.**"])
    bus.begin()
    try bus.set("n.a", .int64(1))
    bus.begin()
    try bus.set("n.b", .int64(1))
    #expect(try bus.commit() == 0)
    #expect(calls.all.isEmpty)
    #expect(try bus.counter("n.b") == 0)
    #expect(try bus.commit() == 1)
    #expect(calls.take() == [Call(name: "w", changed: ["n.a", "n.b"], txn: 1)])
    #expect(try bus.counter("n.b") == 1)
  }

  @Test func rollbackAtDepthTwoDiscardsEverything() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "w", reads: ["**"])
    try bus.commitWith { try bus.set("a", .int64(1)) }
    _ = calls.take()
    bus.begin()
    try bus.set("a", .int64(2))
    bus.begin()
    try bus.set("b", .int64(2))
    try bus.touch("c")
    try bus.rollback()
    expectError(.noTransaction) { try bus.commit() }
    expectError(.noTransaction) { try bus.commit() }
    expectError(.noTransaction) { try bus.rollback() }
    #expect(calls.all.isEmpty)
    #expect(try bus.value("a") == .int64(1))
    #expect(try bus.value("b") == nil)
    #expect(try bus.counter("a") == 1)
    #expect(try bus.counter("c") == 0)
    #expect(bus.transactionID == 1)
    #expect(bus.statistics.rollbacks == 1)
    #expect(try bus.commitWith { try bus.set("a", .int64(3)) } == 2)
  }

  @Test func transactionClosureCommits() throws {
    let bus = Bus()
    #expect(try bus.transaction { try bus.set("k", .int64(1)) } == 1)
    #expect(bus.transaction {} == 0)  // a body that cannot throw: nor can the transaction
    #expect(try bus.value("k") == .int64(1))
  }

  @Test func transactionClosureRollsBackOnThrow() throws {
    let bus = Bus()
    let calls = Calls()
    try bus.watch(calls, "w", reads: ["**"])
    try bus.commitWith { try bus.set("k", .int64(1)) }
    _ = calls.take()
    #expect(throws: Boom.self) {
      try bus.transaction {
        try bus.set("k", .int64(2))
        try bus.set("j", .int64(2))
        throw Boom()
      }
    }
    #expect(try bus.value("k") == .int64(1))
    #expect(try bus.value("j") == nil)
    #expect(calls.all.isEmpty)
    #expect(bus.statistics.rollbacks == 1)
    // No transaction is left open.
    expectError(.noTransaction) { try bus.set("k", .int64(3)) }
    expectError(.noTransaction) { try bus.commit() }
  }

  @Test func innerTransactionClosureThrowRollsBackTheOuterOne() throws {
    let bus = Bus()
    #expect(throws: Boom.self) {
      try bus.transaction {
        try bus.set("outer", .int64(1))
        try bus.transaction {
          try bus.set("inner", .int64(1))
          throw Boom()
        }
      }
    }
    #expect(try bus.value("outer") == nil)
    #expect(try bus.value("inner") == nil)
    #expect(bus.transactionID == 0)
    expectError(.noTransaction) { try bus.commit() }
  }

  @Test func inACallbackRollbackIsRefusedAndBeginCommitJoin() throws {
    let bus = Bus()
    let calls = Calls()
    let results = Box<[String]>([])
    try bus.watch(calls, "compute", reads: ["in"], writes: ["out", "tmp"], priority: -1) { ctx in
      let bus = try ctx.bus()
      let refused = codeOf { try bus.rollback() }
      bus.begin()
      try ctx.set("out", .int64(1))
      let inner = try bus.commit()
      let extra = codeOf { try bus.commit() }
      // transaction {} in a callback: a throw cannot undo the pass; its
      // writes stay.
      let thrown = codeOf {
        try bus.transaction {
          try ctx.set("tmp", .int64(1))
          throw OrdoError(.internal, "x")
        }
      }
      results.value = ["\(refused.map(\.name) ?? "ok")", "\(inner)", "\(extra.map(\.name) ?? "ok")", "\(thrown.map(\.name) ?? "ok")"]
    }
    try bus.watch(calls, "content", reads: ["out"])
    #expect(try bus.commitWith { try bus.set("in", .int64(1)) } == 1)
    #expect(results.value == ["INVALID_ARGUMENT", "0", "NO_TRANSACTION", "INTERNAL"])
    #expect(calls.take() == [Call(name: "compute", changed: ["in"], txn: 1), Call(name: "content", changed: ["out"], txn: 1)])
    #expect(try bus.counter("out") == 1)
    #expect(try bus.value("tmp") == .int64(1))
  }

  /// Messages name the keypath and the contract they are about.
  @Test func messagesNameTheirKeypathAndContract() throws {
    let bus = Bus()
    let message = Box<String>("")
    try bus.register(name: "compute", reads: ["in"]) { (ctx: ContractContext) in
      do { try ctx.bus().rollback() } catch let e as OrdoError { message.value = e.message }
    }
    try bus.transaction { try bus.set("in", .int64(1)) }
    #expect(message.value == "rollback inside the callback of contract \"compute\": a notification pass cannot be undone")
    expectError(.noTransaction, ["onRollback outside a transaction: call begin first"]) { try bus.onRollback {} }
  }

  @Test func aTransactionBelongsToTheThreadThatBeganIt() throws {
    let bus = Bus()
    bus.begin()
    try bus.set("k", .int64(1))
    let fromOther = Box<[OrdoError.Code?]>([])
    runThreads(1) { _ in
      fromOther.value = [
        codeOf { try bus.commit() }, codeOf { try bus.rollback() }, codeOf { try bus.set("j", .int64(1)) },
      ]
    }
    #expect(fromOther.value == [.noTransaction, .noTransaction, .noTransaction])
    #expect(try bus.commit() == 1)
  }

  @Test func beginWaitsForAnotherThreadsTransaction() throws {
    let bus = Bus()
    let log = Box<[String]>([])
    bus.begin()
    try bus.set("k", .int64(1))
    let started = DispatchSemaphore(value: 0)
    let finished = DispatchSemaphore(value: 0)
    Thread {
      started.signal()
      bus.begin()
      log.mutate { $0.append("other began") }
      try? bus.set("k", .int64(2))
      _ = try? bus.commit()
      finished.signal()
    }.start()
    started.wait()
    Thread.sleep(forTimeInterval: 0.05)
    log.mutate { $0.append("main commits") }
    #expect(try bus.commit() == 1)
    finished.wait()
    #expect(log.value == ["main commits", "other began"])
    #expect(try bus.value("k") == .int64(2))
    #expect(bus.transactionID == 2)
  }

  @Test func isInTransactionFollowsTheCallingThread() throws {
    let bus = Bus()
    #expect(!bus.isInTransaction)
    bus.begin()
    #expect(bus.isInTransaction)
    let other = Flag()
    let t = Thread { other.set(bus.isInTransaction) }
    t.start()
    while !other.done { usleep(1000) }
    #expect(other.value == false)
    try bus.rollback()
    #expect(!bus.isInTransaction)
    let seen = Flag()
    try bus.register(name: "c", reads: ["a"]) { ctx in let bus = try ctx.bus(); seen.set(bus.isInTransaction) }
    try bus.transaction { try bus.set("a", .int64(1)) }
    #expect(seen.value == true)
  }
}

/// A value set once by another thread.
final class Flag: @unchecked Sendable {
  private let lock = NSLock()
  private var stored: Bool?
  func set(_ v: Bool) { lock.withLock { stored = v } }
  var done: Bool { lock.withLock { stored != nil } }
  var value: Bool? { lock.withLock { stored } }
}
