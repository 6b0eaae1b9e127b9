import Foundation
import Testing

@testable import Ordo

@Suite struct ContextTests {
  @Test func theContextCarriesTheNotificationAndWritesIntoThePass() throws {
    let bus = Bus()
    let seen = Box<[String]>([])
    try bus.register(name: "total", reads: ["cart.items.*"], writes: ["cart.total"]) { ctx in
      let items = try ctx.snapshot(["cart.items.*"]).values
      try ctx.set("cart.total", .int64(Int64(items.count)))
      seen.value.append("\(ctx.transaction) \(ctx.contract) \(Array(ctx.changed)) \(ctx.isInitial) \(try ctx.changedValues())")
      #expect(codeOf { try ctx.set("cart.other", .int64(1)) } == .contractViolation)
      #expect(codeOf { _ = try ctx.value("cart.other") } == .contractViolation)
    }
    let id = try #require(bus.contracts().first?.id)
    try bus.transaction { try bus.set("cart.items.a", .int64(1)) }
    #expect(try bus.value("cart.total") == .int64(1))
    #expect(seen.value == ["1 \(id) [\"cart.items.a\"] false [\"cart.items.a\": int64 1]"])
  }

  /// A typed property of another bus is refused through the context, as
  /// its handle is: its write would land in that bus, past this contract's
  /// rules.
  @Test func aPropertyOfAnotherBusIsRefused() throws {
    let a = Bus()
    let b = Bus()
    let foreign = try a.property("x.y", as: Int64.self)
    let own = try b.property("out", as: Int64.self)
    let codes = Box<[OrdoError.Code?]>([])
    try b.register(name: "c", reads: ["in"], writes: ["out"]) { ctx in
      codes.value.append(codeOf { try ctx.set(foreign, 5) })
      codes.value.append(codeOf { _ = try ctx.value(foreign) })
      try ctx.set(own, 7)
      codes.value.append(try ctx.value(own) == 7 ? nil : .internal)
    }
    a.begin()
    try b.transaction { try b.set("in", .int64(1)) }
    #expect(try a.commit() == 0)
    #expect(codes.value == [.invalidArgument, .invalidArgument, nil])
    #expect(try a.value("x.y") == nil)
    #expect(try b.value("out") == .int64(7))
  }

  @Test func aCallbackThatUsesOnlyItsContextLeavesNoCycle() throws {
    weak var gone: Bus?
    let doc: Document
    do {
      let bus = Bus()
      gone = bus
      doc = try Document(bus)
      try bus.register(name: "count", reads: [doc.items.tree], writes: [doc.count.keypath]) { ctx in
        try ctx.set(doc.count, doc.items.values().count)
        try ctx.atEndOfPass { _ = doc.title }
      }
      try bus.register(name: "mirror", reads: ["doc.count"], writes: ["doc.mirror"]) { ctx in
        try ctx.set("doc.mirror", try ctx.value("doc.count") ?? .int64(-1))
      }
      try bus.transaction { try doc.item(0).set("a") }
      #expect(try bus.value("doc.mirror") == .int64(1))
    }
    #expect(gone == nil, "the bus was freed although its callbacks hold properties")
    expectError(.invalidArgument, ["deallocated"]) { _ = try doc.count.value }
  }

  @Test func theContextOutlivingItsCallbackIsAPlainUseOfTheBus() throws {
    let bus = Bus()
    let kept = Box<ContractContext?>(nil)
    try bus.register(name: "keep", reads: ["a"]) { ctx in kept.value = ctx }
    try bus.transaction { try bus.set("a", .int64(1)) }
    let ctx = try #require(kept.value)
    #expect(try ctx.value("b") == nil)  // no contract rule applies any more
    expectError(.noTransaction) { try ctx.set("a", .int64(2)) }
    #expect(try ctx.bus() === bus)
    kept.value = nil
  }

  @Test func theEndOfPassHookRunsOnceAfterEveryContract() throws {
    let bus = Bus()
    let log = Box<[String]>([])
    try bus.register(name: "first", reads: ["a"], writes: ["b"], priority: -1) { ctx in
      log.value.append("first")
      try ctx.atEndOfPass { log.value.append("hook-1") }
      try ctx.atEndOfPass { log.value.append("hook-2") }
      try ctx.set("b", .int64(1))
    }
    try bus.register(name: "second", reads: ["b"]) { _ in log.value.append("second") }
    try bus.register(name: "every", reads: []) { _ in log.value.append("every") }
    let txn = try bus.transaction { try bus.set("a", .int64(1)) }
    #expect(txn == 1)
    #expect(log.value == ["first", "second", "every", "hook-1", "hook-2"])
    // Hooks run once: the next pass does not run them again.
    log.value = []
    try bus.transaction { try bus.set("b", .int64(2)) }
    #expect(log.value == ["second", "every"])
  }

  @Test func aHookOutsideAPassWaitsForTheNextPass() throws {
    let bus = Bus()
    let log = Box<[String]>([])
    try bus.register(name: "c", reads: ["a"]) { _ in log.value.append("c") }
    bus.atEndOfPass { log.value.append("hook \(bus.transactionID) \(bus.isInTransaction)") }
    #expect(log.value.isEmpty)
    bus.transaction {}  // nothing changed: no pass
    try bus.transaction { try bus.set("a", .int64(0)); try bus.remove("a") }  // no net change: no pass
    #expect(log.value.isEmpty)
    // The hook sees the committed state, outside the pass, and may open a
    // transaction of its own (whose pass runs its own hooks).
    bus.atEndOfPass {
      log.value.append("second hook")
      bus.atEndOfPass { log.value.append("third hook") }
      _ = try? bus.transaction { try bus.set("a", .int64(9)) }
    }
    try bus.transaction { try bus.set("a", .int64(1)) }
    #expect(log.value == ["c", "hook 1 false", "second hook", "c", "third hook"])
  }

  @Test func aHookRunsWhenAnInitialCallOpensAPass() throws {
    let bus = Bus()
    let log = Box<[String]>([])
    try bus.register(name: "init", reads: ["a"], writes: ["b"], flags: .notifyInitial) { ctx in
      try ctx.atEndOfPass { log.value.append("hook") }
      try ctx.set("b", .int64(1))
      log.value.append("init")
    }
    #expect(log.value == ["init", "hook"])
    #expect(bus.transactionID == 1)
  }
}
