// libFuzzer target: the schema reader (SPEC §14, docs/schema.md). Any bytes
// given to `Schema(json:)` must give a schema or an `OrdoError` with code
// `schema`, never a crash; a schema that reads must write a canonical text
// that reads back to an equal schema with the same text, and a bus made
// with it must answer lookups, registrations and writes of the keypaths
// the input names without crashing.

import CLibFuzzer
import Foundation
import Ordo

@main enum SchemaFuzz {
  static func main() { exit(ordo_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, schemaFuzz)) }
}

func check(_ ok: Bool, _ what: @autoclosure () -> String) {
  if !ok { fatalError("schema fuzz: \(what())") }
}

func schemaFuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  let bytes = Array(UnsafeBufferPointer(start: data, count: size))
  let schema: Schema
  do {
    schema = try Schema(json: bytes)
  } catch {
    check(error.code == .schema, "a refusal with code \(error.code.name): \(error.message)")
    check(!error.message.isEmpty, "a refusal without a message")
    return 0
  }
  let text = schema.json
  guard let again = try? Schema(json: text) else { fatalError("schema fuzz: the canonical text does not read back:\n\(text)") }
  check(again == schema, "the canonical text reads back to another schema:\n\(text)")
  check(again.json == text, "the canonical text is not stable:\n\(text)\n---\n\(again.json)")
  // Every declared keypath, with its '*' segments filled in, is declared;
  // a bus with the schema takes its default and refuses a misspelt one.
  let bus = Bus(schema: schema)
  bus.begin()
  for d in schema.declarations.prefix(8) {
    let concrete = d.keypath.split(separator: ".").map { $0 == "*" ? "e1" : String($0) }.joined(separator: ".")
    check(schema.declaration(for: concrete) != nil, "\(concrete) is not declared by \(d.keypath)")
    check((try? bus.value(concrete)) == d.defaultValue, "\(concrete) reads another value than its default")
    if let v = d.defaultValue { _ = try? bus.set(concrete, v) }
    _ = try? bus.register(name: "r-\(concrete)", reads: [d.keypath]) { _ in }
    if let e = (Result { () throws(OrdoError) in try bus.touch(concrete + "x") }).failure {
      check(e.code == .schema, "a write of an undeclared keypath: \(e)")
    }
  }
  _ = try? bus.commit()
  return 0
}

extension Result {
  var failure: Failure? {
    if case .failure(let e) = self { return e }
    return nil
  }
}
