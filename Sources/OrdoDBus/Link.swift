// The service's main loop: one thread drives its ``Connection``s (the bus
// daemon's and its direct peers') and its listening sockets' servers
// (epoll over libdbus' watches and timeouts), other threads queue messages
// and wake it. Also `PThreadLocked`, the lock the loop's hand-over uses.
import CDBus
import Ordo
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The service's main loop over its ``Connection``s, driven by one thread at
/// a time: the connection to the bus daemon (if any) and the direct peers'
/// connections its listening sockets (``Listener``) accept.
///
/// libdbus stalls when several threads send and dispatch on one connection,
/// so a `Link` owns its connections: the thread that calls ``step(timeoutMs:)``
/// (the loop thread) handles their watches and timeouts (and the listening
/// servers') through one epoll set, dispatches incoming messages one at a
/// time to ``handler``
/// (outside libdbus' own dispatch, so a handler may do anything), and sends
/// what was queued with ``send(_:droppable:)``. Other threads only queue
/// messages and write an eventfd that wakes the loop. The loop thread, when
/// it sends outside ``step(timeoutMs:)`` (a host committing on the thread
/// that dispatches), hands the message to libdbus at once. The epoll fd
/// (``fd``) is readable whenever the link has work: a host can poll it.
///
/// A direct peer has no bus daemon to name it: the link names it
/// (``directPrefix`` and a number), stamps that name as the sender of each
/// method call it sends, routes messages addressed to that name to its
/// connection (without the destination, which peer-to-peer messages do not
/// carry), and reports its leaving to ``peerClosed`` once the calls it sent
/// before are handled.
final class Link: @unchecked Sendable {
  /// The connection to the bus daemon; nil when the service answers on its
  /// listening sockets only.
  let connection: Connection?
  /// Readable when ``step(timeoutMs:)`` has work to do.
  let fd: Int32
  private let wakefd: Int32
  var uniqueName: String { connection?.uniqueName ?? "" }

  /// The names of direct peers start with this (a bus daemon's unique names
  /// are numbers: `:1.42`).
  static let directPrefix = ":direct."
  /// The bus daemon's connection, then the direct peers' by name.
  private var busEndpoint: Endpoint?
  private var direct: [String: Endpoint] = [:]
  private var directCount = 0
  /// The direct peers not yet authenticated, and when they must be.
  private var unauthenticated: [String: Int64] = [:]
  /// A direct peer that has not authenticated within this many
  /// milliseconds is disconnected; beyond ``maxUnauthenticated`` such
  /// peers, new connections are closed at once (the system bus daemon's
  /// `auth_timeout` and `max_incomplete_connections`): connections that
  /// never authenticate cannot use up the service's file descriptors.
  static let authTimeoutMs: Int64 = 5000
  static let maxUnauthenticated = 64

  // Loop-thread state.
  private var watches: [Int32: [OpaquePointer]] = [:]
  private var polled: Set<Int32> = []
  private var timeouts: [OpaquePointer: Int64] = [:]
  private var inbox: [Incoming] = []
  private var closed = false
  /// Depth of ``step(timeoutMs:)`` calls (nested while a writer is awaited)
  /// and ``queueing(_:)`` bodies: sends are queued while it is above 0.
  private var stepping = 0
  /// Depth of ``step(timeoutMs:)`` calls alone.
  private var inStep = 0

  /// Called on the loop thread for each incoming method call and for each
  /// signal the filter accepts.
  var handler: ((DBusMessageRef) -> Void)?
  /// Whether the filter takes a signal from the bus daemon's connection
  /// (else libdbus' defaults apply).
  var acceptSignal: ((DBusMessageRef) -> Bool)?
  /// Called on the loop thread when a direct peer's connection closed (or
  /// was closed: the reason), after the calls it sent were handled.
  var peerClosed: ((String, String?) -> Void)?
  /// Whether a direct peer connecting as this uid may authenticate
  /// (nil: libdbus' rule, the service's own uid only). Loop thread.
  var allowUser: ((UInt) -> Bool)?
  /// The largest message a direct peer may send: a larger one closes its
  /// connection (libdbus reads no further).
  var maxIncomingBytes = Int(ORDO_DBUS_MAXIMUM_MESSAGE_LENGTH)

  /// When the connection's outgoing queue holds more than this many bytes,
  /// droppable messages (Notify signals) are dropped and counted.
  var maxOutgoingBytes: Int = 64 << 20
  private let droppedCount = Atomic<UInt64>(0)
  private let sentCount = Atomic<UInt64>(0)
  private let loopThread = Atomic<UInt>(0)
  private let outbox = PThreadLocked<[(DBusMessageRef, Bool)]>([])

  /// Dropped droppable messages so far.
  var dropped: UInt64 { droppedCount.load(ordering: .relaxed) }
  /// Messages handed to libdbus so far.
  var sent: UInt64 { sentCount.load(ordering: .relaxed) }

  /// Drives `connection` (to a bus daemon; nil: none, the listening
  /// sockets added with ``attach(server:)`` only).
  init(connection: Connection?) throws(OrdoError) {
    self.connection = connection
    fd = ordo_epoll_create()
    wakefd = ordo_eventfd()
    guard fd >= 0, wakefd >= 0 else {
      throw OrdoError(.dbus, "cannot create epoll/eventfd: errno \(ordo_errno())")
    }
    _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_ADD, wakefd, ORDO_EPOLLIN)
    if let connection {
      // Never let libdbus drop the connection over a large incoming message:
      // the daemon enforces its own limit first; ours are checked per call.
      dbus_connection_set_max_message_size(connection.raw, Int(ORDO_DBUS_MAXIMUM_MESSAGE_LENGTH))
      busEndpoint = hook(connection, peer: nil)
    }
  }

  private static func from(_ data: UnsafeMutableRawPointer?) -> Link {
    Unmanaged<Link>.fromOpaque(data!).takeUnretainedValue()
  }

  /// One connection the loop drives: the bus daemon's (`peer` nil: its
  /// messages carry their senders) or a direct peer's (`peer`: its name).
  private final class Endpoint {
    let connection: Connection
    let peer: String?
    unowned let link: Link

    init(_ connection: Connection, peer: String?, link: Link) {
      self.connection = connection
      self.peer = peer
      self.link = link
    }

    static func from(_ data: UnsafeMutableRawPointer?) -> Endpoint {
      Unmanaged<Endpoint>.fromOpaque(data!).takeUnretainedValue()
    }
  }

  /// What the loop hands to the service, in arrival order.
  private enum Incoming {
    case message(DBusMessageRef)
    case closed(String, reason: String?)
  }

  // libdbus' main-loop hooks, shared by the connections and the servers.
  private static let addWatchHook: DBusAddWatchFunction = { w, data in Link.from(data).addWatch(w!) }
  private static let removeWatchHook: DBusRemoveWatchFunction = { w, data in Link.from(data).removeWatch(w!) }
  private static let toggleWatchHook: DBusWatchToggledFunction = { w, data in Link.from(data).updateWatch(w!) }
  private static let addTimeoutHook: DBusAddTimeoutFunction = { t, data in Link.from(data).addTimeout(t!) }
  private static let removeTimeoutHook: DBusRemoveTimeoutFunction = { t, data in Link.from(data).removeTimeout(t!) }
  private static let toggleTimeoutHook: DBusTimeoutToggledFunction = { t, data in Link.from(data).toggleTimeout(t!) }

  /// Installs the loop's hooks and the message filter on a connection.
  private func hook(_ c: Connection, peer: String?) -> Endpoint {
    let e = Endpoint(c, peer: peer, link: self)
    let me = Unmanaged.passUnretained(self).toOpaque()
    dbus_connection_set_watch_functions(c.raw, Self.addWatchHook, Self.removeWatchHook, Self.toggleWatchHook, me, nil)
    dbus_connection_set_timeout_functions(c.raw, Self.addTimeoutHook, Self.removeTimeoutHook, Self.toggleTimeoutHook, me, nil)
    dbus_connection_set_wakeup_main_function(c.raw, { data in Link.from(data).libdbusWakeup() }, me, nil)
    dbus_connection_add_filter(
      c.raw, { _, msg, data in Endpoint.from(data).link.filter(msg!, Endpoint.from(data)) }, Unmanaged.passUnretained(e).toOpaque(), nil)
    return e
  }

  /// Closes a connection (flushing it when `flush`) and takes the loop's
  /// hooks off it.
  private func unhook(_ e: Endpoint, flush: Bool) {
    e.connection.close(flush: flush)
    let raw = e.connection.raw
    dbus_connection_set_watch_functions(raw, nil, nil, nil, nil, nil)
    dbus_connection_set_timeout_functions(raw, nil, nil, nil, nil, nil)
    dbus_connection_set_wakeup_main_function(raw, nil, nil, nil)
  }

  // MARK: Listening sockets and direct peers

  /// Drives a listening socket's server (`DBusServer *`): its watches, and
  /// each connection it accepts becomes a direct peer. Loop thread (or
  /// before the loop runs).
  func attach(server: OpaquePointer) {
    let me = Unmanaged.passUnretained(self).toOpaque()
    dbus_server_set_watch_functions(server, Self.addWatchHook, Self.removeWatchHook, Self.toggleWatchHook, me, nil)
    dbus_server_set_timeout_functions(server, Self.addTimeoutHook, Self.removeTimeoutHook, Self.toggleTimeoutHook, me, nil)
    dbus_server_set_new_connection_function(server, { _, c, data in Link.from(data).adopt(c!) }, me, nil)
  }

  /// Takes the loop's hooks off a server (before it is disconnected).
  func detach(server: OpaquePointer) {
    dbus_server_set_new_connection_function(server, nil, nil, nil)
    dbus_server_set_watch_functions(server, nil, nil, nil, nil, nil)
    dbus_server_set_timeout_functions(server, nil, nil, nil, nil, nil)
  }

  /// A connection a server accepted (not yet authenticated): named, hooked,
  /// limited to ``maxIncomingBytes`` per message, and authenticated by
  /// ``allowUser``.
  private func adopt(_ raw: OpaquePointer) {
    guard unauthenticated.count < Self.maxUnauthenticated else {
      dbus_connection_close(raw)
      return
    }
    directCount += 1
    let name = Self.directPrefix + String(directCount)
    let c = Connection(accepted: raw)
    dbus_connection_set_max_message_size(raw, maxIncomingBytes)
    dbus_connection_set_unix_user_function(
      raw,
      { _, uid, data in
        guard let allow = Link.from(data).allowUser else { return uid == UInt(getuid()) ? 1 : 0 }
        return allow(uid) ? 1 : 0
      }, Unmanaged.passUnretained(self).toOpaque(), nil)
    direct[name] = hook(c, peer: name)
    unauthenticated[name] = Connection.nowMs() + Self.authTimeoutMs
  }

  /// Forgets the direct peers that authenticated or left, and disconnects
  /// those whose time to authenticate is up.
  private func checkAuthentication(_ now: Int64) {
    for (name, deadline) in unauthenticated {
      guard let e = direct[name], dbus_connection_get_is_authenticated(e.connection.raw) == 0 else {
        unauthenticated[name] = nil
        continue
      }
      if deadline <= now {
        unauthenticated[name] = nil
        disconnect(name, reason: "it did not authenticate within \(Self.authTimeoutMs) ms")
      }
    }
  }

  /// The socket credentials of direct peer `name`: its uid, its groups
  /// (nil when the kernel does not report them) and its pid; nil when it
  /// is not a connected, authenticated direct peer.
  func credentials(of name: String) -> (uid: UInt32, gids: [UInt32]?, pid: UInt32?)? {
    guard let c = direct[name]?.connection.raw else { return nil }
    var uid: UInt = 0
    guard dbus_connection_get_unix_user(c, &uid) != 0 else { return nil }
    var pid: UInt = 0
    let knownPid = dbus_connection_get_unix_process_id(c, &pid) != 0
    var gids: [UInt32]?
    var sock: Int32 = -1
    if dbus_connection_get_socket(c, &sock) != 0 {
      var list = [UInt32](repeating: 0, count: 64)
      var n = ordo_peer_groups(sock, &list, Int32(list.count))
      if n > list.count {
        list = [UInt32](repeating: 0, count: Int(n))
        n = ordo_peer_groups(sock, &list, n)
      }
      if n >= 0 { gids = Array(list.prefix(Int(n))) }
    }
    return (UInt32(clamping: uid), gids, knownPid ? UInt32(clamping: pid) : nil)
  }

  /// Closes direct peer `name`'s connection without flushing it; the
  /// service learns it left (``peerClosed``, with `reason`) after what is
  /// already queued from it.
  func disconnect(_ name: String, reason: String) {
    guard let e = direct.removeValue(forKey: name) else { return }
    unhook(e, flush: false)
    inbox.append(.closed(name, reason: reason))
    wake()
  }

  deinit {
    close()
    Glibc.close(fd)
    Glibc.close(wakefd)
  }

  /// Flushes what is queued and closes the connections (the direct peers'
  /// with what their sockets take at once: a peer that does not read
  /// holds nothing up). Loop thread.
  func close() {
    guard !closed else { return }
    closed = true
    flushOutbox()
    for e in direct.values {
      _ = dbus_connection_read_write(e.connection.raw, 0)
      unhook(e, flush: false)
    }
    direct.removeAll()
    if let busEndpoint { unhook(busEndpoint, flush: true) }
    inbox.removeAll()
    outbox.withLock { $0.removeAll() }
  }

  // MARK: Sending

  /// Queues a message; the loop thread sends queued messages in order.
  /// A droppable message is dropped (and counted) when the connection's
  /// outgoing queue is over ``maxOutgoingBytes``.
  ///
  /// On the loop thread outside ``step(timeoutMs:)`` (a host that commits
  /// on the thread that dispatches, between two dispatches) the message goes
  /// to libdbus at once, after what other threads queued: nothing would
  /// send it before the next step, and the host's poll of ``fd`` would not
  /// wake for it. Inside a step, messages are queued so that a handler can
  /// still place a reply before them (``send(_:at:)``); the step sends them.
  func send(_ m: DBusMessageRef, droppable: Bool = false) {
    if onLoopThread && stepping == 0 && !closed {  // loop-thread state read on the loop thread only
      flushOutbox()
      transmit(m, droppable)
      return
    }
    outbox.withLock { $0.append((m, droppable)) }
    if !onLoopThread { wake() }
  }

  /// The number of queued messages: with ``send(_:at:)``, puts a message
  /// before those queued after this mark.
  var mark: Int { outbox.withLock { $0.count } }

  /// Queues a message at a position returned by ``mark``.
  func send(_ m: DBusMessageRef, at index: Int) {
    outbox.withLock { $0.insert((m, false), at: min(index, $0.count)) }
    if !onLoopThread { wake() }
  }

  /// Runs `body` on the loop thread with its sends queued, as inside a step
  /// (so that ``mark`` and ``send(_:at:)`` order them), then sends them.
  /// For handlers run outside ``step(timeoutMs:)``.
  func queueing<R>(_ body: () throws -> R) rethrows -> R {
    stepping += 1
    defer {
      stepping -= 1
      if stepping == 0 { flushOutbox() }
    }
    return try body()
  }

  private var onLoopThread: Bool { loopThread.load(ordering: .relaxed) == UInt(pthread_self()) }

  /// Whether the calling thread is the loop thread (the last one that
  /// called ``step(timeoutMs:)``).
  var isLoopThread: Bool { onLoopThread }

  /// libdbus asks for the main loop to run (a message came in, or one was
  /// queued for sending). Inside a step on the loop thread that is already
  /// under way: the step dispatches what came in after handling the watches
  /// and libdbus writes what is queued through the writable watch, so the
  /// eventfd is not written (it cost a write, a wakeup of the next
  /// `epoll_wait`, a read and one more loop iteration per incoming call).
  /// Elsewhere (another thread, or the loop thread between two steps, where a
  /// host polls ``fd``) it wakes the loop.
  private func libdbusWakeup() {
    if onLoopThread && inStep > 0 { return }  // `inStep` is read on the loop thread only
    wake()
  }

  /// Wakes the loop thread. Any thread; async-signal-safe.
  func wake() {
    var one: UInt64 = 1
    _ = withUnsafePointer(to: &one) { write(wakefd, $0, 8) }
  }

  private func flushOutbox() {
    let items = outbox.withLock { q -> [(DBusMessageRef, Bool)] in
      if q.isEmpty { return [] }
      let x = q
      q.removeAll()
      return x
    }
    for (m, droppable) in items { transmit(m, droppable) }
  }

  /// Hands one message to libdbus (which writes it at once when the socket
  /// takes it): to the direct peer it is addressed to, else to the bus
  /// daemon. A message for a direct peer that left goes nowhere; a direct
  /// peer whose outgoing queue is over ``maxOutgoingBytes`` when a message
  /// that may not be dropped is due (it does not read its replies) is
  /// disconnected. Loop thread.
  private func transmit(_ m: DBusMessageRef, _ droppable: Bool) {
    let target: Endpoint
    if let d = dbus_message_get_destination(m.raw), strncmp(d, Self.directPrefix, Self.directPrefix.utf8.count) == 0 {
      guard let e = direct[String(cString: d)] else { return }
      dbus_message_set_destination(m.raw, nil)
      target = e
    } else {
      guard let busEndpoint else { return }
      target = busEndpoint
    }
    if maxOutgoingBytes > 0 && target.connection.outgoingSize > maxOutgoingBytes {
      if droppable {
        droppedCount.add(1, ordering: .relaxed)
        return
      }
      if let peer = target.peer {
        disconnect(peer, reason: "it does not read: more than \(maxOutgoingBytes) bytes wait to be sent to it")
        return
      }
    }
    if target.connection.send(m) != nil { sentCount.add(1, ordering: .relaxed) }
  }

  // MARK: The loop

  /// Waits up to `timeoutMs` (-1: forever) for work, then handles the
  /// connection's I/O and timeouts, dispatches incoming messages and sends
  /// queued ones. Returns false once the link or the connection to the bus
  /// daemon is closed.
  @discardableResult
  func step(timeoutMs: Int32) -> Bool {
    guard !closed else { return false }
    loopThread.store(UInt(pthread_self()), ordering: .relaxed)
    stepping += 1
    inStep += 1
    defer {
      stepping -= 1
      inStep -= 1
    }
    flushOutbox()
    var wait = timeoutMs
    if !inbox.isEmpty || hasDataToDispatch { wait = 0 }
    let now = Connection.nowMs()
    // libdbus' next timeout, or a direct peer's time to authenticate.
    var next = timeouts.values.min()
    if let auth = unauthenticated.values.min() { next = min(next ?? auth, auth) }
    if let next {
      let left = Int32(clamping: max(0, next - now))
      wait = wait < 0 ? left : min(wait, left)
    }
    var fds = [Int32](repeating: 0, count: 32)
    var evs = [UInt32](repeating: 0, count: 32)
    let n = ordo_epoll_wait(fd, &fds, &evs, 32, wait)
    for i in 0..<max(0, Int(n)) {
      if fds[i] == wakefd {
        var v: UInt64 = 0
        _ = withUnsafeMutablePointer(to: &v) { read(wakefd, $0, 8) }
      } else {
        handleWatches(fds[i], evs[i])
      }
    }
    if !unauthenticated.isEmpty { checkAuthentication(Connection.nowMs()) }
    if !timeouts.isEmpty {
      let t = Connection.nowMs()
      for (timeout, deadline) in timeouts where deadline <= t {
        guard timeouts[timeout] != nil else { continue }
        timeouts[timeout] = t + Int64(dbus_timeout_get_interval(timeout))
        dbus_timeout_handle(timeout)
      }
    }
    dispatchIncoming()
    flushOutbox()
    if let connection, !connection.isConnected {
      // Hand over what is left (the Disconnected signal, replies).
      dispatchIncoming()
      return false
    }
    return true
  }

  /// Whether a connection has messages read and not yet dispatched.
  private var hasDataToDispatch: Bool {
    if let busEndpoint, busEndpoint.connection.hasDataToDispatch { return true }
    return direct.values.contains { $0.connection.hasDataToDispatch }
  }

  private func dispatchIncoming() {
    var budget = 512
    while budget > 0 {
      while !inbox.isEmpty {
        switch inbox.removeFirst() {
        case .message(let m): handler?(m)
        case .closed(let name, let reason):
          if let e = direct.removeValue(forKey: name) { unhook(e, flush: false) }
          peerClosed?(name, reason)
        }
        flushOutbox()
      }
      // One message from each connection that has one, in turns: a peer
      // that floods the service does not hold the others back.
      var dispatched = false
      if let busEndpoint, busEndpoint.connection.hasDataToDispatch {
        busEndpoint.connection.dispatch()
        budget -= 1
        dispatched = true
      }
      for e in direct.values where e.connection.hasDataToDispatch {
        e.connection.dispatch()
        budget -= 1
        dispatched = true
      }
      guard dispatched else { return }
    }
    wake()
  }

  /// libdbus' filter: method calls (and the signals ``acceptSignal`` takes
  /// from the bus daemon) go to the inbox. A direct peer's method call gets
  /// the peer's name as its sender (whatever the peer wrote there); its
  /// `Disconnected` is its leaving; anything else it sends is dropped.
  private func filter(_ msg: OpaquePointer, _ e: Endpoint) -> DBusHandlerResult {
    let type = dbus_message_get_type(msg)
    if let peer = e.peer {
      if type == ORDO_DBUS_MESSAGE_TYPE_METHOD_CALL {
        if dbus_message_set_sender(msg, peer) != 0 { inbox.append(.message(DBusMessageRef(retaining: msg))) }
      } else if type == ORDO_DBUS_MESSAGE_TYPE_SIGNAL, dbus_message_is_signal(msg, "org.freedesktop.DBus.Local", "Disconnected") != 0 {
        if direct[peer] != nil { inbox.append(.closed(peer, reason: nil)) }
      }
      return DBUS_HANDLER_RESULT_HANDLED
    }
    let m = DBusMessageRef(retaining: msg)
    if type == ORDO_DBUS_MESSAGE_TYPE_METHOD_CALL || (type == ORDO_DBUS_MESSAGE_TYPE_SIGNAL && acceptSignal?(m) == true) {
      inbox.append(.message(m))
      return DBUS_HANDLER_RESULT_HANDLED
    }
    return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
  }

  // MARK: Watches and timeouts

  private func addWatch(_ w: OpaquePointer) -> dbus_bool_t {
    let wfd = dbus_watch_get_unix_fd(w)
    watches[wfd, default: []].append(w)
    updatePoll(wfd)
    return 1
  }

  private func removeWatch(_ w: OpaquePointer) {
    let wfd = dbus_watch_get_unix_fd(w)
    watches[wfd]?.removeAll { $0 == w }
    if watches[wfd]?.isEmpty == true { watches[wfd] = nil }
    updatePoll(wfd)
  }

  private func updateWatch(_ w: OpaquePointer) {
    updatePoll(dbus_watch_get_unix_fd(w))
  }

  private func updatePoll(_ wfd: Int32) {
    guard wfd >= 0 else { return }
    guard let list = watches[wfd] else {
      if polled.remove(wfd) != nil { _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_DEL, wfd, 0) }
      return
    }
    var events: UInt32 = 0
    for w in list where dbus_watch_get_enabled(w) != 0 {
      let flags = dbus_watch_get_flags(w)
      if flags & DBUS_WATCH_READABLE.rawValue != 0 { events |= ORDO_EPOLLIN }
      if flags & DBUS_WATCH_WRITABLE.rawValue != 0 { events |= ORDO_EPOLLOUT }
    }
    if polled.contains(wfd) {
      _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_MOD, wfd, events)
    } else if ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_ADD, wfd, events) == 0 {
      polled.insert(wfd)
    }
  }

  private func handleWatches(_ wfd: Int32, _ ev: UInt32) {
    guard let list = watches[wfd] else { return }
    var flags: UInt32 = 0
    if ev & ORDO_EPOLLIN != 0 { flags |= DBUS_WATCH_READABLE.rawValue }
    if ev & ORDO_EPOLLOUT != 0 { flags |= DBUS_WATCH_WRITABLE.rawValue }
    if ev & ORDO_EPOLLERR != 0 { flags |= DBUS_WATCH_ERROR.rawValue }
    if ev & ORDO_EPOLLHUP != 0 { flags |= DBUS_WATCH_HANGUP.rawValue }
    for w in list {
      // An earlier handle may have removed or disabled this watch.
      guard watches[wfd]?.contains(w) == true, dbus_watch_get_enabled(w) != 0 else { continue }
      let mine = (dbus_watch_get_flags(w) | DBUS_WATCH_ERROR.rawValue | DBUS_WATCH_HANGUP.rawValue) & flags
      if mine != 0 { dbus_watch_handle(w, mine) }
    }
  }

  private func addTimeout(_ t: OpaquePointer) -> dbus_bool_t {
    if dbus_timeout_get_enabled(t) != 0 { timeouts[t] = Connection.nowMs() + Int64(dbus_timeout_get_interval(t)) }
    return 1
  }

  private func removeTimeout(_ t: OpaquePointer) { timeouts[t] = nil }

  private func toggleTimeout(_ t: OpaquePointer) {
    timeouts[t] = dbus_timeout_get_enabled(t) != 0 ? Connection.nowMs() + Int64(dbus_timeout_get_interval(t)) : nil
  }
}

/// A value guarded by a pthread mutex. Used instead of `Synchronization.Mutex`
/// where other threads hand work to the loop thread: ThreadSanitizer follows
/// pthread mutexes, not the futex `Mutex` is built on, so `make tsan` stays
/// meaningful.
final class PThreadLocked<Value>: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private var value: Value

  init(_ value: Value) {
    self.value = value
    pthread_mutex_init(mutex, nil)
  }

  deinit {
    pthread_mutex_destroy(mutex)
    mutex.deallocate()
  }

  func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body(&value)
  }
}
