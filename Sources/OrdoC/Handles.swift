import COrdo
import Ordo

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Handles (SPEC §13; include/ordo.h "Handles")

// An `ordo_handle *` is the core's one-word form of a handle
// (``HandleAddress``): the address of its keypath's state in the bus's
// store, which leads back to its bus. It is owned by the bus (the store
// keeps the keypath for the bus's lifetime, and resolving the keypath again
// gives the same pointer): the caller has nothing to free. A C object per
// handle, as before, cost a write at 100 000 keypaths one more cache miss
// (docs/performance.md).

@c @implementation
public func ordo_resolve(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let k = try keypathArg(keypath)
    let out = try outArg(out, "out")
    out.pointee = OpaquePointer(try box.bus.resolveAddress(k).raw)
  }
}

@c @implementation
public func ordo_handle_keypath(_ handle: OpaquePointer?) -> UnsafePointer<CChar>? {
  guard let handle else {
    setLastError("handle is NULL")
    return nil
  }
  return HandleAddress(raw: UnsafeRawPointer(handle)).keypathCString
}

/// A call through a handle: checks the handle, then runs `body` (which
/// checks the other arguments) and returns its status.
@inline(__always)
private func withHandle(_ handle: OpaquePointer?, _ body: (HandleAddress) throws(OrdoError) -> Void) -> ordo_status {
  guard let handle else { return report(invalid("handle is NULL")) }
  return guarded { () throws(OrdoError) in try body(HandleAddress(raw: UnsafeRawPointer(handle))) }
}

@c @implementation
public func ordo_handle_set_bool(_ handle: OpaquePointer?, _ value: Bool) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.set(.bool(value)) }
}

@c @implementation
public func ordo_handle_set_int64(_ handle: OpaquePointer?, _ value: Int64) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.set(.int64(value)) }
}

@c @implementation
public func ordo_handle_set_double(_ handle: OpaquePointer?, _ value: Double) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.set(.double(value)) }
}

@c @implementation
public func ordo_handle_set_string(_ handle: OpaquePointer?, _ utf8: UnsafePointer<CChar>?) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.set(try stringValue(utf8, for: h.keypath)) }
}

@c @implementation
public func ordo_handle_set_bytes(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ len: Int) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.set(try bytesValue(data, len, for: h.keypath)) }
}

@c @implementation
public func ordo_handle_touch(_ handle: OpaquePointer?) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.touch() }
}

@c @implementation
public func ordo_handle_remove(_ handle: OpaquePointer?) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.remove() }
}

/// Reads through a handle after checking the handle and `out`; `extract`
/// converts the value or returns nil on a type mismatch.
@inline(__always)
private func get<T>(
  _ handle: OpaquePointer?, _ out: UnsafeMutablePointer<T>?, _ type: String, _ extract: (Value) throws(OrdoError) -> T?
) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in
    let out = try outArg(out, "out")
    guard let value = try h.value() else { throw OrdoError(.notFound, "\"\(h.keypath)\" holds no value") }
    guard let x = try extract(value) else {
      throw OrdoError(.typeMismatch, "\"\(h.keypath)\" holds \(Value.withArticle(value.typeName)), not \(Value.withArticle(type))")
    }
    out.pointee = x
  }
}

@c @implementation
public func ordo_handle_get_type(_ handle: OpaquePointer?, _ out: UnsafeMutablePointer<ordo_type>?) -> ordo_status {
  get(handle, out, "", CValue.type)
}

@c @implementation
public func ordo_handle_get_bool(_ handle: OpaquePointer?, _ out: UnsafeMutablePointer<Bool>?) -> ordo_status {
  get(handle, out, "bool", CValue.bool)
}

@c @implementation
public func ordo_handle_get_int64(_ handle: OpaquePointer?, _ out: UnsafeMutablePointer<Int64>?) -> ordo_status {
  get(handle, out, "int64", CValue.int64)
}

@c @implementation
public func ordo_handle_get_double(_ handle: OpaquePointer?, _ out: UnsafeMutablePointer<Double>?) -> ordo_status {
  get(handle, out, "double", CValue.double)
}

@c @implementation
public func ordo_handle_get_string(_ handle: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> ordo_status {
  get(handle, out, "string", CValue.string)
}

@c @implementation
public func ordo_handle_get_bytes(
  _ handle: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ len: UnsafeMutablePointer<Int>?
) -> ordo_status {
  guard let len else { return report(invalid("len is NULL")) }
  var count = 0
  let st = get(handle, out, "bytes") { (v) throws(OrdoError) in try CValue.bytes(v, &count) }
  if st == ORDO_OK { len.pointee = count }
  return st
}

@c @implementation
public func ordo_handle_get_counter(_ handle: OpaquePointer?, _ out: UnsafeMutablePointer<UInt64>?) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in
    let out = try outArg(out, "out")
    out.pointee = try h.counter()
  }
}

@c @implementation
public func ordo_handle_counter(_ handle: OpaquePointer?) -> UInt64 {
  var n: UInt64 = 0
  _ = ordo_handle_get_counter(handle, &n)
  return n
}
