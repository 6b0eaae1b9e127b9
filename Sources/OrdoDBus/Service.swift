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

/// Limits that protect a published bus from hostile or broken peers. A call
/// beyond a limit gets `dev.ordo.Error.Limit` and changes nothing.
public struct ServiceLimits: Sendable, Hashable {
  /// Entries in one call: `Commit`'s set + touch + remove, `Snapshot`'s
  /// patterns, a contract's reads + writes.
  public var maxKeypathsPerCall = 4096
  /// Contracts one peer may have registered at once.
  public var maxContractsPerPeer = 256
  /// Contracts on the bus at once (all peers and the host).
  public var maxContracts = 65_536
  /// Bytes in one string or bytes value.
  public var maxValueBytes = 1 << 20
  /// Estimated size of a reply or `Notify` the service builds: a reply over
  /// it becomes `dev.ordo.Error.Limit`; a `Notify` over it is sent without
  /// values (and without keypaths if those alone are over it) so that the
  /// client resynchronizes with `Snapshot`.
  public var maxMessageBytes = 32 << 20
  /// When the service's own outgoing queue (to the bus daemon) holds more
  /// than this, further `Notify` signals are dropped and counted
  /// (`notify-dropped`); replies are never dropped.
  public var maxOutgoingBytes = 64 << 20
  /// How long the pass waits for a writer contract's `Complete` when its
  /// `Register` gives no `timeout-ms` option.
  public var defaultWriterTimeoutMs: UInt32 = 2000
  /// The largest `timeout-ms` a writer contract may ask for. A peer whose
  /// writers do not answer delays a pass by at most its largest timeout,
  /// once: then its writers are suspended until it calls the service again
  /// (SPEC §12, docs/reliability.md).
  public var maxWriterTimeoutMs: UInt32 = 5000

  /// The defaults.
  public init() {}
}

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
  /// This connection's unique name on the bus daemon.
  public var uniqueName: String { link.uniqueName }
  /// The limits in force.
  public let limits: ServiceLimits

  private let link: Link
  private let logLevel: LogLevel
  private let logger: (@Sendable (LogLevel, String) -> Void)?
  private let stopFlag = Atomic<Bool>(false)
  private var closed = false

  /// Loop-thread state: the remote contracts, indexed by id and by peer.
  private var remote = RemoteContracts()
  /// The access policy (nil: every peer has every right). Any thread.
  private let policyBox: PThreadLocked<Policy?>
  /// Whether a policy is in force (so that peers' identities are fetched).
  private let policyOn = Atomic<Bool>(false)

  // Writer contracts: the awaited call, and the calls queued meanwhile.
  private let slot = WaitSlot()
  /// Nested dispatch loops of writer calls awaited on the service thread.
  private var loopWaits = 0
  /// Method calls (and departures) held back until the waiting pass ends,
  /// in arrival order.
  private var deferred: [Deferred] = []
  private var draining = false
  /// Greater than 0 while the service thread is inside a bus call that may
  /// wait for the bus's transaction (Register, Unregister, Commit, cleanup).
  private let loopInBusCall = Atomic<Int>(0)
  /// A Register whose writer contract is called initially before the
  /// call returns: its reply is sent before the Notify.
  private var initialRegister: (call: DBusMessageRef, replied: Bool)?

  private enum Deferred {
    case call(DBusMessageRef)
    case peerLeft(String)
  }

  // Statistics.
  private let notifySent = Atomic<UInt64>(0)
  private let notifyTruncated = Atomic<UInt64>(0)
  private var methodCalls: UInt64 = 0
  private var errorReplies: UInt64 = 0
  private var commits: UInt64 = 0
  private var peersLeft: UInt64 = 0
  private var queued: UInt64 = 0
  private let writerCalls = Atomic<UInt64>(0)
  private let completes = Atomic<UInt64>(0)
  private let completesRefused = Atomic<UInt64>(0)
  private let timeouts = Atomic<UInt64>(0)
  private let writersSkipped = Atomic<UInt64>(0)
  private let suspensions = Atomic<UInt64>(0)
  private var resumes: UInt64 = 0
  private var accessDenied: UInt64 = 0

  // Durability (SPEC §11): acknowledgements held until their transaction
  // is durable.
  private let durabilityBox = PThreadLocked<Durability?>(nil)
  private let durableOn = Atomic<Bool>(false)
  /// Commit replies and observers' Notify signals waiting for a sync, in
  /// the order they were produced. Any thread appends; the service thread
  /// sends.
  private let held = PThreadLocked<[Held]>([])
  private var syncs: UInt64 = 0
  private var syncFailures: UInt64 = 0
  private var storageErrors: UInt64 = 0
  private let notifyLost = Atomic<UInt64>(0)

  /// An acknowledgement waiting for its transaction to be durable.
  private enum Held {
    /// An observer's Notify of transaction `txn`.
    case notify(UInt64, DBusMessageRef)
    /// The reply to a Commit (`call`) of transaction `txn`.
    case reply(UInt64, call: DBusMessageRef, reply: DBusMessageRef)

    var transaction: UInt64 {
      switch self {
      case .notify(let t, _), .reply(let t, _, _): t
      }
    }
  }
  /// The peers subscribed to pass traces (`SubscribeTrace`); the bus's
  /// trace hook is installed only while there is one.
  private let traces = TraceSubscribers()
  /// The key of the service's trace listener on the bus, while installed.
  private let traceListener = PThreadLocked<UInt64?>(nil)

  /// Connects to `address` (nil: the session bus; `systemBus`: the system
  /// bus), owns `name` and starts answering on the thread that then calls
  /// ``run()`` or ``dispatch(timeoutMs:)``. With a `policy`, each peer has
  /// the rights it grants to its uid and gids (``setPolicy(_:)`` replaces it).
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` when `name` is not a valid
  ///   D-Bus bus name (nothing connected); ``OrdoError/Code/dbus`` when the
  ///   bus cannot be reached or the name is owned by another connection.
  public init(
    bus: Bus, address: String? = nil, systemBus: Bool = false, name: String = ordoDefaultName,
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
    link = try Link(address: address, system: systemBus)
    link.maxOutgoingBytes = limits.maxOutgoingBytes
    link.acceptSignal = { m in
      m.sender == "org.freedesktop.DBus" && m.interface == "org.freedesktop.DBus" && m.member == "NameOwnerChanged"
    }
    do {
      // One match rule tells us about every peer that leaves.
      try link.connection.addMatch(
        "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg2=''"
      )
      try link.connection.requestName(name)
    } catch { throw OrdoError(.dbus, error.message) }
    link.handler = { [unowned self] m in self.handle(m) }
    log(.info, "serving \(ordoInterface) at \(ordoObjectPath) as \(name) (\(link.uniqueName))")
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
    durabilityBox.withLock { $0 = durability }
    durableOn.store(durability != nil, ordering: .relaxed)
  }

  /// A file descriptor that is readable whenever the service has work: poll
  /// it, then call ``dispatch(timeoutMs:)`` with 0.
  public var fd: Int32 { link.fd }

  /// Waits up to `timeoutMs` (-1: forever, 0: not at all) for messages and
  /// handles them. Returns false once the connection to the bus daemon is
  /// lost or the service was stopped or closed.
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
      releaseHeld()
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
    for d in deferred {
      if case .call(let m) = d, !m.noReply, let e = m.error(DBusErrorName.dbus, "the service stopped before running this call") {
        link.send(e)
      }
    }
    deferred.removeAll()
    link.close()
    log(.info, "stopped serving \(name)")
  }

  private func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
    guard level <= logLevel, let logger else { return }
    logger(level, message())
  }

  // MARK: - Dispatch

  /// When a method call waits for the running pass instead of running at
  /// once (it is also queued behind calls already queued).
  enum Queueing {
    /// Runs at once, even while a pass waits for a writer.
    case never
    /// Queues while a pass on another thread holds the bus (the call would
    /// wait for it): `Register`, `Unregister`.
    case whileForeignPass
    /// Queues while any pass waits for a writer: `Commit`.
    case whilePassWaits
    /// As ``whileForeignPass``, and also while a pass waits for a writer
    /// on this thread when the caller holds no writer contract:
    /// `Register` (docs/dbus.md, "While a pass waits").
    case register
  }

  /// One method call being answered: the message, its sender and, with a
  /// policy, the sender's rights.
  struct Call {
    let m: DBusMessageRef
    let sender: String
    let access: Access
  }

  /// One row of the method table (as an sd-bus vtable): the interface and
  /// member, the argument signature checked before the handler runs, the
  /// right the method needs on the keypaths it names (checked by the handler
  /// per keypath; nil: none), whether it queues while a pass waits, and the
  /// handler.
  struct Method: Sendable {
    let interface: String
    let member: String
    let signature: String
    let right: Right?
    let queueing: Queueing
    /// The name used in messages ("Properties.Get").
    let label: String
    let handler: @Sendable (DBusService, Call) throws(OrdoServiceError) -> DBusMessageRef?

    init(
      _ interface: String, _ member: String, _ signature: String, right: Right? = nil, queueing: Queueing = .never,
      label: String? = nil, _ handler: @escaping @Sendable (DBusService, Call) throws(OrdoServiceError) -> DBusMessageRef?
    ) {
      self.interface = interface
      self.member = member
      self.signature = signature
      self.right = right
      self.queueing = queueing
      self.label = label ?? member
      self.handler = handler
    }
  }

  private static let introspectable = "org.freedesktop.DBus.Introspectable"
  private static let properties = "org.freedesktop.DBus.Properties"

  /// Every method of `/dev/ordo/Bus`. A call without an interface finds the
  /// first row with its member, in this order.
  static let methods: [Method] = [
    Method(ordoInterface, "Register", "sasasa{sv}", right: .read, queueing: .register) { s, c throws(OrdoServiceError) in try s.register(c) },
    Method(ordoInterface, "Unregister", "o", queueing: .whileForeignPass) { s, c throws(OrdoServiceError) in try s.unregister(c) },
    Method(ordoInterface, "Commit", "a{sv}asas", right: .write, queueing: .whilePassWaits) { s, c throws(OrdoServiceError) in try s.commit(c) },
    Method(ordoInterface, "Get", "s", right: .read) { s, c throws(OrdoServiceError) in try s.get(c) },
    Method(ordoInterface, "Snapshot", "as", right: .read) { s, c throws(OrdoServiceError) in try s.snapshot(c) },
    Method(ordoInterface, "Changes", "tas", right: .read) { s, c throws(OrdoServiceError) in try s.changes(c) },
    Method(ordoInterface, "Complete", "ota{sv}asas", right: .write) { s, c throws(OrdoServiceError) in try s.complete(c) },
    Method(ordoInterface, "Contracts", "") { s, c throws(OrdoServiceError) in try s.contractsReply(c.m) },
    Method(ordoInterface, "Graph", "") { s, c throws(OrdoServiceError) in try s.graphReply(c.m) },
    Method(ordoInterface, "Stats", "") { s, c in c.m.methodReturn { w in w.dict { s.writeStats(&$0) } } },
    Method(ordoInterface, "SubscribeTrace", "as", right: .read) { s, c throws(OrdoServiceError) in try s.subscribeTrace(c) },
    Method(ordoInterface, "UnsubscribeTrace", "") { s, c in s.unsubscribeTrace(c) },
    Method(introspectable, "Introspect", "") { _, c in c.m.methodReturn { $0.string(introspectionXML) } },
    Method(properties, "Get", "ss", label: "Properties.Get") { s, c throws(OrdoServiceError) in try s.propertyGet(c.m, c.sender) },
    Method(properties, "GetAll", "s", label: "Properties.GetAll") { s, c throws(OrdoServiceError) in try s.propertyGetAll(c.m, c.sender) },
    Method(properties, "Set", "ssv", label: "Properties.Set") { s, c throws(OrdoServiceError) in try s.propertySet(c.m) },
  ]

  private static let methodIndex: [String: Method] = {
    var d: [String: Method] = [:]
    for m in methods {
      d[m.interface + "." + m.member] = m
      if d[m.member] == nil { d[m.member] = m }
    }
    return d
  }()

  /// The row for a call to the bus object, or the error to answer.
  private static func method(_ iface: String?, _ member: String) throws(OrdoServiceError) -> Method {
    if let iface {
      if let m = methodIndex[iface + "." + member] { return m }
      throw .other(name: DBusErrorName.unknownMethod, message: "no method \(member) in interface \(iface) at \(ordoObjectPath)")
    }
    if let m = methodIndex[member] { return m }
    throw .other(name: DBusErrorName.unknownMethod, message: "no method \(member) in interface (none) at \(ordoObjectPath)")
  }

  private func handle(_ m: DBusMessageRef) {
    handle(m, replay: false)
    if loopWaits == 0 { runDeferred() }
  }

  /// Whether a call must wait for the running pass: `Commit`s while a pass
  /// waits for a writer on this thread, and a `Register` of a peer that
  /// holds no writer contract (its contract then joins after that pass,
  /// which its catch-up read covers: docs/dbus.md, "While a pass waits";
  /// a peer with writers may be awaited later in the pass, so its
  /// `Register` never waits for it);
  /// `Register`, `Unregister` and `Commit` while a pass on another thread
  /// waits (they would wait for the bus that pass holds); and any of them
  /// behind calls already queued.
  private func mustQueue(_ q: Queueing, sender: String) -> Bool {
    if q == .never { return false }
    if q == .whilePassWaits && loopWaits > 0 { return true }
    if q == .register && outsideWaitingPass(sender), (remote.peers[sender]?.maxTimeoutMs.load(ordering: .relaxed) ?? 0) == 0 {
      return true
    }
    if loopWaits == 0 && !deferred.isEmpty { return true }
    return slot.active?.foreign == true
  }

  /// Whether `sender` takes no part in a pass that waits for a writer on
  /// this thread: any peer but the awaited writer's. It sees the last
  /// committed state (`Get`, `Snapshot`, `Transaction`), as another thread
  /// of the process would; the awaited writer sees the running
  /// transaction, whose values it may need.
  private func outsideWaitingPass(_ sender: String) -> Bool {
    guard loopWaits > 0, let a = slot.active, !a.foreign else { return false }
    return a.owner != sender
  }

  /// The snapshot `sender` sees (see ``outsideWaitingPass(_:)``).
  private func snapshot(_ patterns: [String], for sender: String) throws(OrdoError) -> Snapshot {
    outsideWaitingPass(sender) ? try bus.committedSnapshot(patterns) : try bus.snapshot(patterns)
  }

  /// The last transaction id `sender` sees (see ``outsideWaitingPass(_:)``).
  private func transactionID(for sender: String) -> UInt64 {
    outsideWaitingPass(sender) ? bus.committedTransactionID : bus.transactionID
  }

  /// Runs the queued calls in arrival order, unless a pass still waits.
  private func runDeferred() {
    guard loopWaits == 0, !draining, !closed else { return }
    draining = true
    defer { draining = false }
    while !deferred.isEmpty {
      if slot.active?.foreign == true { return }
      // Sends stay queued while a call runs, as in a step: a Register
      // places its reply before the Notify its registration caused.
      switch deferred.removeFirst() {
      case .call(let m): link.queueing { handle(m, replay: true) }
      case .peerLeft(let name): removePeer(name)
      }
    }
  }

  private func handle(_ m: DBusMessageRef, replay: Bool) {
    if m.type == ORDO_DBUS_MESSAGE_TYPE_SIGNAL {
      handleSignal(m)
      return
    }
    let member = m.member ?? ""
    let path = m.path ?? ""
    let sender = m.sender ?? ""
    if !replay {
      methodCalls += 1
      log(.debug, "\(sender) calls \(m.interface ?? "-").\(member)(\(m.signature)) on \(path)")
      // Any call shows that the peer is alive: its writers are awaited again.
      if let p = remote.peers[sender], p.suspended.load(ordering: .relaxed) {
        p.suspended.store(false, ordering: .relaxed)
        resumes += 1
        log(.info, "\(sender) called \(member): its writer contracts are awaited again")
      }
      if path == ordoObjectPath, let row = try? Self.method(m.interface, member), mustQueue(row.queueing, sender: sender) {
        queued += 1
        deferred.append(.call(m))
        log(.debug, "\(sender) \(member) queued until the running pass ends (\(deferred.count) queued)")
        return
      }
    }
    do throws(OrdoServiceError) {
      let mark = link.mark
      let reply = try route(m, path: path, member: member, sender: sender)
      if m.noReply { return }
      if let reply {
        // A reply goes before the Notify signals the call produced only for
        // Register (the initial call): the peer learns its path first.
        if member == "Register" { link.send(reply, at: mark) } else { link.send(reply) }
      }
    } catch {
      errorReplies += 1
      if error.name == DBusErrorName.accessDenied { accessDenied += 1 }
      log(.warning, "\(sender) \(member): \(error.name): \(error.message)")
      if m.noReply { return }
      if let e = m.error(error.name, error.message) { link.send(e) }
    }
  }

  private func route(_ m: DBusMessageRef, path: String, member: String, sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    let iface = m.interface
    switch path {
    case ordoObjectPath:
      break
    case "/", "/dev", "/dev/ordo":
      guard (iface == nil || iface == Self.introspectable) && member == "Introspect" else {
        throw .other(name: DBusErrorName.unknownMethod, message: "\(path) only answers Introspect")
      }
      try expect(m, "", "Introspect")
      let child = path == "/" ? "dev" : (path == "/dev" ? "ordo" : "Bus")
      return m.methodReturn {
        $0.string(
          "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n  <node name=\"\(child)\"/>\n</node>\n"
        )
      }
    default:
      throw .other(name: DBusErrorName.unknownObject, message: "no object at \(path); the bus is at \(ordoObjectPath)")
    }
    let row = try Self.method(iface, member)
    try expect(m, row.signature, row.label)
    let access = row.right == nil ? Access.unchecked : try self.access(sender)
    return try row.handler(self, Call(m: m, sender: sender, access: access))
  }

  private func expect(_ m: DBusMessageRef, _ signature: String, _ method: String) throws(OrdoServiceError) {
    let got = m.signature
    guard got == signature else {
      throw .invalidArgs("\(method) expects arguments (\(signature)), got (\(got))")
    }
  }

  private func graphReply(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    let dot = bus.graph()
    guard dot.utf8.count <= limits.maxMessageBytes else {
      throw .ordo(OrdoError(.limit, "the graph is \(dot.utf8.count) bytes, more than max-message-bytes (\(limits.maxMessageBytes))"))
    }
    return m.methodReturn { $0.string(dot) }
  }

  // MARK: - Access

  /// The rights of one caller: everything without a policy.
  struct Access {
    let policy: Policy?
    let peer: PeerIdentity?
    let sender: String

    static let unchecked = Access(policy: nil, peer: nil, sender: "")

    /// Throws `AccessDenied` naming the keypath or pattern and the right,
    /// unless the caller holds `right` on all of `pattern`.
    func require(_ right: Right, _ pattern: String, for what: String) throws(OrdoServiceError) {
      guard let policy else { return }
      guard let peer else { throw .accessDenied("\(what): \(sender)'s identity is unknown, so it has no \(right.rawValue) right on \"\(pattern)\"") }
      let d = policy.check(peer, right, pattern)
      guard !d.allowed else { return }
      throw .accessDenied("\(what): \(sender) (\(peer)) lacks the right \(right.rawValue) on \"\(pattern)\": \(d.reason) in \(policy.source)")
    }

    /// The writes of a Commit or Complete: `write` on each keypath (on
    /// `k.**` for a tree removal).
    func requireWrites(_ batch: [Write], for what: String) throws(OrdoServiceError) {
      guard policy != nil else { return }
      for w in batch {
        switch w {
        case .set(let k, _), .touch(let k), .remove(let k): try require(.write, k, for: what)
        case .removeTree(let k): try require(.write, k + ".**", for: what)
        }
      }
    }

    /// What the caller may read (nil: everything): the one filter of
    /// `Snapshot`, `Changes` and `Notify`.
    var readFilter: ReadFilter? {
      guard let policy else { return nil }
      return peer.map { policy.readable(by: $0) } ?? ReadFilter(allow: [], deny: [])
    }
  }

  /// The rights of `sender` under the policy in force.
  private func access(_ sender: String) throws(OrdoServiceError) -> Access {
    guard let policy = policyBox.withLock({ $0 }) else { return .unchecked }
    return Access(policy: policy, peer: try identity(of: sender), sender: sender)
  }

  /// The uid and gids the bus daemon reports for `sender`, asked once per
  /// peer (`GetConnectionCredentials`) and forgotten when it leaves.
  private func identity(of sender: String) throws(OrdoServiceError) -> PeerIdentity {
    if let known = remote.peers[sender]?.identity { return known }
    guard
      let call = DBusMessageRef.methodCall(
        destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
        member: "GetConnectionCredentials")
    else { throw .other(name: DBusErrorName.dbus, message: "cannot build GetConnectionCredentials") }
    var w = call.writer()
    w.string(sender)
    let reply: DBusMessageRef
    do { reply = try link.connection.call(call, timeoutMs: 5000) } catch {
      throw .accessDenied("cannot learn who \(sender) is from the bus daemon (GetConnectionCredentials failed: \(error.name): \(error.message)), so it has no rights")
    }
    var uid: UInt32?
    var gids: [UInt32]?
    var r = reply.reader()
    var d = r.recurse()
    while !d.atEnd {
      var e = d.recurse()
      d.next()
      guard let key = try? e.string("key") else { continue }
      var v = e.recurse()
      switch (key, v.currentSignature()) {
      case ("UnixUserID", "u"): uid = v.uint32()
      case ("UnixGroupIDs", "au"):
        var a = v.recurse()
        var list: [UInt32] = []
        while !a.atEnd { list.append(a.uint32()) }
        gids = list
      default: break
      }
    }
    guard let uid else { throw .accessDenied("the bus daemon reports no Unix user for \(sender), so it has no rights") }
    let identity = PeerIdentity(uid: uid, gids: gids ?? Self.groups(of: uid))
    remote.peer(sender).identity = identity
    log(.debug, "\(sender) is \(identity)")
    return identity
  }

  /// The groups of `uid` from the system's databases (when the bus daemon
  /// does not report UnixGroupIDs).
  private static func groups(of uid: UInt32) -> [UInt32] {
    guard let pw = getpwuid(uid) else { return [] }
    let gid = pw.pointee.pw_gid
    var n: Int32 = 64
    var list = [gid_t](repeating: 0, count: Int(n))
    if getgrouplist(pw.pointee.pw_name, gid, &list, &n) < 0 {
      list = [gid_t](repeating: 0, count: Int(n))
      _ = getgrouplist(pw.pointee.pw_name, gid, &list, &n)
    }
    return Array(list.prefix(Int(max(0, n))))
  }

  // MARK: - Methods

  private func register(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    let m = c.m
    let sender = c.sender
    var r = m.reader()
    let name: String
    do { name = try r.string("name") } catch { throw .invalidArgs(error.message) }
    let reads = try r.stringArray("reads", limit: limits.maxKeypathsPerCall)
    let writes = try r.stringArray("writes", limit: limits.maxKeypathsPerCall)
    var priority: Int32?
    var flags: ContractFlags = []
    var timeoutMs = limits.defaultWriterTimeoutMs
    var opts = r.recurse()
    var seen = 0
    while !opts.atEnd {
      seen += 1
      guard seen <= 16 else { throw .ordo(OrdoError(.limit, "Register: more than 16 options (there are three: priority, notify-initial, timeout-ms)")) }
      var e = opts.recurse()
      opts.next()
      let key: String
      do { key = try e.string("option name") } catch { throw .invalidArgs(error.message) }
      var v = e.recurse()
      let sig = v.currentSignature()
      func need(_ s: String) throws(OrdoServiceError) {
        guard sig == s else { throw .invalidArgs("Register: option \"\(key)\" must be of type '\(s)', got '\(sig)'") }
      }
      switch key {
      case "priority":
        try need("i")
        priority = v.int32()
      case "notify-initial":
        try need("b")
        if v.bool() { flags.insert(.notifyInitial) }
      case "timeout-ms":
        try need("u")
        timeoutMs = v.uint32()
        guard timeoutMs > 0 else { throw .invalidArgs("Register: option \"timeout-ms\" must be at least 1") }
        guard timeoutMs <= limits.maxWriterTimeoutMs else {
          throw .ordo(OrdoError(.limit, "Register: timeout-ms \(timeoutMs) is more than \(limits.maxWriterTimeoutMs) (limit max-writer-timeout-ms)"))
        }
      default:
        throw .invalidArgs("Register: unknown option \"\(key)\"; the options are priority (i), notify-initial (b), timeout-ms (u)")
      }
    }
    if reads.count + writes.count > limits.maxKeypathsPerCall {
      throw .ordo(OrdoError(.limit, "contract \"\(name)\" declares \(reads.count + writes.count) patterns, more than \(limits.maxKeypathsPerCall) (limit max-keypaths-per-call)"))
    }
    let mine = remote.peers[sender]?.contracts.count ?? 0
    guard mine < limits.maxContractsPerPeer else {
      throw .ordo(OrdoError(.limit, "peer \(sender) already has \(mine) contracts (limit max-contracts-per-peer \(limits.maxContractsPerPeer))"))
    }
    let total = bus.statistics.contracts
    guard total < limits.maxContracts else {
      throw .ordo(OrdoError(.limit, "the bus already has \(total) contracts (limit max-contracts \(limits.maxContracts))"))
    }
    // A contract may not read what its peer may not read; a writer needs
    // the writer and write rights on its whole write set.
    if c.access.policy != nil {
      func valid(_ p: String) throws(OrdoServiceError) {
        do { _ = try Pattern(p) } catch { throw .ordo(error) }
      }
      for p in reads {
        try valid(p)
        try c.access.require(.read, p, for: "Register of \"\(name)\" reading \"\(p)\"")
      }
      for p in writes {
        try valid(p)
        try c.access.require(.writer, p, for: "Register of writer \"\(name)\" writing \"\(p)\"")
        try c.access.require(.write, p, for: "Register of writer \"\(name)\" writing \"\(p)\"")
      }
    }
    let writer = !writes.isEmpty
    let peer = remote.peer(sender)
    // The record exists before the contract: an initial call during
    // registration finds it. Its id is known once registered.
    let timeout = timeoutMs
    let box = RecordBox { id in RemoteContract(id: id, name: name, peer: peer, timeoutMs: writer ? timeout : nil, everyTransaction: reads.isEmpty) }
    let spec = ContractSpec(name: name, reads: reads, writes: writes, priority: priority, flags: flags) { [weak self] note in
      guard let self, let record = box.record(note.contract) else { return }
      if record.isWriter {
        try self.writerCall(record, note)
      } else {
        self.notify(record, note)
      }
    }
    let handle: ContractHandle
    // A writer called initially during registration answers its Notify
    // only once it knows its path: writerCall sends this reply first.
    initialRegister = writer && flags.contains(.notifyInitial) ? (m, false) : nil
    defer { initialRegister = nil }
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    do { handle = try bus.register(spec) } catch { throw .ordo(error) }
    guard let record = box.record(handle.id) else { throw .other(name: DBusErrorName.failed, message: "Register: no record for contract \(handle.id)") }
    remote.add(record)
    let path = ordoContractPathPrefix + String(handle.id)
    log(.info, "\(sender) registered contract \(handle.id) \"\(name)\" reads [\(reads.joined(separator: ", "))]\(writer ? " writes [\(writes.joined(separator: ", "))] timeout \(timeoutMs) ms" : "")\(priority.map { " priority \($0)" } ?? "")")
    if initialRegister?.replied == true { return nil }
    return m.methodReturn { $0.objectPath(path) }
  }

  private func contractID(_ path: String) -> ContractID? {
    guard path.hasPrefix(ordoContractPathPrefix) else { return nil }
    let digits = path.dropFirst(ordoContractPathPrefix.count)
    // Only the paths the service hands out: no leading zero (…/0009 is not …/9).
    guard !digits.isEmpty, digits.count <= 20, digits.first != "0", digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
    return ContractID(digits)
  }

  /// The remote contract at `path` that `sender` registered, or the error.
  private func ownContract(_ path: String, _ sender: String, doing what: String) throws(OrdoServiceError) -> RemoteContract {
    guard let id = contractID(path) else {
      throw .ordo(OrdoError(.notFound, "no contract at \(path); contract paths are \(ordoContractPathPrefix)<id>"))
    }
    guard let record = remote.byID[id] else {
      if bus.contract(id) != nil {
        throw .accessDenied("contract \(path) belongs to the process that publishes the bus; only its owner may \(what)")
      }
      throw .ordo(OrdoError(.notFound, "no contract at \(path)"))
    }
    guard record.owner == sender else {
      throw .accessDenied("contract \(path) was registered by \(record.owner), not by \(sender); only that peer may \(what)")
    }
    return record
  }

  private func unregister(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let path: String
    do { path = try r.string("contract") } catch { throw .invalidArgs(error.message) }
    let record = try ownContract(path, c.sender, doing: "unregister it")
    remote.remove(record.id)
    if let a = slot.active, a.contract == record.id { slot.post(a, .unregistered) }
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    do { try bus.unregister(record.id) } catch { throw .ordo(error) }
    log(.info, "\(c.sender) unregistered contract \(record.id)")
    return c.m.methodReturn { _ in }
  }

  /// Reads `a{sv} set, as touch, as remove` (Commit and, later, Complete).
  private func readWrites(_ r: inout MessageReader, _ method: String) throws(OrdoServiceError) -> [Write] {
    try DBusService.readWrites(&r, method, limits: limits)
  }

  /// Decodes the `a{sv} set, as touch, as remove` of a `Commit` or
  /// `Complete` body within the limits into one batch of writes (a `remove`
  /// entry ending in `.**` removes the tree). Also the entry point of the
  /// D-Bus fuzz target, Fuzz/DBusFuzz.swift.
  static func readWrites(_ r: inout MessageReader, _ method: String, limits: ServiceLimits) throws(OrdoServiceError) -> [Write] {
    var sets: [(String, Value)] = []
    var d = r.recurse()
    r.next()
    while !d.atEnd {
      if sets.count >= limits.maxKeypathsPerCall {
        throw .ordo(OrdoError(.limit, "\(method): more than \(limits.maxKeypathsPerCall) entries in set (limit max-keypaths-per-call)"))
      }
      var e = d.recurse()
      d.next()
      let k: String
      do { k = try e.string("\(method) set key") } catch { throw .invalidArgs(error.message) }
      sets.append((k, try e.value("\(method): value of \"\(k)\"", maxBytes: limits.maxValueBytes)))
    }
    // Each list is read within the limit, then the three together are
    // held to it (the message names the sum, not what was left of it).
    let touch = try r.stringArray("\(method) touch", limit: limits.maxKeypathsPerCall)
    let remove = try r.stringArray("\(method) remove", limit: limits.maxKeypathsPerCall)
    guard sets.count + touch.count + remove.count <= limits.maxKeypathsPerCall else {
      throw .ordo(OrdoError(.limit, "\(method): more than \(limits.maxKeypathsPerCall) entries in set, touch and remove together (limit max-keypaths-per-call)"))
    }
    var batch: [Write] = sets.map { .set($0.0, $0.1) }
    batch.reserveCapacity(sets.count + touch.count + remove.count)
    for k in touch { batch.append(.touch(k)) }
    for k in remove { batch.append(k.hasSuffix(".**") ? .removeTree(String(k.dropLast(3))) : .remove(k)) }
    return batch
  }

  private func commit(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let batch = try readWrites(&r, "Commit")
    try c.access.requireWrites(batch, for: "Commit")
    commits += 1
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    bus.begin()
    let txn: UInt64
    do throws(OrdoError) {
      try bus.write(batch)
      txn = try bus.commit()
    } catch {
      try? bus.rollback()
      if durableOn.load(ordering: .relaxed) {
        // The pass ran (observers' Notify signals are held) but the
        // transaction was not applied, e.g. the state file refused it:
        // its Notify signals must never go out.
        let last = bus.transactionID
        held.withLock { h in
          let before = h.count
          h.removeAll { if case .notify(let t, _) = $0 { t > last } else { false } }
          notifyLost.add(UInt64(before - h.count), ordering: .relaxed)
        }
      }
      throw .ordo(error)
    }
    guard let reply = c.m.methodReturn({ $0.uint64(txn) }) else { return nil }
    if durableOn.load(ordering: .relaxed) {
      // Sent once the transaction is durable (releaseHeld).
      if !c.m.noReply { held.withLock { $0.append(.reply(txn, call: c.m, reply: reply)) } }
      return nil
    }
    return reply
  }

  private func get(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let k: String
    do { k = try r.string("keypath") } catch { throw .invalidArgs(error.message) }
    let snap: Snapshot
    do throws(OrdoError) {
      _ = try bus.counter(k)  // validates: a keypath, not a pattern
    } catch { throw .ordo(error) }
    try c.access.require(.read, k, for: "Get")
    do throws(OrdoError) {
      snap = try snapshot([k], for: c.sender)
    } catch { throw .ordo(error) }
    let counter = snap.counters[k] ?? 0
    guard let v = snap.values[k] else {
      throw .ordo(OrdoError(.notFound, "\"\(k)\" holds no value (its counter is \(counter))"))
    }
    return c.m.methodReturn { w in
      w.value(v)
      w.uint64(counter)
    }
  }

  private static func estimate(_ v: Value) -> Int {
    switch v {
    case .string(let s): 16 + s.utf8.count
    case .bytes(let b): 16 + b.count
    default: 24
    }
  }

  private func snapshot(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let patterns = try r.stringArray("patterns", limit: limits.maxKeypathsPerCall)
    var snap: Snapshot
    do { snap = try snapshot(patterns, for: c.sender) } catch { throw .ordo(error) }
    // Only what the caller may read.
    if let f = c.access.readFilter {
      snap.values = snap.values.filter { f.allows($0.key) }
      snap.counters = snap.counters.filter { f.allows($0.key) }
    }
    var size = 64
    for (k, v) in snap.values { size += k.utf8.count + Self.estimate(v) }
    for (k, _) in snap.counters { size += k.utf8.count + 16 }
    guard size <= limits.maxMessageBytes else {
      throw .ordo(OrdoError(.limit, "the snapshot of [\(patterns.joined(separator: ", "))] holds \(snap.values.count) values (about \(size) bytes), more than max-message-bytes (\(limits.maxMessageBytes)); ask for narrower patterns"))
    }
    return c.m.methodReturn { w in
      w.valueDict(snap.values.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
      w.container(ORDO_DBUS_TYPE_ARRAY, "{st}") { a in
        for (k, n) in snap.counters.sorted(by: { $0.key < $1.key }) {
          a.container(ORDO_DBUS_TYPE_DICT_ENTRY, nil) { e in
            e.string(k)
            e.uint64(n)
          }
        }
      }
      w.uint64(snap.transaction)
    }
  }

  /// `Changes(t since, as patterns) → (a{sv} values, as removed, a{st}
  /// counters, t txn)` (SPEC §10): filtered and limited like `Snapshot`.
  private func changes(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let since = r.uint64()
    let patterns = try r.stringArray("patterns", limit: limits.maxKeypathsPerCall)
    var ch: Changes
    do { ch = try bus.changes(since: since, patterns) } catch { throw .ordo(error) }
    // Only what the caller may read.
    if let f = c.access.readFilter {
      ch.values = ch.values.filter { f.allows($0.key) }
      ch.removed = ch.removed.filter { f.allows($0) }
      ch.counters = ch.counters.filter { f.allows($0.key) }
    }
    var size = 64
    for (k, v) in ch.values { size += k.utf8.count + Self.estimate(v) }
    for k in ch.removed { size += k.utf8.count + 8 }
    for (k, _) in ch.counters { size += k.utf8.count + 16 }
    guard size <= limits.maxMessageBytes else {
      throw .ordo(OrdoError(.limit, "the changes since transaction \(since) of [\(patterns.joined(separator: ", "))] hold \(ch.counters.count) keypaths (about \(size) bytes), more than max-message-bytes (\(limits.maxMessageBytes)); ask for narrower patterns, or read a Snapshot"))
    }
    return c.m.methodReturn { w in
      w.valueDict(ch.values.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
      w.stringArray(ch.removed.sorted())
      w.container(ORDO_DBUS_TYPE_ARRAY, "{st}") { a in
        for (k, n) in ch.counters.sorted(by: { $0.key < $1.key }) {
          a.container(ORDO_DBUS_TYPE_DICT_ENTRY, nil) { e in
            e.string(k)
            e.uint64(n)
          }
        }
      }
      w.uint64(ch.transaction)
    }
  }

  private func complete(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let path: String
    do { path = try r.string("contract") } catch { throw .invalidArgs(error.message) }
    let record = try ownContract(path, c.sender, doing: "complete its calls")
    let id = record.id
    guard record.isWriter else {
      throw .ordo(OrdoError(.invalidArgument, "contract \(path) is an observer (empty write set): it has no call to complete"))
    }
    let txn = r.uint64()
    guard let a = slot.active, a.contract == id, a.transaction == txn else {
      let what = slot.active.map { $0.contract == id ? "its call for transaction \($0.transaction) is awaited" : "no call of it is awaited now" } ?? "no call of it is awaited now"
      throw .other(name: DBusErrorName.stale, message: "Complete of \(path) for transaction \(txn): \(what) (a call that timed out, or an old or wrong transaction id)")
    }
    let batch: [Write]
    do throws(OrdoServiceError) {
      batch = try readWrites(&r, "Complete")
      try c.access.requireWrites(batch, for: "Complete of \(path)")
    } catch {
      // The awaited call is answered, badly: the pass goes on without it.
      if slot.post(a, .refused("\(error.name): \(error.message)")) { completesRefused.add(1, ordering: .relaxed) }
      throw error
    }
    guard slot.post(a, .writes(batch, c.m)) else {
      throw .other(name: DBusErrorName.stale, message: "Complete of \(path) for transaction \(txn) came after its wait ended")
    }
    // The reply is sent once the writes are applied (or refused).
    return nil
  }

  private func contractsReply(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    let list = bus.contracts()
    var size = 64
    for c in list { size += 220 + c.name.utf8.count + c.reads.reduce(0) { $0 + $1.utf8.count + 8 } + c.writes.reduce(0) { $0 + $1.utf8.count + 8 } }
    guard size <= limits.maxMessageBytes else {
      throw .ordo(OrdoError(.limit, "the list of \(list.count) contracts (about \(size) bytes) is more than max-message-bytes (\(limits.maxMessageBytes))"))
    }
    return m.methodReturn { w in
      w.container(ORDO_DBUS_TYPE_ARRAY, "a{sv}") { a in
        for c in list {
          let record = self.remote.byID[c.id]
          a.dict { d in
            d.entry("path", objectPath: ordoContractPathPrefix + String(c.id))
            d.entry("name", string: c.name)
            d.entry("owner", string: record?.owner ?? "")
            d.entry("reads", strings: c.reads)
            d.entry("writes", strings: c.writes)
            if let p = c.priority { d.entry("priority", int32: p) }
            d.entry("level", uint32: UInt32(clamping: c.level))
            d.entry("calls", uint64: c.calls)
            d.entry("kind", string: c.kind.rawValue)
            d.entry("position", uint32: UInt32(clamping: c.position))
            d.entry("failures", uint64: c.failures)
            d.entry("last-txn", uint64: c.lastTransaction)
            d.entry("unused-reads", strings: c.unusedReads)
            d.entry("unused-writes", strings: c.unusedWrites)
            if let record, let t = record.timeoutMs {
              d.entry("timeout-ms", uint32: t)
              d.entry("suspended", bool: record.isSuspended)
            }
          }
        }
      }
    }
  }

  private func writeStats(_ d: inout MessageWriter) {
    let s = bus.statistics
    d.entry("contracts", uint64: UInt64(s.contracts))
    d.entry("remote-contracts", uint64: UInt64(remote.byID.count))
    d.entry("peers", uint64: UInt64(remote.peersWithContracts))
    d.entry("transactions", uint64: s.transactions)
    d.entry("notifications", uint64: s.notifications)
    d.entry("notify-sent", uint64: notifySent.load(ordering: .relaxed))
    d.entry("notify-dropped", uint64: link.dropped)
    d.entry("notify-truncated", uint64: notifyTruncated.load(ordering: .relaxed))
    d.entry("failures", uint64: s.failures)
    d.entry("timeouts", uint64: timeouts.load(ordering: .relaxed))
    d.entry("writer-calls", uint64: writerCalls.load(ordering: .relaxed))
    d.entry("writers-skipped", uint64: writersSkipped.load(ordering: .relaxed))
    d.entry("suspensions", uint64: suspensions.load(ordering: .relaxed))
    d.entry("resumes", uint64: resumes)
    d.entry("completes", uint64: completes.load(ordering: .relaxed))
    d.entry("completes-refused", uint64: completesRefused.load(ordering: .relaxed))
    d.entry("access-denied", uint64: accessDenied)
    d.entry("queued", uint64: queued)
    d.entry("queued-now", uint64: UInt64(deferred.count))
    d.entry("rollbacks", uint64: s.rollbacks)
    d.entry("values", uint64: UInt64(s.values))
    d.entry("method-calls", uint64: methodCalls)
    d.entry("error-replies", uint64: errorReplies)
    d.entry("commits", uint64: commits)
    d.entry("peers-left", uint64: peersLeft)
    d.entry("syncs", uint64: syncs)
    d.entry("sync-failures", uint64: syncFailures)
    d.entry("storage-errors", uint64: storageErrors)
    d.entry("notify-lost", uint64: notifyLost.load(ordering: .relaxed))
    d.entry("trace-subscribers", uint64: UInt64(traces.count))
    d.entry("trace-sent", uint64: traces.sent.load(ordering: .relaxed))
    d.entry("trace-truncated", uint64: traces.truncated.load(ordering: .relaxed))
  }

  private func propertyInterface(_ r: inout MessageReader) throws(OrdoServiceError) {
    let i: String
    do { i = try r.string("interface_name") } catch { throw .invalidArgs(error.message) }
    guard i == ordoInterface || i.isEmpty else {
      throw .other(name: DBusErrorName.unknownInterface, message: "\(ordoObjectPath) has no properties in interface \(i)")
    }
  }

  private func propertyGet(_ m: DBusMessageRef, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = m.reader()
    try propertyInterface(&r)
    let p: String
    do { p = try r.string("property_name") } catch { throw .invalidArgs(error.message) }
    switch p {
    case "Transaction":
      let t = transactionID(for: sender)
      return m.methodReturn { $0.container(ORDO_DBUS_TYPE_VARIANT, "t") { $0.uint64(t) } }
    case "Version":
      return m.methodReturn { $0.container(ORDO_DBUS_TYPE_VARIANT, "s") { $0.string(ordoDBusVersion) } }
    case "Epoch":
      let e = bus.epoch
      return m.methodReturn { $0.container(ORDO_DBUS_TYPE_VARIANT, "s") { $0.string(e) } }
    default:
      throw Self.unknownProperty(p)
    }
  }

  /// The properties of `dev.ordo.Bus1` (all read-only).
  private static let propertyNames = ["Transaction", "Version", "Epoch"]

  private static func unknownProperty(_ p: String) -> OrdoServiceError {
    .other(name: DBusErrorName.unknownProperty, message: "\(ordoInterface) has no property \(p); it has \(propertyNames.joined(separator: ", "))")
  }

  /// Every property is read-only; an unknown interface or property gets
  /// the error `Get` gives for it.
  private func propertySet(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = m.reader()
    try propertyInterface(&r)
    let p: String
    do { p = try r.string("property_name") } catch { throw .invalidArgs(error.message) }
    guard Self.propertyNames.contains(p) else { throw Self.unknownProperty(p) }
    throw .other(name: DBusErrorName.propertyReadOnly, message: "the properties of \(ordoInterface) are read-only (\(p))")
  }

  private func propertyGetAll(_ m: DBusMessageRef, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = m.reader()
    try propertyInterface(&r)
    let t = transactionID(for: sender)
    let e = bus.epoch
    return m.methodReturn { w in
      w.dict { d in
        d.entry("Transaction", uint64: t)
        d.entry("Version", string: ordoDBusVersion)
        d.entry("Epoch", string: e)
      }
    }
  }

  // MARK: - Pass traces (docs/devtools.md)

  /// `SubscribeTrace(as patterns)`: from now on the caller is sent a
  /// `Trace` signal for every pass with a keypath matching one of
  /// `patterns` (a new call replaces them), filtered to what it may read.
  private func subscribeTrace(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let texts = try r.stringArray("patterns", limit: limits.maxKeypathsPerCall)
    guard !texts.isEmpty else {
      throw .ordo(OrdoError(.invalidArgument, "SubscribeTrace: no pattern; pass \"**\" for every pass"))
    }
    guard texts.count <= TraceSubscribers.maxPatterns else {
      throw .ordo(OrdoError(.limit, "SubscribeTrace: \(texts.count) patterns, more than \(TraceSubscribers.maxPatterns)"))
    }
    var patterns: [Pattern] = []
    for p in texts {
      do { patterns.append(try Pattern(p)) } catch { throw .ordo(error) }
    }
    // Its identity, for the read filter, even when no policy is in force
    // yet (one may be loaded later).
    let identity = c.access.peer ?? (try? self.identity(of: c.sender))
    guard let before = traces.set(c.sender, .init(patterns: patterns, identity: identity)) else {
      throw .ordo(OrdoError(.limit, "SubscribeTrace: \(TraceSubscribers.maxSubscribers) peers already receive traces"))
    }
    if before == 0 {
      traceListener.withLock { key in
        if key == nil { key = bus.addTraceListener { [weak self] t in self?.sendTrace(t) } }
      }
      log(.info, "\(c.sender) subscribed to pass traces of [\(texts.joined(separator: ", "))]: tracing on")
    } else {
      log(.info, "\(c.sender) subscribed to pass traces of [\(texts.joined(separator: ", "))]")
    }
    return c.m.methodReturn { _ in }
  }

  /// `UnsubscribeTrace()`: no more `Trace` signals (nothing if none were asked for).
  private func unsubscribeTrace(_ c: Call) -> DBusMessageRef? {
    dropTraceSubscriber(c.sender)
    return c.m.methodReturn { _ in }
  }

  /// Forgets `peer`'s trace subscription; the last one removes the bus's
  /// trace hook (a pass then records nothing).
  private func dropTraceSubscriber(_ peer: String) {
    let (removed, left) = traces.remove(peer)
    guard removed else { return }
    if left == 0 { dropTraceListener() }
    log(.info, "\(peer) no longer receives pass traces\(left == 0 ? ": tracing off" : "")")
  }

  /// Removes the service's trace listener from the bus (the host's own
  /// `onTrace` handler, if any, stays).
  private func dropTraceListener() {
    traceListener.withLock { key in
      if let k = key { bus.removeTraceListener(k) }
      key = nil
    }
  }

  /// The bus's trace hook: sends each subscriber its view of the pass.
  /// Runs on the committing thread, after the pass.
  private func sendTrace(_ trace: PassTrace) {
    let subscribers = traces.all
    if subscribers.isEmpty { return }
    let policy = policyOn.load(ordering: .relaxed) ? policyBox.withLock({ $0 }) : nil
    for (peer, s) in subscribers {
      let filter = policy.map { p in s.identity.map { p.readable(by: $0) } ?? ReadFilter(allow: [], deny: []) }
      guard let view = TraceSubscribers.view(trace, patterns: s.patterns, filter: filter),
        let m = traces.signal(view, to: peer, maxBytes: limits.maxMessageBytes)
      else { continue }
      traces.sent.add(1, ordering: .relaxed)
      link.send(m, droppable: true)
    }
  }

  // MARK: - Peers and signals

  private func handleSignal(_ m: DBusMessageRef) {
    guard m.member == "NameOwnerChanged", m.signature == "sss" else { return }
    var r = m.reader()
    guard let name = try? r.string("name"), let _ = try? r.string("old"), let new = try? r.string("new") else { return }
    guard name.hasPrefix(":"), new.isEmpty else { return }
    dropTraceSubscriber(name)
    // A peer that left with calls still queued (a Register waiting for the
    // pass) leaves after them, so that nothing it registered outlives it.
    let callsQueued = deferred.contains { if case .call(let c) = $0 { c.sender == name } else { false } }
    if !callsQueued {
      guard let peer = remote.peers[name] else { return }
      guard !peer.contracts.isEmpty else {
        // Only its identity was known: forget it.
        _ = remote.removePeer(name)
        return
      }
    }
    // A writer awaited from a peer that left is timed out at once.
    if let a = slot.active, a.owner == name { slot.post(a, .ownerLeft) }
    if callsQueued || slot.active?.foreign == true || (loopWaits == 0 && !deferred.isEmpty) {
      deferred.append(.peerLeft(name))
    } else {
      removePeer(name)
    }
  }

  private func removePeer(_ name: String) {
    guard remote.peers[name] != nil else { return }
    let ids = remote.removePeer(name)
    if ids.isEmpty { return }
    peersLeft += 1
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    for id in ids { try? bus.unregister(id) }
    log(.info, "\(name) left the bus: removed its \(ids.count) contract\(ids.count == 1 ? "" : "s")")
  }

  /// A remote writer contract's call: sends its `Notify`, waits for its
  /// `Complete` (serving other peers meanwhile), then applies the writes,
  /// all or nothing, in this callback and answers the `Complete`.
  ///
  /// Liveness (SPEC §12): a suspended writer is skipped (no `Notify`, no
  /// wait). The wait ends at the writer's timeout or at its peer's budget
  /// for this pass — the peer's largest timeout, counted from the first wait
  /// for one of its writers in this pass — whichever comes first. A wait
  /// that ends without an answer suspends the peer's writers until the peer
  /// calls the service again.
  ///
  /// On the service thread the wait is a nested dispatch loop with the
  /// callback's checks suspended: `Get`/`Snapshot`/`Register`/`Unregister`
  /// … are answered, `Commit`s queue. On another thread (a host committing
  /// on its own thread) the callback waits on a condition variable; the
  /// service thread parks the `Complete` and queues `Register`,
  /// `Unregister` and `Commit` (they would wait for the bus this pass holds).
  private func writerCall(_ record: RemoteContract, _ note: ContractNotification) throws {
    let owner = record.owner
    let name = record.name
    let timeoutMs = record.timeoutMs ?? limits.defaultWriterTimeoutMs
    let peer = record.peer
    let who = "writer contract \(note.contract) \"\(name)\" of \(owner)"
    if peer.suspended.load(ordering: .relaxed) {
      writersSkipped.add(1, ordering: .relaxed)
      log(.debug, "\(who) is suspended: not called in transaction \(note.transaction)")
      throw RemoteWriterFailure(description: "\(who) is suspended (its peer did not answer in time): not called (transaction \(note.transaction))")
    }
    let onLoop = link.isLoopThread
    if onLoop, let r = initialRegister, !r.replied, let ret = r.call.methodReturn({ $0.objectPath(ordoContractPathPrefix + String(note.contract)) }) {
      link.send(ret)
      initialRegister?.replied = true
    }
    let now = Connection.nowMs()
    var deadline = now + Int64(timeoutMs)
    // An initial call (empty list) is outside any pass's budget.
    if !note.changed.isEmpty {
      if peer.budgetTransaction != note.transaction {
        peer.budgetTransaction = note.transaction
        peer.budgetDeadline = now + Int64(max(timeoutMs, peer.maxTimeoutMs.load(ordering: .relaxed)))
      }
      deadline = min(deadline, peer.budgetDeadline)
    }
    guard deadline > now else {
      suspend(peer, "its writers used up their \(peer.maxTimeoutMs.load(ordering: .relaxed)) ms budget in transaction \(note.transaction)")
      timeouts.add(1, ordering: .relaxed)
      throw RemoteWriterFailure(description: "\(who) not called: its peer's writers used up their budget in transaction \(note.transaction)")
    }
    writerCalls.add(1, ordering: .relaxed)
    let a = WriterAwait(contract: note.contract, transaction: note.transaction, owner: owner, name: name, deadline: deadline, foreign: !onLoop)
    slot.begin(a)
    notify(record, note, droppable: false)
    if onLoop {
      loopWaits += 1
      bus.withCallbackSuspended {
        while !slot.ended(a) {
          let left = a.deadline - Connection.nowMs()
          if left <= 0 { break }
          if stopFlag.load(ordering: .relaxed) || closed || !link.step(timeoutMs: Int32(clamping: left)) {
            slot.post(a, .stopped)
          }
        }
      }
      loopWaits -= 1
    } else {
      slot.wait(a) { loopInBusCall.load(ordering: .relaxed) > 0 }
    }
    let outcome = slot.end(a)
    // The service thread runs what it queued meanwhile.
    if !onLoop { link.wake() }
    switch outcome {
    case .writes(let batch, let call):
      do {
        try bus.write(batch)
      } catch {
        completesRefused.add(1, ordering: .relaxed)
        log(.warning, "\(who): Complete of transaction \(note.transaction) refused, none of its \(batch.count) writes applied: \(error.code.camelName): \(error.message)")
        if !call.noReply, let e = call.error(DBusErrorName.ordo(error.code), error.message) { link.send(e) }
        throw error
      }
      completes.add(1, ordering: .relaxed)
      if !call.noReply, let ret = call.methodReturn({ _ in }) { link.send(ret) }
    case .refused(let why):
      throw RemoteWriterFailure(description: "\(who): its Complete of transaction \(note.transaction) could not be read: \(why)")
    case .timedOut, .ownerLeft, .serviceBusy:
      timeouts.add(1, ordering: .relaxed)
      let waited = a.deadline - now
      let why =
        switch outcome {
        case .ownerLeft: "left the bus while its call was awaited"
        case .serviceBusy: "cannot be served: the service thread waits for the bus this pass holds (commit on the service thread, see docs/dbus.md)"
        default:
          waited < Int64(timeoutMs)
            ? "did not complete within the \(waited) ms left of its peer's budget for this pass"
            : "did not complete within \(timeoutMs) ms"
        }
      let message = "\(who) \(why) (transaction \(note.transaction)); the pass goes on without its writes"
      log(.warning, message)
      if case .timedOut = outcome { suspend(peer, "\(who) did not answer") }
      throw RemoteWriterFailure(description: message)
    case .unregistered, .stopped:
      return
    }
  }

  /// Stops awaiting `peer`'s writers until it calls the service again.
  private func suspend(_ peer: RemotePeer, _ why: String) {
    guard !peer.suspended.exchange(true, ordering: .relaxed) else { return }
    suspensions.add(1, ordering: .relaxed)
    log(.warning, "\(why): \(peer.name)'s writer contracts are suspended (not called) until it calls the service again")
  }

  /// Sends a remote contract's `Notify`. Runs on the committing thread. With
  /// a policy, the keypaths and values are filtered to what the contract's
  /// peer may read (an every-transaction observer left with nothing to see
  /// is not sent one).
  private func notify(_ record: RemoteContract, _ note: ContractNotification, droppable: Bool = true) {
    var changed = note.changed
    var filter: ReadFilter?
    if policyOn.load(ordering: .relaxed), let policy = policyBox.withLock({ $0 }) {
      filter = record.peer.identity.map { policy.readable(by: $0) } ?? ReadFilter(allow: [], deny: [])
    }
    if let filter, !changed.isEmpty {
      // Only keypaths the peer may read (SPEC §12), for every contract: a
      // write to an unreadable ancestor of what it reads (SPEC §1) still
      // calls it, with the keypath left out (an empty list: read again
      // what you read). An every-transaction contract with nothing
      // readable gets no Notify.
      if !changed.allSatisfy({ filter.allows($0) }) {
        changed = ChangedKeypaths(changed.filter { filter.allows($0) })
        if changed.isEmpty && record.everyTransaction { return }
      }
    }
    var entries: [(String, Value)] = []
    var size = 64
    for k in changed { size += k.utf8.count + 8 }
    if size > limits.maxMessageBytes {
      changed = []
      notifyTruncated.add(1, ordering: .relaxed)
    } else {
      // Values only for a list that fits (read from the bus once).
      let values = bus.values(of: note)
      for k in changed {
        guard let v = values[k], filter?.allows(k) ?? true else { continue }
        size += k.utf8.count + Self.estimate(v)
        entries.append((k, v))
      }
      if size > limits.maxMessageBytes {
        entries = []
        notifyTruncated.add(1, ordering: .relaxed)
      }
    }
    let message = DBusMessageRef.notify(
      destination: record.owner, contractPath: ordoContractPathPrefix + String(note.contract), transaction: note.transaction,
      changed: changed, values: entries)
    guard let m = message else { return }
    if droppable && durableOn.load(ordering: .relaxed) {
      // An observer's Notify waits until its transaction is durable.
      held.withLock { $0.append(.notify(note.transaction, m)) }
      if !link.isLoopThread { link.wake() }
      return
    }
    notifySent.add(1, ordering: .relaxed)
    link.send(m, droppable: droppable)
  }

  // MARK: - Durability

  /// Whether acknowledgements wait for a transaction not yet committed (by
  /// another thread): the loop then polls instead of blocking.
  private var heldWaiting: Bool {
    durableOn.load(ordering: .relaxed) && held.withLock { !$0.isEmpty }
  }

  /// Group commit: while acknowledgements are held, handles the calls
  /// already waiting on the socket (libdbus reads about 2 KiB per step)
  /// before the one sync that covers them all.
  private func drainForGroupCommit() {
    guard durableOn.load(ordering: .relaxed), loopWaits == 0 else { return }
    var rounds = 0
    while rounds < 64, !stopFlag.load(ordering: .relaxed), held.withLock({ !$0.isEmpty }) {
      let before = methodCalls
      guard link.step(timeoutMs: 0), methodCalls != before else { return }
      rounds += 1
    }
  }

  /// Makes what is held durable with one sync, then sends the Commit
  /// replies and Notify signals of durable transactions in the order they
  /// were produced; a lost transaction's Commit gets
  /// `dev.ordo.Error.Storage` and its Notify signals are dropped. Service
  /// thread, outside any pass.
  private func releaseHeld() {
    guard durableOn.load(ordering: .relaxed), loopWaits == 0, !closed, slot.active == nil, !bus.isInTransaction,
      let durability = durabilityBox.withLock({ $0 }), held.withLock({ !$0.isEmpty })
    else { return }
    let outcome = durability.sync()
    syncs += 1
    if let reason = outcome.reason {
      syncFailures += 1
      let what = outcome.lost.map { $0.count == 1 ? "transaction \($0.lowerBound)" : "transactions \($0.lowerBound)…\($0.upperBound)" } ?? "no transaction"
      log(.error, "storage failure, \(what) lost (not applied): \(reason)")
    }
    let items = held.withLock { h -> [Held] in
      let x = h
      h.removeAll()
      return x
    }
    var keep: [Held] = []
    for item in items {
      let t = item.transaction
      if let lost = outcome.lost, lost.contains(t) {
        switch item {
        case .notify:
          notifyLost.add(1, ordering: .relaxed)
        case .reply(_, let call, _):
          storageErrors += 1
          errorReplies += 1
          let message = "transaction \(t) was not stored, nothing of it was applied: \(outcome.reason ?? "the sync failed")"
          if let e = call.error(DBusErrorName.ordo(.storage), message) { link.send(e) }
        }
      } else if t <= outcome.durable {
        switch item {
        case .notify(_, let m):
          notifySent.add(1, ordering: .relaxed)
          link.send(m, droppable: true)
        case .reply(_, _, let reply):
          link.send(reply)
        }
      } else {
        keep.append(item)
      }
    }
    if !keep.isEmpty { held.withLock { $0.insert(contentsOf: keep, at: 0) } }
    durability.acknowledged()
  }
}

/// The remote contract record a contract's callback uses: made from its id
/// on first use (an initial call runs inside `Bus.register`, before the id
/// is returned), then kept. Any thread.
private final class RecordBox: @unchecked Sendable {
  private let make: @Sendable (ContractID) -> RemoteContract
  private let made = PThreadLocked<RemoteContract?>(nil)

  init(_ make: @escaping @Sendable (ContractID) -> RemoteContract) { self.make = make }

  func record(_ id: ContractID) -> RemoteContract? {
    made.withLock { r in
      if let r, r.id == id { return r }
      let n = make(id)
      r = n
      return n
    }
  }
}
