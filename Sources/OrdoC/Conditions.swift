import COrdo
import Ordo

// Conditions and owned values (SPEC §15; include/ordo.h).

@c @implementation
public func ordo_expect_counter(_ bus: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ counter: UInt64) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    try box.bus.expect(try keypathArg(keypath), counter: counter)
  }
}

@c @implementation
public func ordo_owner_new(
  _ bus: OpaquePointer?, _ name: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let name = try stringArg(name, "name")
    let out = try outArg(out, "out")
    out.pointee = OpaquePointer(Unmanaged.passRetained(Owner(box.bus, name: name)).toOpaque())
  }
}

@c @implementation
public func ordo_begin_owned(_ bus: OpaquePointer?, _ owner: OpaquePointer?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    guard let owner else { throw invalid("owner is NULL") }
    try box.bus.begin(owner: Unmanaged<Owner>.fromOpaque(UnsafeRawPointer(owner)).takeUnretainedValue())
  }
}

@c @implementation
public func ordo_owner_free(_ owner: OpaquePointer?) {
  guard let owner else { return }
  let unmanaged = Unmanaged<Owner>.fromOpaque(UnsafeRawPointer(owner))
  unmanaged.takeUnretainedValue().release()
  unmanaged.release()
}
