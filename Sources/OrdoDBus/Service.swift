// The published bus's service: the `DBusService` type, its state and its
// lifecycle (connect, dispatch, run, stop, close, policy, durability, log).
// Its methods, peers, writer calls and Notify are extensions in their own files.
import CDBus
import Ordo
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The version of the D-Bus interface implementation (property `Version`).
public let ordoDBusVersion = "0.1.0"

/// The object path of a published bus.
public let ordoObjectPath = "/dev/ordo/Bus"
/// The interface of a published bus.
public let ordoInterface = "dev.ordo.Bus1"
/// The default well-known name.
public let ordoDefaultName = "dev.ordo.Bus"
/// Contract object paths are this prefix followed by the contract id.
public let ordoContractPathPrefix = "/dev/ordo/Bus/contract/"

/// How much a service reports.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
  /// Failures of the service itself.
  case error
  /// Error replies to peers, limits reached, dropped signals.
  case warning
  /// Registrations, departures, start and stop.
  case info
  /// Every call.
  case debug

  public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }

  /// Parses `error`, `warning`/`warn`, `info`, `debug`.
  public init?(name: String) {
    switch name.lowercased() {
    case "error": self = .error
    case "warning", "warn": self = .warning
    case "info": self = .info
    case "debug": self = .debug
    default: return nil
    }
  }
}

/// Publishes a ``Bus`` on D-Bus as `dev.ordo.Bus1` at `/dev/ordo/Bus`
/// (SPEC §7).
///
/// One thread drives the service: the one that calls ``run()`` or
/// ``dispatch(timeoutMs:)``. It owns the D-Bus connection, answers every
/// method call and runs the transactions of remote `Commit`s (so contract
/// callbacks of the host run on it for those). Other threads may commit on
/// the bus at any time: `Notify` signals their passes produce are queued and
/// sent by the service thread, which ``fd`` wakes. The service thread's own
/// commits between two dispatches send their `Notify` signals at once.
///
/// Do not call ``dispatch(timeoutMs:)`` while the same thread holds a
/// transaction open: a remote `Commit` would join it.
public final class DBusService: @unchecked Sendable {
  /// The published bus.
  public let bus: Bus
  /// The well-known name owned.
  public let name: String
  /// This connection's unique name on the bus daemon ("" without one).
  public var uniqueName: String { link.uniqueName }
  /// The limits in force.
  public let limits: ServiceLimits

  // The connection and the lifecycle (this file).
  let link: Link
  let logLevel: LogLevel
  let logger: (@Sendable (LogLevel, String) -> Void)?
  let stopFlag = Atomic<Bool>(false)
  var closed = false
  /// The listening sockets of direct connections (Listener.swift).
  var listeners: [Listener] = []

  // Peers and their remote contracts (Peers.swift, Methods+Contracts.swift).
  /// Loop-thread state: the remote contracts, indexed by id and by peer.
  var remote = RemoteContracts()

  // Access (Access.swift).
  /// The access policy (nil: every peer has every right). Any thread.
  let policyBox: PThreadLocked<Policy?>
  /// Whether a policy is in force (so that peers' identities are fetched).
  let policyOn = Atomic<Bool>(false)

  // Writer calls and the calls queued meanwhile (WriterCalls.swift,
  // MethodTable.swift).
  /// The awaited writer call.
  let slot = WaitSlot()
  /// Nested dispatch loops of writer calls awaited on the service thread.
  var loopWaits = 0
  /// Method calls (and departures) held back until the waiting pass ends,
  /// in arrival order.
  var deferred: [Deferred] = []
  /// Whether ``runDeferred()`` is running them.
  var draining = false
  /// Greater than 0 while the service thread is inside a bus call that may
  /// wait for the bus's transaction (Register, Unregister, Commit, cleanup).
  let loopInBusCall = Atomic<Int>(0)
  /// A Register whose writer contract is called initially before the
  /// call returns: its reply is sent before the Notify.
  var initialRegister: (call: DBusMessageRef, replied: Bool)?

  /// The service's counters (ServiceStatistics.swift).
  let statistics = ServiceStatistics()
  /// Commit replies and observers' Notify signals held until their
  /// transaction is durable (AcknowledgementHold.swift, SPEC §11).
  let hold = AcknowledgementHold()
  /// ``busyPoll`` in nanoseconds. Any thread.
  let busyPollNanoseconds = Atomic<Int64>(BusyPoll.nanoseconds(BusyPoll.defaultLimit))
  /// The peers subscribed to pass traces (`SubscribeTrace`); the bus's
  /// trace hook is installed only while there is one (Methods+Traces.swift).
  let traces = TraceSubscribers()
  /// The owners of the values peers committed as owned, by peer (SPEC §15;
  /// Owners.swift). Loop thread only.
  var owners: [String: Owner] = [:]
  /// The key of the service's trace listener on the bus, while installed.
  let traceListener = PThreadLocked<UInt64?>(nil)

  /// Connects to `address` (nil: the session bus; `systemBus`: the system
  /// bus), owns `name` and starts answering on the thread that then calls
  /// ``run()`` or ``dispatch(timeoutMs:)``. Without `busDaemon` it connects
  /// to no bus daemon and answers only the direct connections of the
  /// sockets ``listen(_:)`` adds. With a `policy`, each peer has the rights
  /// it grants to its uid and gids (``setPolicy(_:)`` replaces it).
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` when `name` is not a valid
  ///   D-Bus bus name (nothing connected); ``OrdoError/Code/dbus`` when the
  ///   bus cannot be reached or the name is owned by another connection.
  public init(
    bus: Bus, address: String? = nil, systemBus: Bool = false, name: String = ordoDefaultName, busDaemon: Bool = true,
    limits: ServiceLimits = ServiceLimits(), policy: Policy? = nil,
    logLevel: LogLevel = .warning, logger: (@Sendable (LogLevel, String) -> Void)? = nil
  ) throws(OrdoError) {
    if let problem = busNameProblem(name) { throw OrdoError(.invalidArgument, problem) }
    self.bus = bus
    self.name = name
    self.limits = limits
    self.logLevel = logLevel
    self.logger = logger
    policyBox = PThreadLocked(policy)
    policyOn.store(policy != nil, ordering: .relaxed)
    let connection: Connection?
    do { connection = busDaemon ? try Connection(address: address, system: systemBus) : nil } catch { throw OrdoError(.dbus, error.message) }
    link = try Link(connection: connection)
    if let connection {
      do {
        // One match rule tells us about every peer that leaves.
        try connection.addMatch(
          "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg2=''"
        )
        try connection.requestName(name)
      } catch { throw OrdoError(.dbus, error.message) }
    }
    link.maxOutgoingBytes = limits.maxOutgoingBytes
    link.maxIncomingBytes = limits.maxMessageBytes
    link.acceptSignal = { m in
      m.sender == "org.freedesktop.DBus" && m.interface == "org.freedesktop.DBus" && m.member == "NameOwnerChanged"
    }
    link.handler = { [unowned self] m in self.handle(m) }
    link.peerClosed = { [unowned self] name, reason in self.directPeerClosed(name, reason: reason) }
    // Without a policy a direct peer must be this process's user (as on a
    // session bus); with one, any user connects and the policy decides.
    link.allowUser = { [unowned self] uid in self.policyOn.load(ordering: .relaxed) || uid == UInt(getuid()) }
    if busDaemon { log(.info, "serving \(ordoInterface) at \(ordoObjectPath) as \(name) (\(link.uniqueName))") }
  }

  deinit { close() }

  /// Replaces the access policy (nil: every peer has every right). Peers and
  /// contracts stay; the new rules apply from the next call and `Notify`.
  /// Any thread.
  public func setPolicy(_ policy: Policy?) {
    policyBox.withLock { $0 = policy }
    policyOn.store(policy != nil, ordering: .relaxed)
    link.wake()
    log(.info, policy.map { "access policy \($0.source): \($0.rules.count) rule\($0.rules.count == 1 ? "" : "s")" } ?? "no access policy: every peer has every right")
  }

  /// The access policy in force.
  public var policy: Policy? { policyBox.withLock { $0 } }

  /// Makes the service acknowledge only durable transactions (SPEC §11):
  /// from now on every `Commit` reply and every observer's `Notify` is held
  /// until `durability.sync()` says its transaction is durable; the
  /// `Commit`s of one dispatch iteration (and those queued behind a
  /// waiting writer) share one sync. A transaction the sync reports lost
  /// gets `dev.ordo.Error.Storage` and its `Notify`s are dropped. Writer
  /// contracts' `Notify` and `Complete` replies are not held: they belong
  /// to the pass, which runs before the commit (docs/dbus.md). Call it on
  /// the service thread before ``run()``; nil turns holding off (after a
  /// last sync of what is held).
  public func setDurability(_ durability: Durability?) {
    releaseHeld()
    hold.set(durability)
  }

  /// How long ``run()`` keeps polling its connections after a sync, before
  /// it sleeps until the next message (default 50 µs; zero: it sleeps at
  /// once). A writer waiting for its `Commit` reply sends its next
  /// `Commit` soon after, and finds the service awake (BusyPoll.swift,
  /// docs/dbus.md "Durable state"). Only with a durability set.
  public var busyPoll: Duration { .nanoseconds(busyPollNanoseconds.load(ordering: .relaxed)) }

  /// The limits ``setBusyPoll(_:)`` accepts: 0 to 1 second.
  public static let busyPollRange: ClosedRange<Duration> = .zero ... .seconds(1)

  /// Sets ``busyPoll``. Any thread; it applies from the next sync.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` when `limit` is outside
  ///   ``busyPollRange`` (nothing changes).
  public func setBusyPoll(_ limit: Duration) throws(OrdoError) {
    guard Self.busyPollRange.contains(limit) else {
      throw OrdoError(.invalidArgument, "a busy poll lasts from 0 to 1 second, not \(limit)")
    }
    busyPollNanoseconds.store(BusyPoll.nanoseconds(limit), ordering: .relaxed)
  }

  /// A file descriptor that is readable whenever the service has work: poll
  /// it, then call ``dispatch(timeoutMs:)`` with 0.
  public var fd: Int32 { link.fd }

  /// Waits up to `timeoutMs` (-1: forever, 0: not at all) for messages and
  /// handles them. Returns false once the connection to the bus daemon (if
  /// any) is lost or the service was stopped or closed.
  @discardableResult
  public func dispatch(timeoutMs: Int32) -> Bool {
    guard !closed else { return false }
    runDeferred()
    releaseHeld()
    let ok = link.step(timeoutMs: deferred.isEmpty ? (heldWaiting ? min(max(timeoutMs, 0), 1) : timeoutMs) : 0)
    if ok { drainForGroupCommit() }
    runDeferred()
    releaseHeld()
    if !ok { log(.error, "the connection to the bus daemon was lost") }
    return ok && !stopFlag.load(ordering: .relaxed)
  }

  /// Answers until ``stop()`` is called.
  ///
  /// - Throws: ``OrdoError/Code/dbus`` when the connection to the bus daemon
  ///   is lost.
  public func run() throws(OrdoError) {
    while !stopFlag.load(ordering: .relaxed) {
      guard !closed, link.step(timeoutMs: deferred.isEmpty ? (heldWaiting ? 1 : -1) : 0) else {
        releaseHeld()
        throw OrdoError(.dbus, "the connection to the bus daemon was lost")
      }
      drainForGroupCommit()
      runDeferred()
      if releaseHeld() { BusyPoll(limit: busyPoll).wait(for: link.fd) }
    }
  }

  /// Makes ``run()`` return. Any thread.
  public func stop() {
    stopFlag.store(true, ordering: .relaxed)
    link.wake()
  }

  /// Removes the remote contracts from the bus, releases the name and closes
  /// the connection. Call it on the service thread (or after it stopped).
  public func close() {
    guard !closed else { return }
    // What is held is made durable and sent (or refused) before the end.
    releaseHeld()
    closed = true
    if traces.count > 0 {
      traces.removeAll()
      dropTraceListener()
    }
    for id in remote.byID.keys.sorted() { try? bus.unregister(id) }
    remote.removeAll()
    closeListeners()
    for d in deferred {
      if case .call(let m) = d, !m.noReply, let e = m.error(DBusErrorName.dbus, "the service stopped before running this call") {
        link.send(e)
      }
    }
    deferred.removeAll()
    link.close()
    log(.info, "stopped serving \(name)")
  }

  func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
    guard level <= logLevel, let logger else { return }
    logger(level, message())
  }

}
