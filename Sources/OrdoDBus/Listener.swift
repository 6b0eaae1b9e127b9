// Direct connections (SPEC §16): the service's listening sockets, each a
// libdbus server whose accepted connections its ``Link`` drives as peers
// with no bus daemon in between.
import CDBus
import Ordo

#if canImport(Glibc)
import Glibc
#endif

/// The environment variable that names a service's direct address
/// (`ORDO_ADDRESS=unix:path=/run/ordo/bus`): a client given no address
/// connects there, peer to peer, instead of to the session bus.
public let ordoAddressVariable = "ORDO_ADDRESS"

/// One listening socket of a service: a `DBusServer *` on a `unix:`
/// address (`path=` or `abstract=`) or on the sockets systemd passed
/// (`systemd:`, `LISTEN_FDS`).
///
/// Peers authenticate with `EXTERNAL` only, so their identity is the
/// socket's credentials. A `path=` socket is refused while another process
/// accepts connections on it, replaced when it is stale (nothing listens),
/// created with `mode` and removed when the listener closes.
final class Listener {
  let server: OpaquePointer
  /// The address clients connect to (libdbus' form, without the server's
  /// guid).
  let address: String
  /// The socket file of a `unix:path=` address.
  let path: String?

  /// Checks a listening address without making anything: one entry, of
  /// method `unix` or `systemd`. Returns its socket file (`unix:path=`).
  static func parse(_ address: String) throws(OrdoError) -> String? {
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    var entries: UnsafeMutablePointer<OpaquePointer?>?
    var count: Int32 = 0
    guard dbus_parse_address(address, &entries, &count, &err) != 0, let entries else {
      let why = err.message.map { String(cString: $0) } ?? "unknown error"
      throw OrdoError(.invalidArgument, "cannot listen at \(address.debugDescription): \(why)")
    }
    defer { dbus_address_entries_free(entries) }
    guard count == 1, let entry = entries[0] else {
      throw OrdoError(.invalidArgument, "cannot listen at \(address.debugDescription): give one address per --listen")
    }
    let method = dbus_address_entry_get_method(entry).map { String(cString: $0) } ?? ""
    guard method == "unix" || method == "systemd" else {
      throw OrdoError(
        .invalidArgument,
        "cannot listen at \(address.debugDescription): a direct address is unix:path=…, unix:abstract=… or systemd: "
          + "(a peer's identity is its Unix socket's credentials)")
    }
    return dbus_address_entry_get_value(entry, "path").map { String(cString: $0) }
  }

  init(address: String, mode: mode_t) throws(OrdoError) {
    let path = try Self.parse(address)
    var err = DBusError()
    dbus_error_init(&err)
    defer { dbus_error_free(&err) }
    func message() -> String { err.message.map { String(cString: $0) } ?? "unknown error" }
    if let path {
      // libdbus replaces any socket file at the path: a live one is refused here.
      let alive = ordo_unix_socket_alive(path)
      if alive == 1 {
        throw OrdoError(.dbus, "cannot listen at \(path): another process (another ordod?) accepts connections there")
      }
      if alive < 0 && ordo_errno() != ENOENT {
        var st = stat()
        if lstat(path, &st) == 0 && (st.st_mode & S_IFMT) != S_IFSOCK {
          throw OrdoError(.dbus, "cannot listen at \(path): the file exists and is not a socket")
        }
      }
    }
    guard let s = dbus_server_listen(address, &err) else {
      throw OrdoError(.dbus, "cannot listen at \(address.debugDescription): \(message())")
    }
    server = s
    _ = ordo_server_external_only(s)
    self.path = path
    if let a = dbus_server_get_address(s) {
      // Without the server's guid, the address stays valid across restarts.
      self.address = addressWithoutGUID(String(cString: a))
      free(a)
    } else {
      self.address = address
    }
    if let path, chmod(path, mode) != 0 {
      let e = ordo_errno()
      close()
      throw OrdoError(.dbus, "cannot set the mode of \(path): errno \(e)")
    }
  }

  deinit { close() }

  private var closed = false

  /// Stops listening and removes the socket file.
  func close() {
    guard !closed else { return }
    closed = true
    dbus_server_disconnect(server)
    dbus_server_unref(server)
    if let path { unlink(path) }
  }
}

extension DBusService {
  /// Also answers peer-to-peer D-Bus connections on `address` (SPEC §16):
  /// `unix:path=…`, `unix:abstract=…`, or `systemd:` for the listening
  /// sockets systemd passed (`LISTEN_FDS`). Each connection is a peer with
  /// the same object, methods, signals, errors and limits as one on the bus
  /// daemon; its identity (uid, groups) is its socket's credentials, so the
  /// policy applies unchanged, and its closing is its leaving. Without a
  /// policy only this process's uid may connect and a `path=` socket is
  /// made mode 0600; with one every uid may connect (the policy decides
  /// what it may do) and the socket is 0666. Returns the address clients
  /// connect to. Service thread, or before it runs.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` for an address that is
  ///   not one of those; ``OrdoError/Code/dbus`` when the socket cannot be
  ///   made, or another process accepts connections on it.
  /// Checks an address for ``listen(_:)`` without making anything, so that
  /// a program can refuse a bad one before it starts anything else.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` as ``listen(_:)``.
  public static func checkListenAddress(_ address: String) throws(OrdoError) {
    _ = try Listener.parse(address)
  }

  @discardableResult
  public func listen(_ address: String) throws(OrdoError) -> String {
    let l = try Listener(address: address, mode: policyOn.load(ordering: .relaxed) ? 0o666 : 0o600)
    link.attach(server: l.server)
    listeners.append(l)
    log(.info, "listening for direct connections at \(l.address)")
    return l.address
  }

  /// A direct peer's connection closed: it left.
  func directPeerClosed(_ name: String, reason: String?) {
    if let reason { log(.warning, "\(name) disconnected: \(reason)") }
    peerLeft(name)
  }

  /// Stops listening (the socket files are removed).
  func closeListeners() {
    for l in listeners {
      link.detach(server: l.server)
      l.close()
    }
    listeners.removeAll()
  }
}
