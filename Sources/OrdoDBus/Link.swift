// The service's main loop: one thread drives the ``Connection`` (epoll over
// libdbus' watches and timeouts), other threads queue messages and wake it.
// Also `PThreadLocked`, the lock the loop's hand-over uses.
import CDBus
import Ordo
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The service's main loop over one ``Connection``, driven by one thread at
/// a time.
///
/// libdbus stalls when several threads send and dispatch on one connection,
/// so a `Link` owns its connection: the thread that calls ``step(timeoutMs:)``
/// (the loop thread) handles the connection's watches and timeouts through
/// an epoll set, dispatches incoming messages one at a time to ``handler``
/// (outside libdbus' own dispatch, so a handler may do anything), and sends
/// what was queued with ``send(_:droppable:)``. Other threads only queue
/// messages and write an eventfd that wakes the loop. The loop thread, when
/// it sends outside ``step(timeoutMs:)`` (a host committing on the thread
/// that dispatches), hands the message to libdbus at once. The epoll fd
/// (``fd``) is readable whenever the link has work: a host can poll it.
final class Link: @unchecked Sendable {
  let connection: Connection
  private var conn: OpaquePointer { connection.raw }
  /// Readable when ``step(timeoutMs:)`` has work to do.
  let fd: Int32
  private let wakefd: Int32
  var uniqueName: String { connection.uniqueName }

  // Loop-thread state.
  private var watches: [Int32: [OpaquePointer]] = [:]
  private var polled: Set<Int32> = []
  private var timeouts: [OpaquePointer: Int64] = [:]
  private var inbox: [DBusMessageRef] = []
  private var closed = false
  /// Depth of ``step(timeoutMs:)`` calls (nested while a writer is awaited)
  /// and ``queueing(_:)`` bodies: sends are queued while it is above 0.
  private var stepping = 0
  /// Depth of ``step(timeoutMs:)`` calls alone.
  private var inStep = 0

  /// Called on the loop thread for each incoming method call and for each
  /// signal the filter accepts.
  var handler: ((DBusMessageRef) -> Void)?
  /// Whether the filter takes a signal (else libdbus' defaults apply).
  var acceptSignal: ((DBusMessageRef) -> Bool)?

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

  /// Connects to `address` (nil: the session bus, or with `system` the
  /// system bus) and registers with the bus daemon.
  init(address: String?, system: Bool = false) throws(OrdoError) {
    do { connection = try Connection(address: address, system: system) } catch { throw OrdoError(.dbus, error.message) }
    fd = ordo_epoll_create()
    wakefd = ordo_eventfd()
    guard fd >= 0, wakefd >= 0 else {
      throw OrdoError(.dbus, "cannot create epoll/eventfd: errno \(ordo_errno())")
    }
    _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_ADD, wakefd, ORDO_EPOLLIN)
    // Never let libdbus drop the connection over a large incoming message:
    // the daemon enforces its own limit first; ours are checked per call.
    dbus_connection_set_max_message_size(conn, Int(ORDO_DBUS_MAXIMUM_MESSAGE_LENGTH))
    let me = Unmanaged.passUnretained(self).toOpaque()
    dbus_connection_set_watch_functions(
      conn,
      { w, data in Link.from(data).addWatch(w!) },
      { w, data in Link.from(data).removeWatch(w!) },
      { w, data in Link.from(data).updateWatch(w!) },
      me, nil)
    dbus_connection_set_timeout_functions(
      conn,
      { t, data in Link.from(data).addTimeout(t!) },
      { t, data in Link.from(data).removeTimeout(t!) },
      { t, data in Link.from(data).toggleTimeout(t!) },
      me, nil)
    dbus_connection_set_wakeup_main_function(conn, { data in Link.from(data).libdbusWakeup() }, me, nil)
    dbus_connection_add_filter(conn, { _, msg, data in Link.from(data).filter(msg!) }, me, nil)
  }

  private static func from(_ data: UnsafeMutableRawPointer?) -> Link {
    Unmanaged<Link>.fromOpaque(data!).takeUnretainedValue()
  }

  deinit {
    close()
    Glibc.close(fd)
    Glibc.close(wakefd)
  }

  /// Flushes what is queued and closes the connection. Loop thread.
  func close() {
    guard !closed else { return }
    closed = true
    flushOutbox()
    connection.close()
    dbus_connection_set_watch_functions(conn, nil, nil, nil, nil, nil)
    dbus_connection_set_timeout_functions(conn, nil, nil, nil, nil, nil)
    dbus_connection_set_wakeup_main_function(conn, nil, nil, nil)
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
  /// takes it). Loop thread.
  private func transmit(_ m: DBusMessageRef, _ droppable: Bool) {
    if droppable && maxOutgoingBytes > 0 && connection.outgoingSize > maxOutgoingBytes {
      droppedCount.add(1, ordering: .relaxed)
      return
    }
    if connection.send(m) != nil { sentCount.add(1, ordering: .relaxed) }
  }

  // MARK: The loop

  /// Waits up to `timeoutMs` (-1: forever) for work, then handles the
  /// connection's I/O and timeouts, dispatches incoming messages and sends
  /// queued ones. Returns false once the connection is closed.
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
    if !inbox.isEmpty || connection.hasDataToDispatch { wait = 0 }
    let now = Connection.nowMs()
    if let next = timeouts.values.min() {
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
    if !connection.isConnected {
      // Hand over what is left (the Disconnected signal, replies).
      dispatchIncoming()
      return false
    }
    return true
  }

  private func dispatchIncoming() {
    var budget = 512
    while budget > 0 {
      while !inbox.isEmpty {
        let m = inbox.removeFirst()
        handler?(m)
        flushOutbox()
      }
      guard connection.hasDataToDispatch else { return }
      connection.dispatch()
      budget -= 1
    }
    if budget == 0 { wake() }
  }

  private func filter(_ msg: OpaquePointer) -> DBusHandlerResult {
    let type = dbus_message_get_type(msg)
    let m = DBusMessageRef(retaining: msg)
    if type == ORDO_DBUS_MESSAGE_TYPE_METHOD_CALL || (type == ORDO_DBUS_MESSAGE_TYPE_SIGNAL && acceptSignal?(m) == true) {
      inbox.append(m)
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
