// SPEC §14 against a naive model: random schemas (random keys over a small
// alphabet with `*`, random types, defaults and constraints, some invalid)
// and random writes, registrations and reads. The model decides each rule
// by brute force over the declarations, as the specification says it;
// the bus must agree on whether the schema validates, on the status of
// every call, and on every read (stored value or default).

import Foundation
import Ordo
import Testing

/// The naive reading of SPEC §14.
struct NaiveSchema {
  struct Decl {
    var key: [String]
    var type: String
    var defaultValue: Value?
    var min: Value?
    var max: Value?
    var choices: [Value]
    var maxLength: Int?
  }
  var decls: [Decl]

  static func less(_ a: Value, _ b: Value) -> Bool {
    switch (a, b) {
    case (.int64(let x), .int64(let y)): x < y
    case (.double(let x), .double(let y)): x < y
    default: false
    }
  }

  /// Whether a value of the declared type is allowed by `d`.
  static func allows(_ d: Decl, _ v: Value) -> Bool {
    if !d.choices.isEmpty && !d.choices.contains(v) { return false }
    if let m = d.min, less(v, m) { return false }
    if let m = d.max, less(m, v) { return false }
    if let n = d.maxLength {
      if case .string(let s) = v, s.utf8.count > n { return false }
      if case .bytes(let b) = v, b.count > n { return false }
    }
    return true
  }

  static func sameRules(_ a: Decl, _ b: Decl) -> Bool {
    a.type == b.type && a.defaultValue == b.defaultValue && a.min == b.min && a.max == b.max && a.choices == b.choices
      && a.maxLength == b.maxLength
  }

  /// Whether the declarations form a valid schema.
  var isValid: Bool {
    for (i, d) in decls.enumerated() {
      let numeric = d.type == "int64" || d.type == "double"
      if (d.min != nil || d.max != nil) && !numeric { return false }
      if !d.choices.isEmpty && !(numeric || d.type == "string") { return false }
      if d.maxLength != nil && d.type != "string" && d.type != "bytes" { return false }
      if d.type == "event" && d.defaultValue != nil { return false }
      for v in [d.defaultValue, d.min, d.max].compactMap({ $0 }) + d.choices where v.typeName != d.type { return false }
      if let a = d.min, let b = d.max, NaiveSchema.less(b, a) { return false }
      if Set(d.choices).count != d.choices.count { return false }
      for c in d.choices where !NaiveSchema.allows(Decl(key: d.key, type: d.type, defaultValue: nil, min: d.min, max: d.max, choices: [], maxLength: d.maxLength), c) {
        return false
      }
      if let v = d.defaultValue, !NaiveSchema.allows(d, v) { return false }
      for e in decls[..<i] {
        if e.key == d.key { return false }
        let overlap = e.key.count == d.key.count && zip(e.key, d.key).allSatisfy { $0 == $1 || $0 == "*" || $1 == "*" }
        if overlap && !NaiveSchema.sameRules(e, d) { return false }
      }
    }
    return true
  }

  func declaration(_ k: [String]) -> Decl? {
    decls.first { $0.key.count == k.count && zip($0.key, k).allSatisfy { $0 == "*" || $0 == $1 } }
  }

  func isPrefix(_ k: [String]) -> Bool {
    decls.contains { $0.key.count >= k.count && zip($0.key, k).allSatisfy { $0 == "*" || $0 == $1 } }
  }

  func matches(_ pattern: [String], tree: Bool) -> Bool {
    decls.contains { d in
      (tree ? d.key.count >= pattern.count : d.key.count == pattern.count)
        && zip(pattern, d.key).allSatisfy { $0 == "*" || $1 == "*" || $0 == $1 }
    }
  }

  /// The status a write gets: nil when allowed.
  func status(_ op: String, _ k: [String], _ v: Value?) -> String? {
    if op == "removeTree" { return isPrefix(k) ? nil : "SCHEMA" }
    guard let d = declaration(k) else { return "SCHEMA" }
    guard op == "set", let v else { return nil }
    if d.type == "event" { return "SCHEMA" }
    if v.typeName != d.type { return "TYPE_MISMATCH" }
    return NaiveSchema.allows(d, v) ? nil : "SCHEMA"
  }
}

@Suite("Differential: schema model vs bus")
struct SchemaDifferentialTests {
  static let segments = ["a", "b", "c"]
  static let types = ["bool", "int64", "double", "string", "bytes", "event"]

  struct Gen {
    var rng: SplitMix64
    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }
    mutating func int(_ r: ClosedRange<Int>) -> Int { Int.random(in: r, using: &rng) }
    mutating func pick<T>(_ a: [T]) -> T { a[int(0...(a.count - 1))] }

    mutating func value(_ type: String) -> Value {
      switch type {
      case "bool": .bool(chance(0.5))
      case "int64": .int64(Int64(int(-3...3)))
      case "double": .double(Double(int(-3...3)) / 2)
      case "string": .string(String(repeating: "s", count: int(0...3)))
      default: .bytes(Array(repeating: 7, count: int(0...3)))
      }
    }

    /// A value of the type, or (sometimes) of another.
    mutating func anyValue(_ type: String) -> Value {
      value(chance(0.8) && type != "event" ? type : pick(Array(SchemaDifferentialTests.types.dropLast())))
    }

    mutating func key(wildcards: Bool) -> [String] {
      (0..<int(1...3)).map { _ in wildcards && chance(0.2) ? "*" : pick(SchemaDifferentialTests.segments) }
    }

    /// A concrete keypath: often one the schema declares (its `*`
    /// segments filled in), else any.
    mutating func key(in model: NaiveSchema) -> [String] {
      guard chance(0.6) else { return key(wildcards: false) }
      return pick(model.decls).key.map { $0 == "*" ? pick(SchemaDifferentialTests.segments) : $0 }
    }

    mutating func declaration() -> NaiveSchema.Decl {
      let type = pick(SchemaDifferentialTests.types)
      var d = NaiveSchema.Decl(key: key(wildcards: true), type: type, defaultValue: nil, min: nil, max: nil, choices: [], maxLength: nil)
      let valueType = type == "event" ? pick(Array(SchemaDifferentialTests.types.dropLast())) : type
      if chance(0.4) { d.defaultValue = chance(0.9) ? value(valueType) : anyValue(valueType) }
      let numeric = type == "int64" || type == "double"
      // Mostly the constraints the type takes, sometimes one it does not.
      if chance(numeric ? 0.3 : 0.03) { d.min = value(chance(0.95) ? valueType : "int64") }
      if chance(numeric ? 0.3 : 0.03) { d.max = value(chance(0.95) ? valueType : "int64") }
      if chance(numeric || type == "string" ? 0.25 : 0.03) { d.choices = (0..<int(1...3)).map { _ in value(valueType) } }
      if chance(type == "string" || type == "bytes" ? 0.3 : 0.03) { d.maxLength = int(0...3) }
      return d
    }
  }

  static func schema(_ decls: [NaiveSchema.Decl]) throws(OrdoError) -> Schema {
    try Schema(
      decls.map { (d) throws(OrdoError) in
        try Schema.Declaration(
          d.key.joined(separator: "."), type: Schema.ValueType(rawValue: d.type)!, default: d.defaultValue, min: d.min, max: d.max,
          choices: d.choices, maxLength: d.maxLength)
      })
  }

  @Test("random schemas and writes agree with the naive model")
  func randomSchemas() throws {
    let count = Env.int("ORDO_DIFF_SEQUENCES", 100) * 3
    var valid = 0
    var codes: [String: Int] = [:]
    for seed in 1...UInt64(count) {
      var g = Gen(rng: SplitMix64(seed: seed &* 7919))
      let model = NaiveSchema(decls: (0..<g.int(1...5)).map { _ in g.declaration() })
      let schema: Schema
      do {
        schema = try Self.schema(model.decls)
        #expect(model.isValid, "seed \(seed): the bus accepts a schema the model refuses: \(model.decls)")
        if !model.isValid { return }
      } catch {
        #expect(!model.isValid, "seed \(seed): the bus refuses a valid schema: \(error)")
        if model.isValid { return }
        continue
      }
      valid += 1
      let bus = Bus(schema: schema)
      var stored: [String: Value] = [:]
      for step in 0..<40 {
        let k = g.key(in: model)
        let key = k.joined(separator: ".")
        let where_ = "seed \(seed) step \(step)"
        switch g.int(0...5) {
        case 0, 1, 2:
          let op = g.pick(["set", "set", "touch", "remove", "removeTree"])
          let v = op == "set" ? g.anyValue(model.declaration(k)?.type ?? g.pick(Self.types)) : nil
          let want = model.status(op, k, v)
          var got: String?
          bus.begin()
          do throws(OrdoError) {
            switch op {
            case "set": try bus.set(key, v!)
            case "touch": try bus.touch(key)
            case "remove": try bus.remove(key)
            default: try bus.removeTree(key)
            }
          } catch { got = error.code.name }
          _ = try? bus.commit()
          codes[got ?? "OK", default: 0] += 1
          #expect(got == want, "\(where_): \(op) \(key) \(v.map { "\($0)" } ?? ""): bus \(got ?? "OK"), model \(want ?? "OK")")
          if got == nil {
            switch op {
            case "set": stored[key] = v
            case "remove": stored[key] = nil
            case "removeTree": stored = stored.filter { !($0.key == key || $0.key.hasPrefix(key + ".")) }
            default: break
            }
          }
        case 3:
          let p = g.key(wildcards: true)
          let tree = g.chance(0.3)
          let pattern = (p + (tree ? ["**"] : [])).joined(separator: ".")
          let want = model.matches(p, tree: tree)
          var got = true
          do throws(OrdoError) {
            let h = try bus.register(name: "c\(step)", reads: [pattern]) { _ in }
            try bus.unregister(h.id)
          } catch {
            #expect(error.code == .schema, "\(where_): \(error)")
            got = false
          }
          #expect(got == want, "\(where_): register reading \(pattern): bus \(got), model \(want)")
        default:
          let want = stored[key] ?? model.declaration(k)?.defaultValue
          #expect(try bus.value(key) == want, "\(where_): value of \(key)")
          #expect(try bus.isStored(key) == (stored[key] != nil), "\(where_): isStored \(key)")
        }
      }
    }
    print("schema differential: \(valid) valid schemas of \(count); \(codes.sorted { $0.key < $1.key })")
    #expect(valid * 4 >= count, "too few valid schemas")
    for code in ["OK", "SCHEMA", "TYPE_MISMATCH"] { #expect(codes[code, default: 0] > 0, "no \(code)") }
  }
}
