// Publishing a bus over D-Bus from a C program (include/ordo.h, SPEC §7):
// the C face of OrdoDBus.DBusService. CBus.dbus holds the service; it is
// released (before the bus) by ordo_bus_free, which closes the connection and
// removes the remote contracts.
//
// The thread that calls ordo_dbus_dispatch owns the D-Bus connection: remote
// Commits run their transactions, and so call the program's contracts, on
// it. Other threads may commit at any time; their Notify signals are sent by
// the next ordo_dbus_dispatch (ordo_dbus_fd becomes readable for it). Commits
// on the dispatching thread between two dispatches send theirs at once.

import COrdo
import Ordo
import OrdoDBus

private func service(_ box: CBus) throws(OrdoError) -> DBusService {
  guard let s = box.dbus as? DBusService else {
    throw OrdoError(.dbus, "this bus is not published over D-Bus: call ordo_dbus_publish first")
  }
  return s
}

@c @implementation
public func ordo_dbus_publish(_ bus: OpaquePointer?, _ address: UnsafePointer<CChar>?, _ name: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let addr = try address.map { p throws(OrdoError) in try stringArg(p, "address") }
    let wellKnown = try name.map { p throws(OrdoError) in try stringArg(p, "name") } ?? ordoDefaultName
    guard box.dbus == nil else { throw OrdoError(.dbus, "this bus is already published over D-Bus") }
    box.dbus = try DBusService(bus: box.bus, address: addr, name: wellKnown)
  }
}

@c @implementation
public func ordo_dbus_fd(_ bus: OpaquePointer?) -> Int32 {
  do {
    return try service(CBus.from(bus)).fd
  } catch {
    _ = report(error)
    return -1
  }
}

@c @implementation
public func ordo_dbus_dispatch(_ bus: OpaquePointer?, _ timeout_ms: Int32) -> ordo_status {
  guarded { () throws(OrdoError) in
    let s = try service(CBus.from(bus))
    guard s.dispatch(timeoutMs: timeout_ms < 0 ? -1 : timeout_ms) else {
      throw OrdoError(.dbus, "the connection to the D-Bus daemon was lost")
    }
  }
}
