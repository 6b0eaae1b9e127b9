// A client's reading of `Notify` signals: every value type through a real
// service.
import Ordo
import OrdoDBus
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Test func notifyCarriesEveryValueType() throws {
  let served = try ServedBus()
  defer { served.stop() }
  let client = served.client
  #expect(try client.commit(set: [("v.gone", .int64(1))]) == 1)
  var got: [RemoteNotification] = []
  try client.register(name: "all", reads: ["v.**"]) { got.append($0) }
  let long = String(repeating: "é", count: 300)
  let values: [String: Value] = [
    "v.yes": .bool(true), "v.no": .bool(false), "v.min": .int64(.min), "v.half": .double(0.5), "v.negzero": .double(-0.0),
    "v.text": .string("héllo"), "v.empty": .string(""), "v.long": .string(long), "v.raw": .bytes([0, 1, 255]), "v.none": .bytes([]),
  ]
  let txn = try client.commit(set: values.sorted { $0.key < $1.key }, remove: ["v.gone"])
  let deadline = time(nil) + 10
  while got.isEmpty && time(nil) < deadline { client.process(timeoutMs: 100) }
  let note = try #require(got.first)
  #expect(note.transaction == txn)
  #expect(Set(note.changed) == Set(values.keys).union(["v.gone"]))
  #expect(note.values == values)
  #expect(note.values["v.negzero"].map { if case .double(let d) = $0 { d.sign == .minus } else { false } } == true)
}
