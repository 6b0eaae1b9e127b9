// Generated scenarios as plain values, and their rendering in the
// conformance JSON format (conformance/README.md).

import Foundation
import Ordo

/// An expected contract call.
struct Call: Equatable, CustomStringConvertible {
  var contract: String
  var changed: [String]
  var txn: UInt64

  var description: String { "\(contract) \(changed.sorted()) txn \(txn)" }
}

/// One step or `on_notify` action of a generated scenario. The generator
/// fills the operation; the model fills the expectations.
struct GStep {
  var op: String
  var key: String?
  var value: Value?
  var name: String?
  var reads: [String] = []
  var writes: [String] = []
  var priority: Int32?
  var notifyInitial = false
  var onNotify: [GStep] = []
  var onlyTxn: UInt64?
  /// The counter of an `expect` step.
  var counter: UInt64?

  // Expectations.
  var expectError: String?
  var expectValue: Value?
  var expectCounter: UInt64?
  var expectTxn: UInt64?
  var expectCalls: [Call]?

  init(_ op: String, key: String? = nil, value: Value? = nil, name: String? = nil) {
    self.op = op
    self.key = key
    self.value = value
    self.name = name
  }

  mutating func clearExpectations() {
    expectError = nil
    expectValue = nil
    expectCounter = nil
    expectTxn = nil
    expectCalls = nil
    for i in onNotify.indices { onNotify[i].clearExpectations() }
  }

  /// Number of steps and actions, nested ones included.
  var size: Int { 1 + onNotify.reduce(0) { $0 + $1.size } }
}

enum JSONText {
  static func string(_ s: String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      default:
        if scalar.value < 0x20 { out += String(format: "\\u%04x", scalar.value) } else { out.unicodeScalars.append(scalar) }
      }
    }
    return out + "\""
  }

  static func strings(_ a: [String]) -> String { "[" + a.map(string).joined(separator: ", ") + "]" }

  static func value(_ v: Value) -> String {
    switch v {
    case .bool(let b): "{\"bool\": \(b)}"
    case .int64(let i): "{\"int64\": \(i)}"
    case .double(let d): "{\"double\": \(d)}"
    case .string(let s): "{\"string\": \(string(s))}"
    case .bytes(let b): "{\"bytes\": \"\(b.map { String(format: "%02x", $0) }.joined())\"}"
    }
  }

  static func step(_ s: GStep, indent: String) -> String {
    var f: [String] = ["\"op\": \(string(s.op))"]
    if let n = s.name { f.append("\"name\": \(string(n))") }
    if s.op == "register" {
      f.append("\"reads\": \(strings(s.reads))")
      f.append("\"writes\": \(strings(s.writes))")
      if let p = s.priority { f.append("\"priority\": \(p)") }
      if s.notifyInitial { f.append("\"flags\": [\"notify_initial\"]") }
    }
    if let k = s.key { f.append("\"key\": \(string(k))") }
    if let v = s.value { f.append("\"value\": \(value(v))") }
    if let n = s.counter { f.append("\"counter\": \(n)") }
    if let t = s.onlyTxn { f.append("\"only_txn\": \(t)") }
    if let e = s.expectError { f.append("\"expect_error\": \(string(e))") }
    if let v = s.expectValue { f.append("\"expect\": \(value(v))") }
    if let c = s.expectCounter { f.append("\"expect\": \(c)") }
    if let t = s.expectTxn { f.append("\"expect_txn\": \(t)") }
    var out = indent + "{" + f.joined(separator: ", ")
    if let calls = s.expectCalls {
      if calls.isEmpty {
        out += ", \"expect_calls\": []"
      } else {
        let rendered = calls.map {
          "\(indent)  {\"contract\": \(string($0.contract)), \"changed\": \(strings($0.changed)), \"txn\": \($0.txn)}"
        }
        out += ", \"expect_calls\": [\n" + rendered.joined(separator: ",\n") + "\n\(indent)]"
      }
    }
    if !s.onNotify.isEmpty {
      out += ", \"on_notify\": [\n" + s.onNotify.map { step($0, indent: indent + "  ") }.joined(separator: ",\n") + "\n\(indent)]"
    }
    return out + "}"
  }

  static func scenario(name: String, about: String, steps: [GStep]) -> String {
    "{\n  \"name\": \(string(name)),\n  \"about\": \(string(about)),\n  \"steps\": [\n"
      + steps.map { step($0, indent: "    ") }.joined(separator: ",\n") + "\n  ]\n}\n"
  }
}
