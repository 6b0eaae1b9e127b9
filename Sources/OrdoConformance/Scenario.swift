import Foundation
import Ordo

/// A conformance scenario in the language-neutral JSON format of
/// `conformance/README.md`: a name, a sentence about the rule it shows, and
/// steps run in order against a fresh bus.
public struct Scenario: Sendable {
  /// Short name.
  public let name: String
  /// Which rule it shows.
  public let about: String
  /// The steps, as parsed JSON objects.
  let steps: [Step]
  /// Where it came from, for messages.
  public let source: String
  /// The schema its bus is made with (the scenario's `schema` field, a
  /// schema document inline), if any.
  public let schema: Schema?

  /// Parses a scenario file's contents.
  public init(json data: Data, source: String) throws {
    guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
      throw ScenarioError("\(source): a scenario is a JSON object")
    }
    guard let name = object["name"] as? String else { throw ScenarioError("\(source): missing \"name\"") }
    guard let steps = object["steps"] as? [Any] else { throw ScenarioError("\(source): missing \"steps\"") }
    self.name = name
    self.about = object["about"] as? String ?? ""
    self.source = source
    if let s = object["schema"] {
      guard JSONSerialization.isValidJSONObject(s) else { throw ScenarioError("\(source): \"schema\" is a schema document (an object)") }
      do {
        self.schema = try Schema(json: try JSONSerialization.data(withJSONObject: s))
      } catch let e as OrdoError {
        throw ScenarioError("\(source): \"schema\" does not validate: \(e.message)")
      }
    } else {
      self.schema = nil
    }
    var parsed: [Step] = []
    for (i, s) in steps.enumerated() {
      parsed.append(try Step(s, where: "\(source): step \(i + 1)"))
    }
    self.steps = parsed
  }

  /// A fresh bus for a run: with the scenario's schema, if it has one.
  func makeBus() -> Bus { schema.map { Bus(schema: $0) } ?? Bus() }

  /// Loads every `*.json` file of a directory, sorted by file name.
  public static func load(directory: String) throws -> [Scenario] {
    let url = URL(fileURLWithPath: directory)
    let files = try FileManager.default.contentsOfDirectory(atPath: directory)
      .filter { $0.hasSuffix(".json") }.sorted()
    return try files.map { try Scenario(json: Data(contentsOf: url.appendingPathComponent($0)), source: url.appendingPathComponent($0).path) }
  }
}

/// A malformed scenario or a scenario whose outcome differs from what it
/// expects; the message says which step and what differed.
public struct ScenarioError: Error, CustomStringConvertible, Sendable {
  /// What went wrong.
  public let message: String
  init(_ message: String) { self.message = message }
  /// The message.
  public var description: String { message }
}

/// An expected contract call.
struct ExpectedCall: Sendable {
  let contract: String
  let changed: Set<String>?
  let txn: UInt64?
}

/// One step (or `on_notify` action) of a scenario.
struct Step: @unchecked Sendable {
  let op: String
  let fields: [String: Any]
  let expectError: String?
  let expectCalls: [ExpectedCall]?
  let onNotify: [Step]
  let onlyTxn: UInt64?
  let location: String

  init(_ any: Any, where location: String) throws {
    guard let o = any as? [String: Any], let op = o["op"] as? String else {
      throw ScenarioError("\(location): a step is an object with \"op\"")
    }
    let known = [
      "register", "unregister", "begin", "commit", "rollback", "set", "touch", "remove", "remove_tree", "get", "counter",
      "expect", "owner", "begin_owned", "release",
    ]
    guard known.contains(op) else { throw ScenarioError("\(location): unknown op \"\(op)\"") }
    self.op = op
    self.fields = o
    self.location = "\(location) (\(op)\((o["key"] ?? o["name"]).map { " \($0)" } ?? ""))"
    if let e = o["expect_error"] {
      guard let e = e as? String, OrdoError.Code(name: e) != nil else {
        throw ScenarioError("\(location): expect_error must be a status name such as \"CYCLE\"")
      }
      expectError = e
    } else {
      expectError = nil
    }
    if let calls = o["expect_calls"] {
      guard let list = calls as? [[String: Any]] else { throw ScenarioError("\(location): expect_calls is a list of objects") }
      expectCalls = try list.map { c in
        guard let name = c["contract"] as? String else { throw ScenarioError("\(location): an expected call needs \"contract\"") }
        let changed = (c["changed"] as? [String]).map(Set.init)
        let txn = (c["txn"] as? NSNumber)?.uint64Value
        return ExpectedCall(contract: name, changed: changed, txn: txn)
      }
    } else {
      expectCalls = nil
    }
    let actions = o["on_notify"] as? [Any] ?? []
    onNotify = try actions.enumerated().map { try Step($1, where: "\(location) on_notify action \($0 + 1)") }
    onlyTxn = (o["only_txn"] as? NSNumber)?.uint64Value
  }

  func string(_ key: String) throws -> String {
    guard let s = fields[key] as? String else { throw ScenarioError("\(location): missing string \"\(key)\"") }
    return s
  }

  func strings(_ key: String) throws -> [String] {
    guard let a = fields[key] else { return [] }
    guard let s = a as? [String] else { throw ScenarioError("\(location): \"\(key)\" must be a list of strings") }
    return s
  }

  func value(_ key: String) throws -> Value {
    try Step.decodeValue(fields[key], at: "\(location) \"\(key)\"")
  }

  /// Decodes a typed value: `{"int64": 5}` and the like.
  static func decodeValue(_ any: Any?, at location: String) throws -> Value {
    guard let o = any as? [String: Any], o.count == 1, let (type, raw) = o.first else {
      throw ScenarioError("\(location): a value is an object with one key: bool, int64, double, string or bytes")
    }
    switch type {
    case "bool":
      if let n = raw as? NSNumber, String(cString: n.objCType) == "c" { return .bool(n.boolValue) }
    case "int64":
      if let n = raw as? NSNumber { return .int64(n.int64Value) }
    case "double":
      if let n = raw as? NSNumber { return .double(n.doubleValue) }
    case "string":
      if let s = raw as? String { return .string(s) }
    case "bytes":
      if let s = raw as? String, let bytes = Value.bytes(hex: s) { return .bytes(bytes) }
    default:
      break
    }
    throw ScenarioError("\(location): not a valid \(type) value")
  }
}
