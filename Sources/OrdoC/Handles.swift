import COrdo
import Ordo

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Handles (SPEC §13; include/ordo.h "Handles")

/// What an `ordo_handle *` points to: a core handle, its bus, and its
/// keypath as a C string. Owned by its bus's `CBus` (one per keypath,
/// freed with the bus): the caller has nothing to free.
final class CHandle {
  let handle: Handle
  /// Not retained: the bus owns its handles.
  unowned(unsafe) let box: CBus
  /// The core bus (`box.bus`), held here so that a write through the handle
  /// reaches it with no retain (the core bus does not know this object:
  /// no cycle).
  let bus: Bus
  let keypath: UnsafeMutablePointer<CChar>

  init(_ handle: Handle, _ box: CBus) {
    self.handle = handle
    self.box = box
    bus = box.bus
    keypath = strdup(handle.keypath)
  }

  deinit { free(keypath) }

  /// The handle behind a pointer, or INVALID_ARGUMENT for NULL.
  static func from(_ p: OpaquePointer?) throws(OrdoError) -> CHandle {
    guard let p else { throw invalid("handle is NULL") }
    return Unmanaged<CHandle>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
  }
}

@c @implementation
public func ordo_resolve(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let k = try keypathArg(keypath)
    let out = try outArg(out, "out")
    let h = box.handle(for: try box.bus.resolve(k))
    out.pointee = OpaquePointer(Unmanaged.passUnretained(h).toOpaque())
  }
}

@c @implementation
public func ordo_handle_keypath(_ handle: OpaquePointer?) -> UnsafePointer<CChar>? {
  guard let h = try? CHandle.from(handle) else {
    setLastError("handle is NULL")
    return nil
  }
  return UnsafePointer(h.keypath)
}

/// A call through a handle: checks the handle, then runs `body` (which
/// checks the other arguments) and returns its status. The handle is not
/// retained: its bus owns it for the bus's lifetime, which
/// covers the call (include/ordo.h).
@inline(__always)
private func withHandle(_ handle: OpaquePointer?, _ body: (CHandle) throws(OrdoError) -> Void) -> ordo_status {
  guard let handle else { return report(invalid("handle is NULL")) }
  return Unmanaged<CHandle>.fromOpaque(UnsafeRawPointer(handle))._withUnsafeGuaranteedRef { h in
    guarded { () throws(OrdoError) in try body(h) }
  }
}

@c @implementation
public func ordo_handle_set_bool(_ handle: OpaquePointer?, _ value: Bool) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.bus.set(h.handle, .bool(value)) }
}

@c @implementation
public func ordo_handle_set_int64(_ handle: OpaquePointer?, _ value: Int64) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.bus.set(h.handle, .int64(value)) }
}

@c @implementation
public func ordo_handle_set_double(_ handle: OpaquePointer?, _ value: Double) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.bus.set(h.handle, .double(value)) }
}

@c @implementation
public func ordo_handle_set_string(_ handle: OpaquePointer?, _ utf8: UnsafePointer<CChar>?) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in
    let what = "the string value for \"\(h.handle.keypath)\""
    guard let utf8 else { throw invalid("\(what) is NULL (use \"\" for the empty string)") }
    try h.bus.set(h.handle, .string(try stringArg(utf8, what)))
  }
}

@c @implementation
public func ordo_handle_set_bytes(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ len: Int) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in
    let k = h.handle.keypath
    if len == 0 { return try h.bus.set(h.handle, .bytes([])) }
    guard len > 0 else { throw invalid("bytes length \(UInt(bitPattern: len)) for \"\(k)\" is too large") }
    guard let data else { throw invalid("bytes data for \"\(k)\" is NULL but its length is \(len)") }
    try h.bus.set(h.handle, .bytes(Array(UnsafeRawBufferPointer(start: data, count: len))))
  }
}

@c @implementation
public func ordo_handle_touch(_ handle: OpaquePointer?) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.bus.touch(h.handle) }
}

@c @implementation
public func ordo_handle_remove(_ handle: OpaquePointer?) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in try h.bus.remove(h.handle) }
}

/// Reads through a handle after checking the handle and `out`; `extract`
/// converts the value or returns nil on a type mismatch.
@inline(__always)
private func get<T>(
  _ handle: OpaquePointer?, _ out: UnsafeMutablePointer<T>?, _ type: String, _ extract: (Value) throws(OrdoError) -> T?
) -> ordo_status {
  withHandle(handle) { (h) throws(OrdoError) in
    let out = try outArg(out, "out")
    guard let value = try h.bus.value(h.handle) else { throw OrdoError(.notFound, "\"\(h.handle.keypath)\" holds no value") }
    guard let x = try extract(value) else {
      throw OrdoError(.typeMismatch, "\"\(h.handle.keypath)\" holds \(described(value.typeName)), not \(described(type))")
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
    out.pointee = try h.bus.counter(h.handle)
  }
}

@c @implementation
public func ordo_handle_counter(_ handle: OpaquePointer?) -> UInt64 {
  var n: UInt64 = 0
  _ = ordo_handle_get_counter(handle, &n)
  return n
}
