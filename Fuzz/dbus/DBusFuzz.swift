// libFuzzer target: arbitrary bytes as a marshalled D-Bus message, decoded
// the way the service decodes a `Commit` or `Complete` body (signature
// check, `a{sv}` of typed variants, `as` arrays, limits), then applied to a
// bus in one transaction. libdbus validates the wire format; the bridge's
// decoder and the core must refuse what is left with an error, never crash
// or leak. Built by `make fuzz-build` (mk/hardening.mk), which compiles
// OrdoDBus with -enable-testing so that this target reaches its decoder.
import CDBus
import CLibFuzzer
import Foundation
import Ordo
@testable import OrdoDBus

private let limits: ServiceLimits = {
  var l = ServiceLimits()
  l.maxKeypathsPerCall = 64
  l.maxValueBytes = 4096
  return l
}()

@main enum DBusFuzz {
  static func main() { exit(ordo_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, fuzzDBusMessage)) }
}

func fuzzDBusMessage(_ bytes: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  guard let bytes, size < 1 << 20 else { return 0 }
  let data = UnsafeRawPointer(bytes).assumingMemoryBound(to: CChar.self)
  var err = DBusError()
  dbus_error_init(&err)
  guard let raw = dbus_message_demarshal(data, Int32(size), &err) else {
    dbus_error_free(&err)
    return 0
  }
  let m = DBusMessageRef(owning: raw)
  var r = m.reader()
  let method: String
  switch m.signature {
  case "a{sv}asas":
    method = "Commit"
  case "ota{sv}asas":
    method = "Complete"
    r.next()
    r.next()
  default:
    return 0
  }
  let batch: [Write]
  do {
    batch = try DBusService.readWrites(&r, method, limits: limits)
  } catch {
    return 0
  }
  let bus = Bus()
  bus.begin()
  do {
    try bus.write(batch)
    _ = try bus.commit()
  } catch {
    // A refused batch changed nothing: the transaction is still open and empty.
    if (try? bus.commit()) != 0 { fatalError("a refused batch left changes behind") }
  }
  return 0
}
