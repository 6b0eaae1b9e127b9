import Foundation
import Testing

@testable import Ordo

/// The document model of the README and `examples/swift/`: a title, a
/// count and items under a prefix, as typed properties.
final class Document: Sendable {
  let title: Property<String>
  let count: Property<Int>
  let items: KeypathScope

  init(_ bus: Bus, at root: String = "doc") throws(OrdoError) {
    let doc = try bus.scope(root)
    title = try doc.property("title")
    count = try doc.property("count")
    items = try doc.scope("items")
  }

  func item(_ i: Int) throws(OrdoError) -> Property<String> { try items.property("\(i)") }
}

@Suite struct PropertyTests {
  @Test func everyTypeRoundTripsThroughTheStringAPI() throws {
    let bus = Bus()
    let b = try bus.property("v.bool", as: Bool.self)
    let i64 = try bus.property("v.i64", as: Int64.self)
    let i = try bus.property("v.int", as: Int.self)
    let d = try bus.property("v.double", as: Double.self)
    let s = try bus.property("v.string", as: String.self)
    let bytes = try bus.property("v.bytes", as: [UInt8].self)
    #expect(try b.value == nil && s.value == nil)
    try bus.transaction {
      try b.set(true)
      try i64.set(-5)
      try i.set(Int.max)
      try d.set(-0.0)
      try s.set("Songs")
      try bytes.set([0, 255])
    }
    #expect(try b.value == true)
    #expect(try i64.value == -5)
    #expect(try i.value == Int.max)
    #expect(try d.value?.bitPattern == (-0.0).bitPattern)
    #expect(try s.value == "Songs")
    #expect(try bytes.value == [0, 255])
    // The same values through keypath strings: an Int is an int64.
    #expect(try bus.value("v.int") == .int64(Int64(Int.max)))
    #expect(try bus.value("v.bytes") == .bytes([0, 255]))
    try bus.transaction { try bus.set("v.i64", .int64(7)) }
    #expect(try i64.value == 7)
    #expect(try i64.counter == 2)
    #expect(try s.value(or: "x") == "Songs")
  }

  @Test func anotherTypeReadsAsTypeMismatch() throws {
    let bus = Bus()
    let title = try bus.property("doc.title", as: String.self)
    try bus.transaction { try bus.set("doc.title", .int64(3)) }
    expectError(.typeMismatch, ["\"doc.title\"", "int64", "string"]) { _ = try title.value }
    let asInt = try bus.property("doc.title", as: Int.self)
    #expect(try asInt.value == 3)
    // Writing through the property replaces the value, type and all.
    try bus.transaction { try title.set("Songs") }
    #expect(try title.value == "Songs")
    expectError(.typeMismatch, ["\"doc.title\" holds a string, not an int64 (read as Int)"]) { _ = try asInt.value }
  }

  @Test func writesObeyTheTransactionRules() throws {
    let bus = Bus()
    let title = try bus.property("doc.title", as: String.self)
    expectError(.noTransaction) { try title.set("x") }
    expectError(.noTransaction) { try title.touch() }
    expectError(.noTransaction) { try title.remove() }
    #expect(try title.value == nil)
    #expect(bus.nodeCount >= 1)  // resolving wrote nothing, but made the place
    let txn = try bus.transaction { try title.set("a") }
    #expect(txn == 1)
    #expect(try bus.transaction { try title.set("a") } == 0)  // equal value: no change
    #expect(try bus.transaction { try title.touch() } == 2)
    #expect(try title.value == "a")
    #expect(try bus.transaction { try title.remove() } == 3)
    #expect(try title.value == nil)
    #expect(try title.counter == 3)
  }

  @Test func readsAndWritesObeyTheContractRules() throws {
    let bus = Bus()
    let doc = try Document(bus)
    let results = Box<[OrdoError.Code?]>([])
    try bus.register(name: "count", reads: ["doc.items.**"], writes: ["doc.count"]) { ctx in
      let n = try doc.items.values().count
      try doc.count.set(n)
      results.value = [
        codeOf { _ = try doc.title.value },  // not in the read set
        codeOf { try doc.title.set("no") },  // not in the write set
        codeOf { _ = try doc.count.value },  // its own write: readable
        codeOf { _ = try ctx.value(doc.item(0)) },
      ]
    }
    try bus.transaction {
      try doc.item(0).set("Intro")
      try doc.item(1).set("Verse")
      try doc.title.set("Songs")
    }
    #expect(results.value == [.contractViolation, .contractViolation, nil, nil])
    #expect(try doc.count.value == 2)
    #expect(try doc.items.values() == ["0": .string("Intro"), "1": .string("Verse")])
    try bus.transaction { try doc.items.removeAll() }
    #expect(try doc.count.value == 0)
    #expect(try doc.items.values().isEmpty)
  }

  @Test func aPropertyOfAGoneBusThrows() throws {
    var bus: Bus? = Bus()
    weak let gone = bus
    let title = try bus!.property("doc.title", as: String.self)
    let scope = try bus!.scope("doc")
    try bus!.transaction { try title.set("x") }
    bus = nil
    #expect(gone == nil)
    expectError(.invalidArgument, ["\"doc.title\"", "deallocated"]) { _ = try title.value }
    expectError(.invalidArgument, ["deallocated"]) { try title.set("y") }
    expectError(.invalidArgument, ["deallocated"]) { _ = try scope.property("a", as: Int.self) }
  }

  @Test func aPropertyThatOutlivesItsBusStillNamesItsKeypath() throws {
    var bus: Bus? = Bus()
    weak let gone = bus
    let title = try bus!.property("doc.title", as: String.self)
    let handle = try bus!.resolve("doc.count")
    let count = try bus!.property(handle, as: Int.self)
    let again = try bus!.property("doc.title", as: String.self)
    try bus!.transaction {
      try title.set("x")
      try count.set(1)
    }
    bus = nil
    #expect(gone == nil)
    // The property names its node without retaining it: once the bus is
    // gone its link keeps the node, so the keypath, the handle, equality
    // and hashing still work, and every use throws naming the keypath.
    #expect(title.keypath == "doc.title" && title.description == "doc.title: String")
    #expect(count.handle == handle && count.handle.keypath == "doc.count")
    #expect(title == again && Set([title, again]).count == 1 && title.handle != count.handle)
    expectError(.invalidArgument, ["property \"doc.title\"", "deallocated"]) { try title.set("y") }
    expectError(.invalidArgument, ["property \"doc.count\"", "deallocated"]) { try count.touch() }
    expectError(.invalidArgument, ["property \"doc.count\"", "deallocated"]) { try count.remove() }
    expectError(.invalidArgument, ["property \"doc.count\"", "deallocated"]) { _ = try count.counter }
  }

  @Test func propertiesScopesAndHandles() throws {
    let bus = Bus(), other = Bus()
    let a = try bus.property("doc.title", as: String.self)
    let b = try bus.property(try Keypath("doc.title"), as: String.self)
    #expect(a == b && a.keypath == "doc.title" && a.description == "doc.title: String")
    #expect(try bus.property(a.handle, as: String.self) == a)
    expectError(.invalidArgument, ["another bus"]) { _ = try other.property(a.handle, as: String.self) }
    expectError(.invalidKeypath) { _ = try bus.property("doc.*", as: Int.self) }
    expectError(.invalidKeypath) { _ = try bus.scope("doc..x") }
    let items = try bus.scope("doc").scope("items")
    #expect(items.prefix == "doc.items" && items.tree == "doc.items.**" && items.children == "doc.items.*")
    #expect(items.keypath("3") == "doc.items.3")
    expectError(.invalidKeypath) { _ = try items.property("*", as: Int.self) }
  }

  @Test func theDocumentModelReadsNaturally() throws {
    let bus = Bus()
    let doc = try Document(bus)
    let seen = Calls()
    try bus.watch(seen, "view", reads: [doc.title.keypath, doc.count.keypath])
    try bus.register(name: "count", reads: [doc.items.tree], writes: [doc.count.keypath]) { _ in
      try doc.count.set(doc.items.values().count)
    }
    try bus.transaction {
      try doc.title.set("Songs")
      for (i, name) in ["Intro", "Verse", "Chorus"].enumerated() { try doc.item(i).set(name) }
    }
    #expect(try doc.count.value == 3)
    #expect(seen.take() == [Call(name: "view", changed: ["doc.title", "doc.count"], txn: 1)])
  }
}
