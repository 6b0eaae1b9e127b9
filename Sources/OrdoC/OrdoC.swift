// The C ABI of Ordo: each function implements its declaration in
// include/ordo.h (checked by the compiler through @c @implementation),
// converts its arguments and calls the core. The rules every function keeps
// (NULL → ORDO_E_INVALID_ARGUMENT, the thread-local message, out parameters
// written only on success) are documented in the header.

import COrdo
import Ordo

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - Library and errors

nonisolated(unsafe) private let versionCString: UnsafePointer<CChar> = UnsafePointer(strdup(ORDO_VERSION_STRING)!)

@c @implementation
public func ordo_version() -> UnsafePointer<CChar>? {
  versionCString
}

@c @implementation
public func ordo_last_error_message() -> UnsafePointer<CChar>? {
  lastErrorMessage()
}

@c @implementation
public func ordo_status_name(_ status: ordo_status) -> UnsafePointer<CChar>? {
  let name: StaticString =
    switch status {
    case ORDO_OK: "ORDO_OK"
    case ORDO_E_INVALID_ARGUMENT: "ORDO_E_INVALID_ARGUMENT"
    case ORDO_E_INVALID_KEYPATH: "ORDO_E_INVALID_KEYPATH"
    case ORDO_E_TYPE_MISMATCH: "ORDO_E_TYPE_MISMATCH"
    case ORDO_E_NOT_FOUND: "ORDO_E_NOT_FOUND"
    case ORDO_E_NO_TRANSACTION: "ORDO_E_NO_TRANSACTION"
    case ORDO_E_CONTRACT_VIOLATION: "ORDO_E_CONTRACT_VIOLATION"
    case ORDO_E_STABILITY: "ORDO_E_STABILITY"
    case ORDO_E_CYCLE: "ORDO_E_CYCLE"
    case ORDO_E_ORDER_CONFLICT: "ORDO_E_ORDER_CONFLICT"
    case ORDO_E_DUPLICATE_NAME: "ORDO_E_DUPLICATE_NAME"
    case ORDO_E_LIMIT: "ORDO_E_LIMIT"
    case ORDO_E_DBUS: "ORDO_E_DBUS"
    case ORDO_E_STORAGE: "ORDO_E_STORAGE"
    case ORDO_E_SCHEMA: "ORDO_E_SCHEMA"
    case ORDO_E_CONFLICT: "ORDO_E_CONFLICT"
    case ORDO_E_INTERNAL: "ORDO_E_INTERNAL"
    default: "ORDO_E_UNKNOWN"
    }
  return UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
}

// MARK: - Buses

@c @implementation
public func ordo_bus_new() -> OpaquePointer? {
  OpaquePointer(Unmanaged.passRetained(CBus()).toOpaque())
}

@c @implementation
public func ordo_bus_free(_ bus: OpaquePointer?) {
  guard let bus else { return }
  let unmanaged = Unmanaged<CBus>.fromOpaque(UnsafeRawPointer(bus))
  let box = unmanaged.takeUnretainedValue()
  box.dbus = nil
  let remaining = box.takeAll()
  unmanaged.release()
  for c in remaining where c.running == 0 { c.runDestroy() }
}

@c @implementation
public func ordo_transaction_id(_ bus: OpaquePointer?) -> UInt64 {
  guard let box = try? CBus.from(bus) else {
    setLastError("bus is NULL")
    return 0
  }
  return box.bus.transactionID
}

// MARK: - Transactions

@c @implementation
public func ordo_begin(_ bus: OpaquePointer?) -> ordo_status {
  CBus.with(bus) { (box) throws(OrdoError) in box.bus.begin() }
}

@c @implementation
public func ordo_commit(_ bus: OpaquePointer?, _ out_txn: UnsafeMutablePointer<UInt64>?) -> ordo_status {
  CBus.with(bus) { (box) throws(OrdoError) in
    let txn = try box.bus.commit()
    out_txn?.pointee = txn
  }
}

@c @implementation
public func ordo_rollback(_ bus: OpaquePointer?) -> ordo_status {
  CBus.with(bus) { (box) throws(OrdoError) in try box.bus.rollback() }
}

// MARK: - Writes

@inline(__always)
private func set(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ value: () throws(OrdoError) -> Value) -> ordo_status {
  CBus.with(bus) { (box) throws(OrdoError) in
    guard let keypath else { throw invalid("keypath is NULL") }
    let v = try value()
    // A keypath the store has is written from its bytes, with no String
    // made; a new one goes through the validated String.
    let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(keypath).assumingMemoryBound(to: UInt8.self), count: strlen(keypath))
    if try box.bus.setExisting(utf8: bytes, v) { return }
    try box.bus.set(try keypathArg(keypath), v)
  }
}

@c @implementation
public func ordo_set_bool(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ value: Bool) -> ordo_status {
  set(bus, keypath) { () throws(OrdoError) in .bool(value) }
}

@c @implementation
public func ordo_set_int64(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ value: Int64) -> ordo_status {
  set(bus, keypath) { () throws(OrdoError) in .int64(value) }
}

@c @implementation
public func ordo_set_double(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ value: Double) -> ordo_status {
  set(bus, keypath) { () throws(OrdoError) in .double(value) }
}

@c @implementation
public func ordo_set_string(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ utf8: UnsafePointer<CChar>?) -> ordo_status {
  set(bus, keypath) { () throws(OrdoError) in try stringValue(utf8, for: escaped(keypath!)) }
}

@c @implementation
public func ordo_set_bytes(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ data: UnsafeRawPointer?, _ len: Int) -> ordo_status {
  set(bus, keypath) { () throws(OrdoError) in try bytesValue(data, len, for: escaped(keypath!)) }
}

@c @implementation
public func ordo_touch(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    try box.bus.touch(try keypathArg(keypath))
  }
}

@c @implementation
public func ordo_remove(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    try box.bus.remove(try keypathArg(keypath))
  }
}

@c @implementation
public func ordo_remove_tree(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    try box.bus.removeTree(try keypathArg(keypath))
  }
}

// MARK: - Reads

/// Reads the value for a getter after checking every pointer argument;
/// `extract` converts it or returns nil on a type mismatch.
@inline(__always)
private func get<T>(
  _ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<T>?, _ type: String,
  _ extract: (Value) throws(OrdoError) -> T?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let k = try keypathArg(keypath)
    let out = try outArg(out, "out")
    guard let value = try box.bus.value(k) else { throw OrdoError(.notFound, "\"\(k)\" holds no value") }
    guard let x = try extract(value) else {
      throw OrdoError(.typeMismatch, "\"\(k)\" holds \(Value.withArticle(value.typeName)), not \(Value.withArticle(type))")
    }
    out.pointee = x
  }
}

/// The conversions of a value to what a getter writes to C (shared by the
/// keypath and handle getters): nil on a type mismatch.
enum CValue {
  static func type(_ v: Value) throws(OrdoError) -> ordo_type? {
    switch v {
    case .bool: ORDO_TYPE_BOOL
    case .int64: ORDO_TYPE_INT64
    case .double: ORDO_TYPE_DOUBLE
    case .string: ORDO_TYPE_STRING
    case .bytes: ORDO_TYPE_BYTES
    }
  }

  static func bool(_ v: Value) throws(OrdoError) -> Bool? {
    if case .bool(let x) = v { return x }
    return nil
  }

  static func int64(_ v: Value) throws(OrdoError) -> Int64? {
    if case .int64(let x) = v { return x }
    return nil
  }

  static func double(_ v: Value) throws(OrdoError) -> Double? {
    if case .double(let x) = v { return x }
    return nil
  }

  /// A `malloc`ed NUL-terminated copy (freed with `ordo_free`).
  static func string(_ v: Value) throws(OrdoError) -> UnsafeMutablePointer<CChar>?? {
    guard case .string(var s) = v else { return nil }
    guard let p = s.withUTF8({ copy(UnsafeRawBufferPointer($0), terminate: true) }) else { throw outOfMemory(s.utf8.count + 1) }
    return .some(p.assumingMemoryBound(to: CChar.self))
  }

  /// A `malloc`ed copy (freed with `ordo_free`) and its length.
  static func bytes(_ v: Value, _ count: inout Int) throws(OrdoError) -> UnsafeMutableRawPointer?? {
    guard case .bytes(let b) = v else { return nil }
    count = b.count
    guard let p = b.withUnsafeBytes({ copy($0, terminate: false) }) else { throw outOfMemory(b.count) }
    return .some(p)
  }
}

@c @implementation
public func ordo_get_type(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<ordo_type>?) -> ordo_status {
  get(bus, keypath, out, "", CValue.type)
}

@c @implementation
public func ordo_get_bool(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<Bool>?) -> ordo_status {
  get(bus, keypath, out, "bool", CValue.bool)
}

@c @implementation
public func ordo_get_int64(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<Int64>?) -> ordo_status {
  get(bus, keypath, out, "int64", CValue.int64)
}

@c @implementation
public func ordo_get_double(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<Double>?) -> ordo_status {
  get(bus, keypath, out, "double", CValue.double)
}

/// A `malloc`ed copy of the bytes, NUL-terminated if asked (at least one
/// byte is allocated, so the result is never NULL for empty bytes).
func copy(_ bytes: UnsafeRawBufferPointer, terminate: Bool) -> UnsafeMutableRawPointer? {
  let size = bytes.count + (terminate ? 1 : 0)
  guard let p = malloc(max(size, 1)) else { return nil }
  if let src = bytes.baseAddress { p.copyMemory(from: src, byteCount: bytes.count) }
  if terminate { p.storeBytes(of: 0, toByteOffset: bytes.count, as: UInt8.self) }
  return p
}

func outOfMemory(_ size: Int) -> OrdoError {
  OrdoError(.internal, "out of memory allocating \(size) bytes")
}

@c @implementation
public func ordo_get_string(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> ordo_status {
  get(bus, keypath, out, "string", CValue.string)
}

@c @implementation
public func ordo_get_bytes(
  _ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
  _ len: UnsafeMutablePointer<Int>?
) -> ordo_status {
  guard let len else {
    return report(invalid("len is NULL"))
  }
  var count = 0
  let st = get(bus, keypath, out, "bytes") { (v) throws(OrdoError) in try CValue.bytes(v, &count) }
  if st == ORDO_OK { len.pointee = count }
  return st
}

@c @implementation
public func ordo_free(_ p: UnsafeMutableRawPointer?) {
  free(p)
}

@c @implementation
public func ordo_counter(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?) -> UInt64 {
  var n: UInt64 = 0
  _ = ordo_get_counter(bus, keypath, &n)
  return n
}

@c @implementation
public func ordo_get_counter(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<UInt64>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let k = try keypathArg(keypath)
    let out = try outArg(out, "out")
    out.pointee = try box.bus.counter(k)
  }
}

// MARK: - Contracts

/// The flags this library knows.
private let knownFlags = UInt32(ORDO_NOTIFY_INITIAL)

/// The largest spec size accepted (a newer header's struct).
private let maxSpecSize = 4096

@c @implementation
public func ordo_register(_ bus: OpaquePointer?, _ spec: UnsafePointer<ordo_contract_spec>?, _ out_id: UnsafeMutablePointer<UInt64>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    guard let spec else { throw invalid("spec is NULL") }
    // Read the size alone first: an older caller's struct may be smaller.
    let raw = UnsafeRawPointer(spec)
    let size = Int(raw.load(as: UInt32.self))
    let known = MemoryLayout<ordo_contract_spec>.size
    guard size >= known else {
      throw invalid("spec->size is \(size), smaller than sizeof(ordo_contract_spec) = \(known): set it to sizeof(ordo_contract_spec)")
    }
    if size > known {
      guard size <= maxSpecSize else { throw invalid("spec->size is \(size), larger than any known ordo_contract_spec") }
      for offset in known..<size where raw.load(fromByteOffset: offset, as: UInt8.self) != 0 {
        throw invalid("spec->size is \(size) and byte \(offset) is set: fields past sizeof(ordo_contract_spec) = \(known) are unknown to this library (version \(ORDO_VERSION_STRING))")
      }
    }
    let s = spec.pointee
    let name = try stringArg(s.name, "spec->name")
    guard let callback = s.callback else { throw invalid("contract \"\(name)\": spec->callback is NULL") }
    let unknown = s.flags & ~knownFlags
    guard unknown == 0 else {
      throw invalid("contract \"\(name)\": unknown flags 0x\(String(unknown, radix: 16)) in spec->flags")
    }
    let reads = try stringArray(s.reads, s.n_reads, "reads", code: .invalidKeypath)
    let writes = try stringArray(s.writes, s.n_writes, "writes", code: .invalidKeypath)
    let c = CContract(owner: box, callback: callback, userData: s.user_data, destroy: s.destroy)
    var flags: ContractFlags = []
    if s.flags & knownFlags != 0 { flags.insert(.notifyInitial) }
    let contract = ContractSpec(
      name: name, reads: reads, writes: writes, priority: s.priority == Int32.min /* ORDO_NO_PRIORITY */ ? nil : s.priority, flags: flags
    ) { note in c.invoke(note) }
    let handle: ContractHandle
    do throws(OrdoError) {
      handle = try box.bus.register(contract, prefetching: c.callFields)
    } catch {
      c.disarm()
      throw error
    }
    box.registered(c, handle.id)
    out_id?.pointee = handle.id
  }
}

@c @implementation
public func ordo_unregister(_ bus: OpaquePointer?, _ id: UInt64) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    try box.bus.unregister(id)
    box.unregistered(id)
  }
}

@c @implementation
public func ordo_current_contract(_ bus: OpaquePointer?) -> UInt64 {
  guard let box = try? CBus.from(bus) else {
    setLastError("bus is NULL")
    return 0
  }
  return box.bus.currentContract ?? 0
}
