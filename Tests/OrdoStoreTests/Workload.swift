import Ordo
import OrdoStore

/// The crash workload of ordo-store-tool (Sources/ordo-store-tool/main.swift),
/// replayed here independently: transaction `t` changes these keypaths.
func workload(_ t: UInt64) -> [(String, Value?)] {
  if t % 17 == 0 { return [] }
  var out: [(String, Value?)] = [("k.n\(t % 37)", .int64(Int64(t))), ("s.n\(t % 11)", .string("v\(t) ü"))]
  if t % 5 == 0 { out.append(("k.n\((t + 1) % 37)", nil)) }
  if t % 7 == 0 { out.append(("d.n\(t % 3)", .double(Double(t) / 3))) }
  if t % 13 == 0 { out.append(("b.blob", .bytes((0..<(t % 50)).map { UInt8(truncatingIfNeeded: $0 &* t) }))) }
  if t % 19 == 0 { out.append(("f.flag", .bool(t % 2 == 0))) }
  return out
}

/// The state after transactions 1…last of the workload.
func replay(_ last: UInt64) -> [StoredKeypath] {
  var state: [String: StoredKeypath] = [:]
  if last > 0 {
    for t in 1...last {
      for (k, v) in workload(t) {
        let counter = (state[k]?.counter ?? 0) + 1
        state[k] = StoredKeypath(keypath: k, value: v, counter: counter, changedAt: t)
      }
    }
  }
  return state.values.sorted { Array($0.keypath.utf8).lexicographicallyPrecedes($1.keypath.utf8) }
}
