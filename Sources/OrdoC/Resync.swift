import COrdo
import Ordo

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Resynchronization (include/ordo.h "Resynchronization"; SPEC §10)

@c @implementation
public func ordo_changes(
  _ bus: OpaquePointer?, _ since: UInt64, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n_patterns: Int,
  _ callback: ordo_change_callback?, _ userData: UnsafeMutableRawPointer?, _ out_txn: UnsafeMutablePointer<UInt64>?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    guard let callback else { throw invalid("callback is NULL") }
    let list = try stringArray(patterns, n_patterns, "patterns", code: .invalidKeypath, owner: "")
    // One consistent read, then the callbacks without the bus's lock.
    let changes = try box.bus.changes(since: since, list)
    var keys = Array(changes.values.keys) + Array(changes.removed)
    keys.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    for k in keys {
      let counter = changes.counters[k] ?? 0
      let changedAt = changes.changedAt[k] ?? 0
      guard let v = changes.values[k] else {
        callback(k, nil, counter, changedAt, userData)
        continue
      }
      withCValue(v) { cv in
        withUnsafePointer(to: cv) { callback(k, $0, counter, changedAt, userData) }
      }
    }
    out_txn?.pointee = changes.transaction
  }
}

/// Calls `body` with the C view of a value (strings and bytes valid during
/// the call).
private func withCValue(_ v: Value, _ body: (ordo_value) -> Void) {
  var c = ordo_value(type: ORDO_TYPE_BOOL, b: false, i: 0, d: 0, s: nil, bytes: nil, len: 0)
  switch v {
  case .bool(let x):
    c.b = x
    body(c)
  case .int64(let x):
    c.type = ORDO_TYPE_INT64
    c.i = x
    body(c)
  case .double(let x):
    c.type = ORDO_TYPE_DOUBLE
    c.d = x
    body(c)
  case .string(let s):
    c.type = ORDO_TYPE_STRING
    s.withCString { p in
      c.s = p
      c.len = s.utf8.count
      body(c)
    }
  case .bytes(let b):
    c.type = ORDO_TYPE_BYTES
    b.withUnsafeBytes { p in
      c.bytes = p.baseAddress
      c.len = p.count
      body(c)
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
