// The schema entry points of include/ordo.h (SPEC §14): buses made with a
// schema, the schema read back, stored values told from defaults.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import COrdo
import Ordo
import OrdoDBus

@c @implementation
public func ordo_bus_new_with_schema(_ json: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let text = try stringArg(json, "schema_json")
    let out = try outArg(out, "out")
    out.pointee = makeBus(try Schema(json: text))
  }
}

@c @implementation
public func ordo_bus_new_with_schema_file(_ path: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let path = try stringArg(path, "path")
    let out = try outArg(out, "out")
    let schema = try Schema(contentsOfFile: path)
    out.pointee = makeBus(schema)
  }
}

@c @implementation
public func ordo_schema_json(_ bus: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let out = try outArg(out, "out")
    guard let schema = box.bus.schema else {
      out.pointee = nil
      return
    }
    guard let p = strdup(schema.json) else { throw outOfMemory(schema.json.utf8.count) }
    out.pointee = p
  }
}

@c @implementation
public func ordo_is_stored(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<Bool>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let k = try keypathArg(keypath)
    let out = try outArg(out, "out")
    out.pointee = try box.bus.isStored(k)
  }
}

private func makeBus(_ schema: Schema) -> OpaquePointer {
  OpaquePointer(Unmanaged.passRetained(CBus(schema: schema)).toOpaque())
}
