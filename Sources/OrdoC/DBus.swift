// Publishing a bus over D-Bus from a C program (include/ordo.h, SPEC §7).
// This build has no D-Bus bridge: every function reports ORDO_E_DBUS. The
// D-Bus bridge replaces these bodies; CBus.dbus holds its state per bus and
// is released (before the bus) by ordo_bus_free.

import COrdo
import Ordo

private let unavailable = "publishing over D-Bus is not available in this build"

@c @implementation
public func ordo_dbus_publish(_ bus: OpaquePointer?, _ address: UnsafePointer<CChar>?, _ name: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    _ = try CBus.from(bus)
    throw OrdoError(.dbus, unavailable)
  }
}

@c @implementation
public func ordo_dbus_fd(_ bus: OpaquePointer?) -> Int32 {
  let st = guarded { () throws(OrdoError) in
    _ = try CBus.from(bus)
    throw OrdoError(.dbus, unavailable)
  }
  _ = st
  return -1
}

@c @implementation
public func ordo_dbus_dispatch(_ bus: OpaquePointer?, _ timeout_ms: Int32) -> ordo_status {
  guarded { () throws(OrdoError) in
    _ = try CBus.from(bus)
    throw OrdoError(.dbus, unavailable)
  }
}
