import Foundation
import Testing

@testable import Ordo

@Suite struct TypedAPITests {
  @Test func keypathsAndPatternsAreAcceptedWhereStringsAre() throws {
    let bus = Bus()
    let title = try Keypath("doc.title"), items = try Pattern("doc.items.**")
    let calls = Calls()
    try bus.register(name: "list", reads: [items], writes: [try Pattern("doc.count")]) { note in
      calls.add("list", note)
    }
    try bus.register(name: "ctx", reads: [try Pattern("doc.title")]) { ctx in
      _ = try ctx.value(title)
    }
    try bus.transaction {
      try bus.set(title, .string("a"))
      try bus.set(try Keypath("doc.items.0"), .int64(1))
      try bus.touch(try Keypath("doc.items.1"))
    }
    #expect(calls.take() == [Call(name: "list", changed: ["doc.items.0", "doc.items.1"], txn: 1)])
    #expect(try bus.value(title) == .string("a"))
    #expect(try bus.counter(title) == 1 && bus.changedAt(title) == 1)
    #expect(try bus.snapshot([items]).values == ["doc.items.0": .int64(1)])
    #expect(try bus.changes(since: 0, [items]).removed == ["doc.items.1"])
    #expect(try bus.resolve(title) == bus.resolve("doc.title"))
    try bus.transaction {
      try bus.remove(title)
      try bus.removeTree(try Keypath("doc.items"))
    }
    #expect(try bus.snapshot([try Pattern("**")]).values.isEmpty)
    let spec = ContractSpec(name: "spec", reads: [items]) { _ in }
    #expect(spec.reads == ["doc.items.**"])
  }

  @Test func theTransactionReturnsItsBodysResult() throws {
    let bus = Bus()
    let n: Int = try bus.transaction {
      try bus.set("a", .int64(1))
      return 42
    }
    #expect(n == 42)
    #expect(bus.transactionID == 1)
    let txn = try bus.transaction { try bus.set("a", .int64(2)) }
    #expect(txn == 2)
  }

  /// The typed form: a function that throws only OrdoError needs no cast.
  func rename(_ bus: Bus, _ to: String) throws(OrdoError) -> UInt64 {
    try bus.transaction { () throws(OrdoError) in try bus.set("doc.title", .string(to)) }
  }

  @Test func theTransactionIsTypedByItsBody() throws {
    let bus = Bus()
    #expect(try rename(bus, "a") == 1)
    do {
      _ = try bus.transaction { () throws(OrdoError) in
        try bus.set("doc.title", .string("b"))
        try bus.set("doc.*", .int64(1))
      }
      Issue.record("expected a failure")
    } catch {
      let e: OrdoError = error  // statically an OrdoError
      #expect(e.code == .invalidKeypath)
    }
    #expect(try bus.value("doc.title") == .string("a"))  // rolled back
    struct Boom: Error {}
    #expect(throws: Boom.self) { try bus.transaction { try bus.set("x", .int64(1)); throw Boom() } }
    #expect(try bus.value("x") == nil)
  }

  @Test func theSnapshotIsAStruct() throws {
    let bus = Bus()
    try bus.transaction { try bus.set("a", .int64(1)) }
    let s: Snapshot = try bus.snapshot(["**"])
    #expect(s == Snapshot(values: ["a": .int64(1)], counters: ["a": 1], transaction: 1))
  }
}
