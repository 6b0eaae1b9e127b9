// The measured hot path of every Commit: an observer's `Notify` built as
// wire bytes (how and why below).
import CDBus
import Ordo

#if canImport(Glibc)
import Glibc
#endif

// An observer's `Notify`, sent for every Commit, built as wire bytes and
// handed to libdbus with `dbus_message_demarshal`, which validates them as
// it validates what the socket brings, then `dbus_message_copy`, which gives
// the message serial 0 (documented: the copy's serial is reset), so that the
// connection numbers it when it is sent, as it numbers the messages libdbus
// builds.
//
// Why: libdbus rewrites the header each time the body's signature grows (at
// each top-level argument) and again for each header field set, about
// 5 000 instructions each: a Notify `(o t as a{sv})` with one value cost
// about 73 000 instructions to build that way, a third of ordod's
// user-space work per Commit under callgrind. Built here it costs about
// 43 000, most of it libdbus' validation in `dbus_message_demarshal`
// (docs/performance.md, "Durable ordod against dconf"). A reply `(t)` gains
// nothing this way (one argument, three fields: the validation costs what
// the rewrites did), so replies are built by libdbus. A message libdbus
// refuses to take (it never should) is built the libdbus way instead;
// debug builds (every test) check that libdbus takes it and that both ways
// give the same bytes.

/// Little-endian D-Bus marshalling of the few types these messages carry.
struct WireWriter {
  var bytes: [UInt8] = []

  init(capacity: Int) { bytes.reserveCapacity(capacity) }

  mutating func pad(_ n: Int) {
    while bytes.count % n != 0 { bytes.append(0) }
  }

  mutating func byte(_ b: UInt8) { bytes.append(b) }

  mutating func uint32(_ v: UInt32) {
    pad(4)
    withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
  }

  mutating func uint64(_ v: UInt64) {
    pad(8)
    withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
  }

  /// Reserves a 32-bit length at 4-alignment; returns where it is.
  mutating func lengthSlot() -> Int {
    uint32(0)
    return bytes.count - 4
  }

  mutating func patch(_ slot: Int, _ v: Int) {
    let u = UInt32(truncatingIfNeeded: v).littleEndian
    withUnsafeBytes(of: u) { for i in 0..<4 { bytes[slot + i] = $0[i] } }
  }

  /// A string or object path: what libdbus takes from the C string (up to
  /// a NUL).
  mutating func string(_ s: String) {
    var s = s
    s.withUTF8 { u in
      let n = u.firstIndex(of: 0) ?? u.count
      uint32(UInt32(n))
      bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[0..<n]))
    }
    bytes.append(0)
  }

  mutating func signature(_ s: StaticString) {
    bytes.append(UInt8(s.utf8CodeUnitCount))
    s.withUTF8Buffer { bytes.append(contentsOf: $0) }
    bytes.append(0)
  }

  /// A variant holding an Ordo value (b, x, d, s, ay).
  mutating func value(_ v: Value) {
    switch v {
    case .bool(let b):
      signature("b")
      uint32(b ? 1 : 0)
    case .int64(let x):
      signature("x")
      uint64(UInt64(bitPattern: x))
    case .double(let d):
      signature("d")
      uint64(d.bitPattern)
    case .string(let s):
      signature("s")
      string(s)
    case .bytes(let b):
      signature("ay")
      uint32(UInt32(b.count))
      bytes.append(contentsOf: b)
    }
  }

  /// One header field `(y v)`: code, signature, value.
  mutating func field(_ code: UInt8, _ sig: StaticString, _ write: (inout WireWriter) -> Void) {
    pad(8)
    byte(code)
    signature(sig)
    write(&self)
  }
}

extension DBusMessageRef {
  /// A message from wire bytes: `header` written by `fields` (after the
  /// fixed part), then `body`. Nil when libdbus refuses them.
  private static func demarshal(type: UInt8, flags: UInt8, body: [UInt8], fields: (inout WireWriter) -> Void) -> DBusMessageRef? {
    var w = WireWriter(capacity: 160 + body.count)
    w.byte(UInt8(ascii: "l"))
    w.byte(type)
    w.byte(flags)
    w.byte(1)
    w.uint32(UInt32(body.count))
    w.uint32(1)  // a serial libdbus accepts; the copy resets it to 0
    let slot = w.lengthSlot()
    let start = w.bytes.count
    fields(&w)
    w.patch(slot, w.bytes.count - start)
    w.pad(8)
    w.bytes.append(contentsOf: body)
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    let parsed = w.bytes.withUnsafeBufferPointer { b in
      b.withMemoryRebound(to: CChar.self) { dbus_message_demarshal($0.baseAddress, Int32(b.count), &err) }
    }
    guard let parsed else { return nil }
    defer { dbus_message_unref(parsed) }
    guard let copy = dbus_message_copy(parsed) else { return nil }
    return DBusMessageRef(owning: copy)
  }

  /// A `Notify(o contract, t txn, as changed, a{sv} values)` signal of
  /// `/dev/ordo/Bus` to `destination`.
  static func notify(
    destination: String, contractPath: String, transaction: UInt64, changed: ChangedKeypaths, values: [(String, Value)]
  ) -> DBusMessageRef? {
    var b = WireWriter(capacity: 96 + changed.count * 40 + values.count * 48)
    b.string(contractPath)
    b.uint64(transaction)
    var slot = b.lengthSlot()
    var start = b.bytes.count
    for k in changed { b.string(k) }
    b.patch(slot, b.bytes.count - start)
    slot = b.lengthSlot()
    b.pad(8)
    start = b.bytes.count
    for (k, v) in values {
      b.pad(8)
      b.string(k)
      b.value(v)
    }
    b.patch(slot, b.bytes.count - start)
    let m = demarshal(type: UInt8(ORDO_DBUS_MESSAGE_TYPE_SIGNAL), flags: 0, body: b.bytes) { h in
      h.field(8, "g") { $0.signature("otasa{sv}") }
      h.field(1, "o") { $0.string(ordoObjectPath) }
      h.field(2, "s") { $0.string(ordoInterface) }
      h.field(3, "s") { $0.string("Notify") }
      h.field(6, "s") { $0.string(destination) }
    }
    let built = m ?? libdbusNotify(destination: destination, contractPath: contractPath, transaction: transaction, changed: changed, values: values)
    assert(
      m.map { sameBytes($0, libdbusNotify(destination: destination, contractPath: contractPath, transaction: transaction, changed: changed, values: values)) } == true,
      "the Notify built as wire bytes was refused by libdbus or differs from libdbus' own")
    return built
  }

  private static func libdbusNotify(
    destination: String, contractPath: String, transaction: UInt64, changed: ChangedKeypaths, values: [(String, Value)]
  ) -> DBusMessageRef? {
    signal(path: ordoObjectPath, interface: ordoInterface, member: "Notify", destination: destination) { w in
      w.objectPath(contractPath)
      w.uint64(transaction)
      w.stringArray(changed)
      w.valueDict(values)
    }
  }

  /// Whether two unsent messages marshal to the same bytes (debug checks).
  private static func sameBytes(_ a: DBusMessageRef, _ b: DBusMessageRef?) -> Bool {
    guard let b else { return true }
    // Marshalling locks a message (no serial could be given to it any
    // more): marshal copies.
    func marshal(_ m: DBusMessageRef) -> [UInt8] {
      guard let c = dbus_message_copy(m.raw) else { return [] }
      defer { dbus_message_unref(c) }
      var p: UnsafeMutablePointer<CChar>?
      var n: Int32 = 0
      guard dbus_message_marshal(c, &p, &n) != 0, let p else { return [] }
      defer { dbus_free(p) }
      return p.withMemoryRebound(to: UInt8.self, capacity: Int(n)) { Array(UnsafeBufferPointer(start: $0, count: Int(n))) }
    }
    return marshal(a) == marshal(b)
  }
}
