// D-Bus messages and their arguments: `DBusMessageRef`, the `MessageReader`
// and `MessageWriter` every argument goes through (the only users of
// `dbus_message_iter_*`), and the error table.
import CDBus
import Ordo

#if canImport(Glibc)
import Glibc
#endif

/// A D-Bus message (`DBusMessage *`), owned: released on deinit.
public final class DBusMessageRef: @unchecked Sendable {
  let raw: OpaquePointer

  /// Takes ownership of one reference.
  init(owning raw: OpaquePointer) { self.raw = raw }

  /// Adds a reference.
  init(retaining raw: OpaquePointer) {
    dbus_message_ref(raw)
    self.raw = raw
  }

  deinit { dbus_message_unref(raw) }

  var type: Int32 { dbus_message_get_type(raw) }
  var member: String? { dbus_message_get_member(raw).map { String(cString: $0) } }
  var interface: String? { dbus_message_get_interface(raw).map { String(cString: $0) } }
  var path: String? { dbus_message_get_path(raw).map { String(cString: $0) } }
  var sender: String? { dbus_message_get_sender(raw).map { String(cString: $0) } }
  var signature: String { dbus_message_get_signature(raw).map { String(cString: $0) } ?? "" }
  var errorName: String? { dbus_message_get_error_name(raw).map { String(cString: $0) } }
  var noReply: Bool { dbus_message_get_no_reply(raw) != 0 }
  /// The serial of the call a reply answers.
  var replySerial: UInt32 { dbus_message_get_reply_serial(raw) }

  // Building a message: libdbus rewrites the whole header (re-marshalling
  // every field in it) each time the body's signature changes, that is for
  // each top-level argument and each top-level container closed. A message
  // whose header holds only the signature while its body is written, and
  // gets its other fields afterwards (appended, not rewritten), costs about
  // half as much to build: a Notify `(o t as a{sv})` with one value, about
  // 50 000 instructions instead of 100 000, the largest cost of sending it.

  /// A signal, its body written by `body` before its header fields are set
  /// (see above). Nil when libdbus runs out of memory.
  static func signal(
    path: String, interface: String, member: String, destination: String?, _ body: (inout MessageWriter) -> Void
  ) -> DBusMessageRef? {
    guard let raw = dbus_message_new(ORDO_DBUS_MESSAGE_TYPE_SIGNAL) else { return nil }
    let m = DBusMessageRef(owning: raw)
    var w = m.writer()
    body(&w)
    guard dbus_message_set_path(raw, path) != 0, dbus_message_set_interface(raw, interface) != 0,
      dbus_message_set_member(raw, member) != 0
    else { return nil }
    if let destination, dbus_message_set_destination(raw, destination) == 0 { return nil }
    return m
  }

  static func methodCall(destination: String, path: String, interface: String, member: String) -> DBusMessageRef? {
    guard let m = dbus_message_new_method_call(destination, path, interface, member) else { return nil }
    return DBusMessageRef(owning: m)
  }

  /// The reply to this method call, its body written by `body` before its
  /// header fields are set (see above): what `dbus_message_new_method_return`
  /// makes (reply serial, destination = the caller, no reply expected).
  func methodReturn(_ body: (inout MessageWriter) -> Void) -> DBusMessageRef? {
    guard let r = dbus_message_new(ORDO_DBUS_MESSAGE_TYPE_METHOD_RETURN) else { return nil }
    let m = DBusMessageRef(owning: r)
    var w = m.writer()
    body(&w)
    dbus_message_set_no_reply(r, 1)
    guard dbus_message_set_reply_serial(r, dbus_message_get_serial(raw)) != 0 else { return nil }
    if let sender = dbus_message_get_sender(raw), dbus_message_set_destination(r, sender) == 0 { return nil }
    return m
  }

  func error(_ name: String, _ message: String) -> DBusMessageRef? {
    guard let m = dbus_message_new_error(raw, name, message) else { return nil }
    return DBusMessageRef(owning: m)
  }


  /// A reader positioned at the first argument.
  func reader() -> MessageReader { MessageReader(self) }

  /// A writer appending arguments.
  func writer() -> MessageWriter { MessageWriter(self) }
}

/// Whether a header field (a C string libdbus holds, or nil) is `s`,
/// compared in place rather than copied into a Swift string.
func same(_ field: UnsafePointer<CChar>?, _ s: String) -> Bool {
  guard let field else { return false }
  return s.withCString { strcmp(field, $0) == 0 }
}

/// A failure decoding arguments: becomes `org.freedesktop.DBus.Error.InvalidArgs`.
struct InvalidArgs: Error {
  let message: String
  init(_ message: String) { self.message = message }
}

/// Reads arguments with `DBusMessageIter`. Keeps the message alive.
struct MessageReader {
  let message: DBusMessageRef
  var iter = DBusMessageIter()
  private(set) var atEnd: Bool

  init(_ message: DBusMessageRef) {
    self.message = message
    atEnd = dbus_message_iter_init(message.raw, &iter) == 0
  }

  private init(message: DBusMessageRef, sub: DBusMessageIter) {
    self.message = message
    self.iter = sub
    atEnd = dbus_message_iter_get_arg_type(&self.iter) == ORDO_DBUS_TYPE_INVALID
  }

  var currentType: Int32 {
    guard !atEnd else { return ORDO_DBUS_TYPE_INVALID }
    var it = iter
    return dbus_message_iter_get_arg_type(&it)
  }

  mutating func next() {
    atEnd = dbus_message_iter_next(&iter) == 0
  }

  /// A reader over the container at the current position.
  mutating func recurse() -> MessageReader {
    var sub = DBusMessageIter()
    dbus_message_iter_recurse(&iter, &sub)
    return MessageReader(message: message, sub: sub)
  }

  /// The signature of the current argument (for a variant: of its content).
  mutating func currentSignature() -> String {
    guard let p = dbus_message_iter_get_signature(&iter) else { return "?" }
    defer { dbus_free(p) }
    return String(cString: p)
  }

  // `what` names the argument in an error message, built only when one is
  // thrown (these reads run for every argument of every message).

  mutating func string(_ what: @autoclosure () -> String) throws(InvalidArgs) -> String {
    let t = currentType
    guard t == ORDO_DBUS_TYPE_STRING || t == ORDO_DBUS_TYPE_OBJECT_PATH else {
      throw InvalidArgs("\(what()): expected a string")
    }
    let s = try Self.decode(ordo_iter_get_string(&iter), what())
    next()
    return s
  }

  /// libdbus validates strings, but never trust what reaches us.
  static func decode(_ p: UnsafePointer<CChar>?, _ what: @autoclosure () -> String) throws(InvalidArgs) -> String {
    guard let p else { throw InvalidArgs("\(what()): missing string") }
    guard let s = String(validatingCString: p) else { throw InvalidArgs("\(what()): the string is not valid UTF-8") }
    return s
  }

  // The basic types: each reads the current argument (of that type: check
  // ``currentSignature()`` first) and moves to the next.

  private mutating func basic<T>(_ get: (UnsafeMutablePointer<DBusMessageIter>) -> T) -> T {
    let v = get(&iter)
    next()
    return v
  }

  mutating func uint64() -> UInt64 { basic(ordo_iter_get_uint64) }
  mutating func int64() -> Int64 { basic(ordo_iter_get_int64) }
  mutating func uint32() -> UInt32 { basic(ordo_iter_get_uint32) }
  mutating func int32() -> Int32 { basic(ordo_iter_get_int32) }
  mutating func bool() -> Bool { basic(ordo_iter_get_bool) != 0 }
  mutating func double() -> Double { basic(ordo_iter_get_double) }

  /// Reads an `as`, refusing more than `limit` entries.
  mutating func stringArray(_ what: @autoclosure () -> String, limit: Int) throws(OrdoServiceError) -> [String] {
    var sub = recurse()
    var out: [String] = []
    while !sub.atEnd {
      if out.count >= limit {
        throw .ordo(OrdoError(.limit, "\(what()) has more than \(limit) entries (limit max-keypaths-per-call)"))
      }
      let i = out.count
      do { out.append(try sub.string("\(what())[\(i)]")) } catch { throw .invalidArgs(error.message) }
    }
    next()
    return out
  }

  /// Reads a variant holding an Ordo value (b, x, d, s, ay). Its content
  /// is told by its type code (an array's by its element's), not by its
  /// signature, which libdbus returns as a string to free; and read in
  /// place: a variant holds one value, with nothing to move to after it.
  mutating func value(_ what: @autoclosure () -> String, maxBytes: Int) throws(OrdoServiceError) -> Value {
    guard currentType == ORDO_DBUS_TYPE_VARIANT else { throw .invalidArgs("\(what()): expected a variant") }
    var v = recurse()
    next()
    switch v.currentType {
    case ORDO_DBUS_TYPE_BOOLEAN:
      return .bool(ordo_iter_get_bool(&v.iter) != 0)
    case ORDO_DBUS_TYPE_INT64:
      return .int64(ordo_iter_get_int64(&v.iter))
    case ORDO_DBUS_TYPE_DOUBLE:
      return .double(ordo_iter_get_double(&v.iter))
    case ORDO_DBUS_TYPE_STRING:
      let p = ordo_iter_get_string(&v.iter)
      if let p, strlen(p) > maxBytes {
        throw .ordo(OrdoError(.limit, "\(what()): the string is \(strlen(p)) bytes, more than \(maxBytes) (limit max-value-bytes)"))
      }
      do { return .string(try Self.decode(p, what())) } catch { throw .invalidArgs(error.message) }
    case ORDO_DBUS_TYPE_ARRAY where dbus_message_iter_get_element_type(&v.iter) == ORDO_DBUS_TYPE_BYTE:
      var a = v.recurse()
      var n: Int32 = 0
      let p = ordo_iter_get_bytes(&a.iter, &n)
      if Int(n) > maxBytes {
        throw .ordo(OrdoError(.limit, "\(what()): \(n) bytes, more than \(maxBytes) (limit max-value-bytes)"))
      }
      guard let p, n > 0 else { return .bytes([]) }
      return .bytes(Array(UnsafeBufferPointer(start: p, count: Int(n))))
    default:
      throw .invalidArgs("\(what()): a value of type '\(v.currentSignature())'; values must be variants of type b, x, d, s or ay")
    }
  }
}

/// Appends arguments with `DBusMessageIter`. Out-of-memory aborts: libdbus
/// only fails to append when allocation fails.
struct MessageWriter {
  let message: DBusMessageRef
  var iter = DBusMessageIter()
  /// Whether strings and object paths from a caller are checked (a
  /// client's calls): libdbus would cut a string at a NUL character and
  /// abort the process on an invalid object path. The first argument that
  /// could not be written as given is then in ``problem``, and the message
  /// must not be sent.
  var checked = false
  /// See ``checked``.
  private(set) var problem: String?

  init(_ message: DBusMessageRef) {
    self.message = message
    dbus_message_iter_init_append(message.raw, &iter)
  }

  private init(message: DBusMessageRef) {
    self.message = message
  }

  private static func check(_ ok: dbus_bool_t) {
    if ok == 0 { fatalError("libdbus: out of memory while building a message") }
  }

  mutating func string(_ s: String) {
    if checked, problem == nil, let at = s.nulOffset {
      problem = "\(s.debugDescription) holds a NUL character (U+0000) at byte \(at): D-Bus strings cannot carry one"
    }
    Self.check(ordo_iter_append_string(&iter, ORDO_DBUS_TYPE_STRING, s))
  }
  mutating func objectPath(_ s: String) {
    if checked, dbus_validate_path(s, nil) == 0 {
      if problem == nil { problem = "\(s.debugDescription) is not a D-Bus object path" }
      Self.check(ordo_iter_append_string(&iter, ORDO_DBUS_TYPE_OBJECT_PATH, "/"))
      return
    }
    Self.check(ordo_iter_append_string(&iter, ORDO_DBUS_TYPE_OBJECT_PATH, s))
  }
  mutating func bool(_ b: Bool) { Self.check(ordo_iter_append_bool(&iter, b ? 1 : 0)) }
  mutating func int32(_ v: Int32) { Self.check(ordo_iter_append_int32(&iter, v)) }
  mutating func uint32(_ v: UInt32) { Self.check(ordo_iter_append_uint32(&iter, v)) }
  mutating func int64(_ v: Int64) { Self.check(ordo_iter_append_int64(&iter, v)) }
  mutating func uint64(_ v: UInt64) { Self.check(ordo_iter_append_uint64(&iter, v)) }
  mutating func double(_ v: Double) { Self.check(ordo_iter_append_double(&iter, v)) }
  mutating func bytes(_ b: [UInt8]) {
    b.withUnsafeBufferPointer { Self.check(ordo_iter_append_bytes(&iter, $0.baseAddress, Int32($0.count))) }
  }

  /// Appends a container (`a`, `v`, `{`, `(`) whose content `body` writes.
  mutating func container(_ type: Int32, _ signature: String?, _ body: (inout MessageWriter) -> Void) {
    var sub = MessageWriter(message: message)
    sub.checked = checked
    if let signature {
      Self.check(dbus_message_iter_open_container(&iter, type, signature, &sub.iter))
    } else {
      Self.check(dbus_message_iter_open_container(&iter, type, nil, &sub.iter))
    }
    body(&sub)
    if problem == nil { problem = sub.problem }
    Self.check(dbus_message_iter_close_container(&iter, &sub.iter))
  }

  mutating func stringArray<S: Sequence<String>>(_ a: S) {
    container(ORDO_DBUS_TYPE_ARRAY, "s") { w in for s in a { w.string(s) } }
  }

  /// A variant holding an Ordo value.
  mutating func value(_ v: Value) {
    switch v {
    case .bool(let b): container(ORDO_DBUS_TYPE_VARIANT, "b") { $0.bool(b) }
    case .int64(let x): container(ORDO_DBUS_TYPE_VARIANT, "x") { $0.int64(x) }
    case .double(let d): container(ORDO_DBUS_TYPE_VARIANT, "d") { $0.double(d) }
    case .string(let s): container(ORDO_DBUS_TYPE_VARIANT, "s") { $0.string(s) }
    case .bytes(let b): container(ORDO_DBUS_TYPE_VARIANT, "ay") { $0.bytes(b) }
    }
  }

  /// An `a{sv}` of Ordo values, in the given key order.
  mutating func valueDict(_ entries: [(String, Value)]) {
    container(ORDO_DBUS_TYPE_ARRAY, "{sv}") { w in
      for (k, v) in entries {
        w.container(ORDO_DBUS_TYPE_DICT_ENTRY, nil) { e in
          e.string(k)
          e.value(v)
        }
      }
    }
  }

  /// An `a{st}` of keypath counters, sorted by keypath.
  mutating func counterDict(_ counters: [String: UInt64]) {
    container(ORDO_DBUS_TYPE_ARRAY, "{st}") { a in
      for (k, n) in counters.sorted(by: { $0.key < $1.key }) {
        a.container(ORDO_DBUS_TYPE_DICT_ENTRY, nil) { e in
          e.string(k)
          e.uint64(n)
        }
      }
    }
  }

  /// An `a{ss}`, in the given key order.
  mutating func stringDict(_ entries: [(String, String)]) {
    container(ORDO_DBUS_TYPE_ARRAY, "{ss}") { a in
      for (k, v) in entries {
        a.container(ORDO_DBUS_TYPE_DICT_ENTRY, nil) { e in
          e.string(k)
          e.string(v)
        }
      }
    }
  }

  /// An `a{sv}` whose entries `body` writes with the `entry…` functions.
  mutating func dict(_ body: (inout MessageWriter) -> Void) {
    container(ORDO_DBUS_TYPE_ARRAY, "{sv}", body)
  }

  /// One `{sv}` entry of a dictionary; `body` writes the variant's content.
  mutating func entry(_ key: String, _ sig: String, _ body: (inout MessageWriter) -> Void) {
    container(ORDO_DBUS_TYPE_DICT_ENTRY, nil) { e in
      e.string(key)
      e.container(ORDO_DBUS_TYPE_VARIANT, sig, body)
    }
  }

  mutating func entry(_ k: String, string v: String) { entry(k, "s") { $0.string(v) } }
  mutating func entry(_ k: String, objectPath v: String) { entry(k, "o") { $0.objectPath(v) } }
  mutating func entry(_ k: String, uint64 v: UInt64) { entry(k, "t") { $0.uint64(v) } }
  mutating func entry(_ k: String, uint32 v: UInt32) { entry(k, "u") { $0.uint32(v) } }
  mutating func entry(_ k: String, int32 v: Int32) { entry(k, "i") { $0.int32(v) } }
  mutating func entry(_ k: String, bool v: Bool) { entry(k, "b") { $0.bool(v) } }
  mutating func entry(_ k: String, strings v: [String]) { entry(k, "as") { $0.stringArray(v) } }
}

/// Every D-Bus error name the service and its clients use, in one table.
/// `dev.ordo.Error.<Name>` names follow the C status names (SPEC §7).
public enum DBusErrorName {
  /// `dev.ordo.Error.<Name>` for a status code (`CONTRACT_VIOLATION` →
  /// `dev.ordo.Error.ContractViolation`).
  public static func ordo(_ code: OrdoError.Code) -> String { prefix + code.camelName }
  /// The prefix of Ordo's own error names.
  public static let prefix = "dev.ordo.Error."
  public static let accessDenied = prefix + "AccessDenied"
  /// A `Complete` for a call that is not awaited (timed out, answered, wrong txn).
  public static let stale = prefix + "Stale"
  /// A D-Bus level failure (no bus, the service stopped before a call ran).
  public static let dbus = prefix + "Dbus"
  public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
  public static let invalidSignature = "org.freedesktop.DBus.Error.InvalidSignature"
  public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
  public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
  public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
  public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
  public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
  public static let failed = "org.freedesktop.DBus.Error.Failed"
}

/// An error reply of the service: a name from ``DBusErrorName`` and a message.
enum OrdoServiceError: Error {
  /// `dev.ordo.Error.<Name>`.
  case ordo(OrdoError)
  /// `org.freedesktop.DBus.Error.InvalidArgs`.
  case invalidArgs(String)
  /// `dev.ordo.Error.AccessDenied`.
  case accessDenied(String)
  /// Another name of ``DBusErrorName``.
  case other(name: String, message: String)

  var name: String {
    switch self {
    case .ordo(let e): DBusErrorName.ordo(e.code)
    case .invalidArgs: DBusErrorName.invalidArgs
    case .accessDenied: DBusErrorName.accessDenied
    case .other(let name, _): name
    }
  }

  var message: String {
    switch self {
    case .ordo(let e): e.message
    case .invalidArgs(let m), .accessDenied(let m): m
    case .other(_, let m): m
    }
  }
}
