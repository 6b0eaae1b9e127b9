import COrdo
import Ordo

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Resynchronization and snapshots (include/ordo.h "Resynchronization"; SPEC §10)

@c @implementation
public func ordo_changes(
  _ bus: OpaquePointer?, _ since: UInt64, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n_patterns: Int,
  _ callback: ordo_change_callback?, _ userData: UnsafeMutableRawPointer?, _ out_txn: UnsafeMutablePointer<UInt64>?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let (core, report, list) = try readArguments(bus, callback, patterns, n_patterns)
    // One consistent read, then the callbacks without the bus's lock.
    let changes = try core.changes(since: since, list)
    for k in inKeypathOrder(Array(changes.values.keys) + changes.removed) {
      withCValue(changes.values[k]) { report(k, $0, changes.counters[k] ?? 0, changes.changedAt[k] ?? 0, userData) }
    }
    out_txn?.pointee = changes.transaction
  }
}

@c @implementation
public func ordo_snapshot(
  _ bus: OpaquePointer?, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n_patterns: Int,
  _ callback: ordo_snapshot_callback?, _ userData: UnsafeMutableRawPointer?, _ out_txn: UnsafeMutablePointer<UInt64>?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let (core, report, list) = try readArguments(bus, callback, patterns, n_patterns)
    // One consistent read, then the callbacks without the bus's lock.
    let snapshot = try core.snapshot(list)
    for k in inKeypathOrder(Set(snapshot.values.keys).union(snapshot.counters.keys)) {
      withCValue(snapshot.values[k]) { report(k, $0, snapshot.counters[k] ?? 0, userData) }
    }
    out_txn?.pointee = snapshot.transaction
  }
}

/// The bus, the callback and the patterns of a read that reports keypaths
/// through a callback.
private func readArguments<Callback>(
  _ bus: OpaquePointer?, _ callback: Callback?, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n_patterns: Int
) throws(OrdoError) -> (Bus, Callback, [String]) {
  let box = try CBus.from(bus)
  guard let callback else { throw invalid("callback is NULL") }
  return (box.bus, callback, try stringArray(patterns, n_patterns, "patterns", code: .invalidKeypath, owner: ""))
}

/// The keypaths sorted by their UTF-8 bytes: the order the callbacks see.
func inKeypathOrder(_ keys: some Sequence<String>) -> [String] {
  keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
}

/// Calls `body` with the C view of a value, NULL for none (strings and bytes
/// valid during the call).
func withCValue(_ v: Value?, _ body: (UnsafePointer<ordo_value>?) -> Void) {
  var c = ordo_value(type: ORDO_TYPE_BOOL, b: false, i: 0, d: 0, s: nil, bytes: nil, len: 0)
  switch v {
  case nil:
    body(nil)
  case .bool(let x)?:
    c.b = x
    body(&c)
  case .int64(let x)?:
    c.type = ORDO_TYPE_INT64
    c.i = x
    body(&c)
  case .double(let x)?:
    c.type = ORDO_TYPE_DOUBLE
    c.d = x
    body(&c)
  case .string(let s)?:
    c.type = ORDO_TYPE_STRING
    s.withCString { p in
      c.s = p
      c.len = s.utf8.count
      body(&c)
    }
  case .bytes(let b)?:
    c.type = ORDO_TYPE_BYTES
    b.withUnsafeBytes { p in
      c.bytes = p.baseAddress
      c.len = p.count
      body(&c)
    }
  }
}

@c @implementation
public func ordo_get_epoch(_ bus: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let out = try outArg(out, "out")
    guard let p = strdup(box.bus.epoch) else { throw outOfMemory(37) }
    out.pointee = p
  }
}
