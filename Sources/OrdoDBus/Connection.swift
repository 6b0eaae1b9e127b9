// The one libdbus connection wrapper, shared by the service (through its
// ``Link``, which adds its main-loop hooks) and the client: connecting,
// closing, sending, reading, blocking calls, names and match rules.
import CDBus
import Ordo

#if canImport(Glibc)
import Glibc
#endif

/// Why `name` is not a bus name a connection may own or call (a
/// well-known name such as `dev.ordo.Bus`, or a unique name `:1.42`); nil
/// when it is one (libdbus' `dbus_validate_bus_name`). libdbus aborts the
/// process on an invalid name passed to `dbus_bus_request_name` or used as
/// a message's destination, so every name from outside goes through this
/// first.
package func busNameProblem(_ name: String) -> String? {
  if dbus_validate_bus_name(name, nil) != 0 { return nil }
  return "\(name.debugDescription) is not a D-Bus bus name: two or more elements of [A-Za-z0-9_-] separated by dots, "
    + "none starting with a digit, at most 255 bytes (or a unique name such as :1.42)"
}

/// `address` without its `guid=` keys (in each `;`-separated address): a
/// bus daemon or a listening service started again at the same place has
/// a new guid, which the old one's guid would refuse.
package func addressWithoutGUID(_ address: String) -> String {
  address.split(separator: ";", omittingEmptySubsequences: false).map { one in
    guard let colon = one.firstIndex(of: ":") else { return String(one) }
    let keys = one[one.index(after: colon)...].split(separator: ",").filter { !$0.hasPrefix("guid=") }
    return String(one[...colon]) + keys.joined(separator: ",")
  }.joined(separator: ";")
}

/// One private libdbus connection (`DBusConnection *`), never exiting the
/// process on disconnect: to a bus daemon (registered with it), or direct
/// to a service's listening socket, or accepted by one (a peer-to-peer
/// connection: no bus daemon, no unique name, no destinations). Its
/// failures are ``OrdoRemoteError``s: the D-Bus error name and its message.
final class Connection {
  /// The libdbus connection: handed to libdbus only by this type and by
  /// ``Link``, which installs its main-loop hooks on it.
  let raw: OpaquePointer
  /// This connection's unique name on the bus daemon ("" when direct).
  let uniqueName: String
  /// Whether it is a peer-to-peer connection (no bus daemon).
  let direct: Bool
  private(set) var closed = false

  /// Connects to `address` (nil: the system bus with `system`, else the
  /// session bus from `DBUS_SESSION_BUS_ADDRESS`) and registers with the
  /// bus daemon.
  init(address: String?, system: Bool = false) throws(OrdoRemoteError) {
    dbus_threads_init_default()
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    let c: OpaquePointer
    if address == nil && system {
      guard let s = dbus_bus_get_private(DBUS_BUS_SYSTEM, &err) else { throw Self.failure("cannot connect to the system bus", err) }
      c = s
    } else {
      guard let address = address ?? getenv("DBUS_SESSION_BUS_ADDRESS").map({ String(cString: $0) }), !address.isEmpty else {
        throw OrdoRemoteError(name: DBusErrorName.dbus, message: "no session bus: DBUS_SESSION_BUS_ADDRESS is not set; pass an address")
      }
      c = try Self.open(address)
      if dbus_bus_register(c, &err) == 0 {
        dbus_connection_close(c)
        dbus_connection_unref(c)
        throw Self.failure("cannot register with the bus at \(address)", err)
      }
    }
    dbus_connection_set_exit_on_disconnect(c, 0)
    raw = c
    direct = false
    uniqueName = dbus_bus_get_unique_name(c).map { String(cString: $0) } ?? ""
  }

  /// Connects to a service's listening socket at `address` (`ordod
  /// --listen`), peer to peer.
  init(direct address: String) throws(OrdoRemoteError) {
    dbus_threads_init_default()
    raw = try Self.open(address)
    dbus_connection_set_exit_on_disconnect(raw, 0)
    direct = true
    uniqueName = ""
  }

  /// Takes a connection a listening socket accepted (``Link``'s direct
  /// peers); it holds its own reference.
  init(accepted c: OpaquePointer) {
    raw = dbus_connection_ref(c)
    dbus_connection_set_exit_on_disconnect(raw, 0)
    direct = true
    uniqueName = ""
  }

  private static func open(_ address: String) throws(OrdoRemoteError) -> OpaquePointer {
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    guard let c = dbus_connection_open_private(address, &err) else { throw failure("cannot connect to D-Bus at \(address)", err) }
    return c
  }

  private static func failure(_ what: String, _ err: DBusError) -> OrdoRemoteError {
    OrdoRemoteError(name: DBusErrorName.dbus, message: "\(what): \(err.message.map { String(cString: $0) } ?? "unknown error")")
  }

  deinit {
    close()
    dbus_connection_unref(raw)
  }

  /// Closes the connection, after writing what is queued when `flush` (a
  /// blocking write: not for a peer that may not read).
  func close(flush: Bool = true) {
    guard !closed else { return }
    closed = true
    if flush && dbus_connection_get_is_connected(raw) != 0 { dbus_connection_flush(raw) }
    dbus_connection_close(raw)
  }

  /// Whether the connection is open.
  var isConnected: Bool { !closed && dbus_connection_get_is_connected(raw) != 0 }

  /// The socket, to poll beside other input; nil when closed.
  var unixFd: Int32? {
    var fd: Int32 = -1
    guard isConnected, dbus_connection_get_unix_fd(raw, &fd) != 0, fd >= 0 else { return nil }
    return fd
  }

  /// Bytes waiting in libdbus' outgoing queue.
  var outgoingSize: Int { dbus_connection_get_outgoing_size(raw) }

  /// Hands a message to libdbus; returns its serial, nil when it could not
  /// be queued (out of memory, or the connection is closed).
  @discardableResult
  func send(_ m: DBusMessageRef) -> UInt32? {
    var serial: UInt32 = 0
    return dbus_connection_send(raw, m.raw, &serial) != 0 ? serial : nil
  }

  /// Blocks until libdbus' outgoing queue is written.
  func flush() { dbus_connection_flush(raw) }

  /// Reads and writes the socket, waiting up to `timeoutMs` (-1: forever).
  /// Returns false once the connection is closed.
  @discardableResult
  func readWrite(timeoutMs: Int32) -> Bool { dbus_connection_read_write(raw, timeoutMs) != 0 }

  /// The name a direct connection's messages are read as coming from (the
  /// service at the other end: peer-to-peer messages carry no sender, and
  /// nothing else can send on that connection).
  static let directService = ":direct.service"

  /// The next message read, if any (on a direct connection, with
  /// ``directService`` as its sender).
  func popMessage() -> DBusMessageRef? {
    guard let m = dbus_connection_pop_message(raw) else { return nil }
    if direct { dbus_message_set_sender(m, Self.directService) }
    return DBusMessageRef(owning: m)
  }

  /// Whether messages read wait for ``dispatch()``.
  var hasDataToDispatch: Bool { dbus_connection_get_dispatch_status(raw) == DBUS_DISPATCH_DATA_REMAINS }

  /// Runs libdbus' filters on the next message read.
  func dispatch() { dbus_connection_dispatch(raw) }

  /// Sends a method call and waits for its reply; an error reply (or none
  /// within `timeoutMs`) is thrown with its D-Bus error name.
  func call(_ m: DBusMessageRef, timeoutMs: Int32) throws(OrdoRemoteError) -> DBusMessageRef {
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    guard let r = dbus_connection_send_with_reply_and_block(raw, m.raw, timeoutMs, &err) else {
      throw OrdoRemoteError(
        name: err.name.map { String(cString: $0) } ?? DBusErrorName.failed,
        message: err.message.map { String(cString: $0) } ?? "\(m.member ?? "call") failed")
    }
    return DBusMessageRef(owning: r)
  }

  /// Asks the bus daemon for a well-known name; fails unless this
  /// connection becomes its primary owner.
  func requestName(_ name: String) throws(OrdoRemoteError) {
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    let r = dbus_bus_request_name(raw, name, ORDO_DBUS_NAME_FLAG_DO_NOT_QUEUE, &err)
    if r == -1 {
      let msg = err.message.map { String(cString: $0) } ?? "unknown error"
      throw OrdoRemoteError(name: DBusErrorName.dbus, message: "cannot own the name \(name): \(msg)")
    }
    guard r == ORDO_DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER || r == ORDO_DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER else {
      throw OrdoRemoteError(name: DBusErrorName.dbus, message: "cannot own the name \(name): another connection owns it")
    }
  }

  /// Adds a match rule (a blocking call to the bus daemon).
  func addMatch(_ rule: String) throws(OrdoRemoteError) {
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    dbus_bus_add_match(raw, rule, &err)
    if dbus_error_is_set(&err) != 0 {
      let msg = err.message.map { String(cString: $0) } ?? "unknown error"
      throw OrdoRemoteError(name: DBusErrorName.dbus, message: "cannot add match rule \(rule): \(msg)")
    }
  }

  /// The monotonic clock in milliseconds (deadlines of waits and calls).
  static func nowMs() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
  }
}
