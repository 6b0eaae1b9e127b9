import Testing

@testable import Ordo

/// SPEC §2: values, compared by type and content, doubles bit for bit.
@Suite struct ValueTests {
  @Test func doublesCompareBitForBit() {
    #expect(Value.double(0.0) != Value.double(-0.0))
    #expect(Value.double(-0.0) == Value.double(-0.0))
    #expect(Value.double(.nan) == Value.double(.nan))
    #expect(Value.double(Double(nan: 1, signaling: false)) != Value.double(Double(nan: 2, signaling: false)))
    #expect(Value.double(1.5) == Value.double(1.5))
    #expect(Value.double(1.5) != Value.double(1.5.nextUp))
  }

  @Test func typeIsPartOfTheValue() {
    #expect(Value.int64(1) != Value.double(1.0))
    #expect(Value.bool(true) != Value.int64(1))
    #expect(Value.string("ab") != Value.bytes([0x61, 0x62]))
    #expect(Value.string("") != Value.bytes([]))
    // Strings compare byte for byte, not by Unicode canonical equivalence.
    #expect(Value.string("é") != Value.string("e\u{301}"))
  }

  /// A string with U+0000 is refused on every write path (C and D-Bus
  /// strings cannot carry it), and nothing changes.
  @Test func aStringWithANulCharacterIsRefused() throws {
    let bus = Bus()
    let p = try bus.property("p", as: String.self)
    let h = try bus.resolve("h")
    try bus.commitWith { try bus.set("k", .string("ok")) }
    let writes: [(String, () throws(OrdoError) -> Void)] = [
      ("k", { () throws(OrdoError) in try bus.set("k", .string("a\u{0}b")) }),
      ("n", { () throws(OrdoError) in try bus.set("n", .string("\u{0}")) }),
      ("p", { () throws(OrdoError) in try p.set("x\u{0}") }),
      ("h", { () throws(OrdoError) in try bus.set(h, .string("é\u{0}")) }),
      ("k", { () throws(OrdoError) in try bus.write([.set("k2", .int64(1)), .set("k", .string("a\u{0}"))]) }),
    ]
    for (k, write) in writes {
      bus.begin()
      let e = #expect(throws: OrdoError.self) { try write() }
      #expect(e?.code == .invalidArgument)
      #expect(e?.message.contains("\"\(k)\" holds a NUL character (U+0000)") == true, "\(e?.message ?? "")")
      #expect(try bus.commit() == 0)
    }
    #expect(try bus.value("k") == .string("ok"))
    #expect(try bus.value("k2") == nil)
    #expect(bus.transactionID == 1)
    #expect("a\u{0}b".nulOffset == 1)
    #expect("é\u{0}".nulOffset == 2)
    #expect("abc".nulOffset == nil)
  }

  @Test func hashAgreesWithEquality() {
    let set: Set<Value> = [.double(0.0), .double(-0.0), .double(.nan), .double(.nan), .int64(1), .double(1)]
    #expect(set.count == 5)
  }

  @Test func stringsHashAndCompareByBytes() {
    let long = String(repeating: "ab", count: 40_000)
    #expect(Value.string(long) == Value.string(String(long)))
    #expect(Value.string(long) != Value.string(long + "c"))
    #expect(Value.string("") == Value.string(""))
    #expect(Value.string("a\u{0}b") != Value.string("a\u{0}c"))
    let set: Set<Value> = [.string("é"), .string("e\u{301}"), .string("é"), .string(long), .string(String(long))]
    #expect(set.count == 3)
  }

  /// The store's inlined comparison (scalars first) agrees with `==` on
  /// optional values for every pair of types and the edge cases of each.
  @Test func inlineComparisonAgreesWithEquality() {
    let values: [Value?] = [
      nil, .bool(false), .bool(true), .int64(0), .int64(1), .int64(.min), .double(0.0), .double(-0.0),
      .double(.nan), .double(Double(nan: 2, signaling: false)), .double(1), .string(""), .string("a"),
      .string(String(repeating: "x", count: 40)), .bytes([]), .bytes([0x61]),
    ]
    for a in values {
      for b in values {
        #expect(Value.same(a, b) == (a == b), "\(String(describing: a)) vs \(String(describing: b))")
        #expect(Value.same(a, b) == Value.same(b, a))
      }
      #expect(Value.same(a, a))
    }
    #expect(!Value.same(.int64(1), .double(1)))
    #expect(!Value.same(.double(0.0), .double(-0.0)))
    #expect(Value.same(.string(String(repeating: "x", count: 40)), .string(String(repeating: "x", count: 40))))
  }

  @Test func names() {
    #expect(Value.bool(true).typeName == "bool")
    #expect(Value.int64(1).typeName == "int64")
    #expect(Value.double(1).typeName == "double")
    #expect(Value.string("").typeName == "string")
    #expect(Value.bytes([]).typeName == "bytes")
    #expect(Value.string("a").description == "string \"a\"")
    #expect(Value.int64(5).description == "int64 5")
    #expect(Value.bytes([1, 2]).description == "bytes 2")
  }

  @Test func errorCodesMatchTheCABI() {
    #expect(OrdoError.Code.invalidArgument.rawValue == 1)
    #expect(OrdoError.Code.contractViolation.rawValue == 6)
    #expect(OrdoError.Code.internal.rawValue == 99)
    #expect(OrdoError.Code(name: "ORDER_CONFLICT") == .orderConflict)
    #expect(OrdoError.Code(name: "nope") == nil)
    #expect(OrdoError.Code.orderConflict.camelName == "OrderConflict")
    #expect(OrdoError(.cycle, "m").description == "CYCLE: m")
  }
}
