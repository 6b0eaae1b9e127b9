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
  /// The largest `timeout-ms` a writer contract may ask for: a peer that
  /// never answers delays each pass it is called in by at most this.
  public var maxWriterTimeoutMs: UInt32 = 60_000

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

  // Loop-thread state: who registered which contract.
  private var ownerOf: [ContractID: String] = [:]
  private var byPeer: [String: Set<ContractID>] = [:]
  /// Writer contracts (non-empty write set) and their timeouts in ms.
  private var timeoutOf: [ContractID: UInt32] = [:]

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

  /// Connects to `address` (nil: the session bus), owns `name` and starts
  /// answering on the thread that then calls ``run()`` or
  /// ``dispatch(timeoutMs:)``.
  ///
  /// - Throws: ``OrdoError/Code/dbus`` when the bus cannot be reached or the
  ///   name is owned by another connection.
  public init(
    bus: Bus, address: String? = nil, name: String = ordoDefaultName, limits: ServiceLimits = ServiceLimits(),
    logLevel: LogLevel = .warning, logger: (@Sendable (LogLevel, String) -> Void)? = nil
  ) throws(OrdoError) {
    self.bus = bus
    self.name = name
    self.limits = limits
    self.logLevel = logLevel
    self.logger = logger
    link = try Link(address: address)
    link.maxOutgoingBytes = limits.maxOutgoingBytes
    link.acceptSignal = { m in
      m.sender == "org.freedesktop.DBus" && m.interface == "org.freedesktop.DBus" && m.member == "NameOwnerChanged"
    }
    // One match rule tells us about every peer that leaves.
    try link.addMatch(
      "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg2=''"
    )
    try link.requestName(name)
    link.handler = { [unowned self] m in self.handle(m) }
    log(.info, "serving \(ordoInterface) at \(ordoObjectPath) as \(name) (\(link.uniqueName))")
  }

  deinit { close() }

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
    let ok = link.step(timeoutMs: deferred.isEmpty ? timeoutMs : 0)
    runDeferred()
    if !ok { log(.error, "the connection to the bus daemon was lost") }
    return ok && !stopFlag.load(ordering: .relaxed)
  }

  /// Answers until ``stop()`` is called.
  ///
  /// - Throws: ``OrdoError/Code/dbus`` when the connection to the bus daemon
  ///   is lost.
  public func run() throws(OrdoError) {
    while !stopFlag.load(ordering: .relaxed) {
      guard !closed, link.step(timeoutMs: deferred.isEmpty ? -1 : 0) else {
        throw OrdoError(.dbus, "the connection to the bus daemon was lost")
      }
      runDeferred()
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
    closed = true
    for (id, _) in ownerOf { try? bus.unregister(id) }
    ownerOf.removeAll()
    timeoutOf.removeAll()
    for d in deferred {
      if case .call(let m) = d, !m.noReply, let e = m.error("dev.ordo.Error.Dbus", "the service stopped before running this call") {
        link.send(e)
      }
    }
    deferred.removeAll()
    byPeer.removeAll()
    link.close()
    log(.info, "stopped serving \(name)")
  }

  private func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
    guard level <= logLevel, let logger else { return }
    logger(level, message())
  }

  // MARK: - Dispatch

  private func handle(_ m: DBusMessageRef) {
    handle(m, replay: false)
    if loopWaits == 0 { runDeferred() }
  }

  /// Whether a call must wait for the running pass: `Commit`s while a pass
  /// waits for a writer on this thread; `Register`, `Unregister` and
  /// `Commit` while a pass on another thread waits (they would wait for the
  /// bus that pass holds); and any of them behind calls already queued.
  private func mustQueue(_ member: String) -> Bool {
    guard member == "Commit" || member == "Register" || member == "Unregister" else { return false }
    if member == "Commit" && loopWaits > 0 { return true }
    if loopWaits == 0 && !deferred.isEmpty { return true }
    return slot.active?.foreign == true
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
      if path == ordoObjectPath && (m.interface == nil || m.interface == ordoInterface) && mustQueue(member) {
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
      guard (iface == nil || iface == "org.freedesktop.DBus.Introspectable") && member == "Introspect" else {
        throw .other(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "\(path) only answers Introspect")
      }
      try expect(m, "", "Introspect")
      let child = path == "/" ? "dev" : (path == "/dev" ? "ordo" : "Bus")
      return m.methodReturn {
        $0.string(
          "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n  <node name=\"\(child)\"/>\n</node>\n"
        )
      }
    default:
      throw .other(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no object at \(path); the bus is at \(ordoObjectPath)")
    }
    switch (iface, member) {
    case ("dev.ordo.Bus1", _), (nil, "Register"), (nil, "Unregister"), (nil, "Commit"), (nil, "Get"), (nil, "Snapshot"),
      (nil, "Complete"), (nil, "Contracts"), (nil, "Graph"), (nil, "Stats"):
      return try busMethod(m, member, sender)
    case ("org.freedesktop.DBus.Introspectable", "Introspect"), (nil, "Introspect"):
      try expect(m, "", "Introspect")
      return m.methodReturn { $0.string(introspectionXML) }
    case ("org.freedesktop.DBus.Properties", _), (nil, "GetAll"), (nil, "Set"):
      return try properties(m, member)
    default:
      throw .other(
        name: "org.freedesktop.DBus.Error.UnknownMethod",
        message: "no method \(member) in interface \(iface ?? "(none)") at \(ordoObjectPath)")
    }
  }

  private func expect(_ m: DBusMessageRef, _ signature: String, _ method: String) throws(OrdoServiceError) {
    let got = m.signature
    guard got == signature else {
      throw .invalidArgs("\(method) expects arguments (\(signature)), got (\(got))")
    }
  }

  private func busMethod(_ m: DBusMessageRef, _ member: String, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    switch member {
    case "Register": return try register(m, sender)
    case "Unregister": return try unregister(m, sender)
    case "Commit": return try commit(m)
    case "Get": return try get(m)
    case "Snapshot": return try snapshot(m)
    case "Complete": return try complete(m, sender)
    case "Contracts":
      try expect(m, "", "Contracts")
      return try contractsReply(m)
    case "Graph":
      try expect(m, "", "Graph")
      let dot = bus.graph()
      guard dot.utf8.count <= limits.maxMessageBytes else {
        throw .ordo(OrdoError(.limit, "the graph is \(dot.utf8.count) bytes, more than max-message-bytes (\(limits.maxMessageBytes))"))
      }
      return m.methodReturn { $0.string(dot) }
    case "Stats":
      try expect(m, "", "Stats")
      return m.methodReturn { w in w.dict { self.writeStats(&$0) } }
    default:
      throw .other(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member) in interface \(ordoInterface)")
    }
  }

  // MARK: - Methods

  private func register(_ m: DBusMessageRef, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    try expect(m, "sasasa{sv}", "Register")
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
      guard seen <= 16 else { throw .invalidArgs("Register: more than 16 options") }
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
        priority = ordo_iter_get_int32(&v.iter)
      case "notify-initial":
        try need("b")
        if ordo_iter_get_bool(&v.iter) != 0 { flags.insert(.notifyInitial) }
      case "timeout-ms":
        try need("u")
        timeoutMs = ordo_iter_get_uint32(&v.iter)
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
    let mine = byPeer[sender]?.count ?? 0
    guard mine < limits.maxContractsPerPeer else {
      throw .ordo(OrdoError(.limit, "peer \(sender) already has \(mine) contracts (limit max-contracts-per-peer \(limits.maxContractsPerPeer))"))
    }
    let total = bus.statistics.contracts
    guard total < limits.maxContracts else {
      throw .ordo(OrdoError(.limit, "the bus already has \(total) contracts (limit max-contracts \(limits.maxContracts))"))
    }
    let owner = sender
    let writer = !writes.isEmpty
    let timeout = timeoutMs
    let spec = ContractSpec(name: name, reads: reads, writes: writes, priority: priority, flags: flags) { [weak self] note in
      guard let self else { return }
      if writer {
        try self.writerCall(owner: owner, name: name, timeoutMs: timeout, note)
      } else {
        self.notify(owner: owner, note)
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
    ownerOf[handle.id] = sender
    byPeer[sender, default: []].insert(handle.id)
    if writer { timeoutOf[handle.id] = timeoutMs }
    let path = ordoContractPathPrefix + String(handle.id)
    log(.info, "\(sender) registered contract \(handle.id) \"\(name)\" reads [\(reads.joined(separator: ", "))]\(writer ? " writes [\(writes.joined(separator: ", "))] timeout \(timeoutMs) ms" : "")\(priority.map { " priority \($0)" } ?? "")")
    if initialRegister?.replied == true { return nil }
    return m.methodReturn { $0.objectPath(path) }
  }

  private func contractID(_ path: String) -> ContractID? {
    guard path.hasPrefix(ordoContractPathPrefix) else { return nil }
    let digits = path.dropFirst(ordoContractPathPrefix.count)
    guard !digits.isEmpty, digits.count <= 20, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
    return ContractID(digits)
  }

  private func unregister(_ m: DBusMessageRef, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    try expect(m, "o", "Unregister")
    var r = m.reader()
    let path: String
    do { path = try r.string("contract") } catch { throw .invalidArgs(error.message) }
    guard let id = contractID(path) else {
      throw .ordo(OrdoError(.notFound, "no contract at \(path); contract paths are \(ordoContractPathPrefix)<id>"))
    }
    guard let owner = ownerOf[id] else {
      if bus.contract(id) != nil {
        throw .accessDenied("contract \(path) belongs to the process that publishes the bus; only its owner may unregister it")
      }
      throw .ordo(OrdoError(.notFound, "no contract at \(path)"))
    }
    guard owner == sender else {
      throw .accessDenied("contract \(path) was registered by \(owner); only that peer may unregister it")
    }
    forget(id, owner)
    if let a = slot.active, a.contract == id { slot.post(a, .unregistered) }
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    do { try bus.unregister(id) } catch { throw .ordo(error) }
    log(.info, "\(sender) unregistered contract \(id)")
    return m.methodReturn { _ in }
  }

  private func forget(_ id: ContractID, _ owner: String) {
    ownerOf[id] = nil
    timeoutOf[id] = nil
    byPeer[owner]?.remove(id)
    if byPeer[owner]?.isEmpty == true { byPeer[owner] = nil }
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
    let left = limits.maxKeypathsPerCall - sets.count
    let touch = try r.stringArray("\(method) touch", limit: left)
    let remove = try r.stringArray("\(method) remove", limit: left - touch.count)
    var batch: [Write] = sets.map { .set($0.0, $0.1) }
    batch.reserveCapacity(sets.count + touch.count + remove.count)
    for k in touch { batch.append(.touch(k)) }
    for k in remove { batch.append(k.hasSuffix(".**") ? .removeTree(String(k.dropLast(3))) : .remove(k)) }
    return batch
  }

  private func commit(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    try expect(m, "a{sv}asas", "Commit")
    var r = m.reader()
    let batch = try readWrites(&r, "Commit")
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
      throw .ordo(error)
    }
    return m.methodReturn { $0.uint64(txn) }
  }

  private func get(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    try expect(m, "s", "Get")
    var r = m.reader()
    let k: String
    do { k = try r.string("keypath") } catch { throw .invalidArgs(error.message) }
    let snap: Snapshot
    do throws(OrdoError) {
      _ = try bus.counter(k)  // validates: a keypath, not a pattern
      snap = try bus.snapshot([k])
    } catch { throw .ordo(error) }
    let counter = snap.counters[k] ?? 0
    guard let v = snap.values[k] else {
      throw .ordo(OrdoError(.notFound, "\"\(k)\" holds no value (its counter is \(counter))"))
    }
    return m.methodReturn { w in
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

  private func snapshot(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    try expect(m, "as", "Snapshot")
    var r = m.reader()
    let patterns = try r.stringArray("patterns", limit: limits.maxKeypathsPerCall)
    let snap: Snapshot
    do { snap = try bus.snapshot(patterns) } catch { throw .ordo(error) }
    var size = 64
    for (k, v) in snap.values { size += k.utf8.count + Self.estimate(v) }
    for (k, _) in snap.counters { size += k.utf8.count + 16 }
    guard size <= limits.maxMessageBytes else {
      throw .ordo(OrdoError(.limit, "the snapshot of [\(patterns.joined(separator: ", "))] holds \(snap.values.count) values (about \(size) bytes), more than max-message-bytes (\(limits.maxMessageBytes)); ask for narrower patterns"))
    }
    return m.methodReturn { w in
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

  private func complete(_ m: DBusMessageRef, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    try expect(m, "ota{sv}asas", "Complete")
    var r = m.reader()
    let path: String
    do { path = try r.string("contract") } catch { throw .invalidArgs(error.message) }
    guard let id = contractID(path), let owner = ownerOf[id] else {
      if let id = contractID(path), bus.contract(id) != nil {
        throw .accessDenied("contract \(path) belongs to the process that publishes the bus; only its owner may complete its calls")
      }
      throw .ordo(OrdoError(.notFound, "no contract at \(path)"))
    }
    guard owner == sender else {
      throw .accessDenied("contract \(path) was registered by \(owner), not by \(sender); only its owner may complete its calls")
    }
    guard timeoutOf[id] != nil else {
      throw .ordo(OrdoError(.invalidArgument, "contract \(path) is an observer (empty write set): it has no call to complete"))
    }
    let txn = r.uint64()
    guard let a = slot.active, a.contract == id, a.transaction == txn else {
      let what = slot.active.map { $0.contract == id ? "its call for transaction \($0.transaction) is awaited" : "no call of it is awaited now" } ?? "no call of it is awaited now"
      throw .other(name: "dev.ordo.Error.Stale", message: "Complete of \(path) for transaction \(txn): \(what) (a call that timed out, or an old or wrong transaction id)")
    }
    let batch: [Write]
    do throws(OrdoServiceError) {
      batch = try readWrites(&r, "Complete")
    } catch {
      // The awaited call is answered, badly: the pass goes on without it.
      if slot.post(a, .refused("\(error.name): \(error.message)")) { completesRefused.add(1, ordering: .relaxed) }
      throw error
    }
    guard slot.post(a, .writes(batch, m)) else {
      throw .other(name: "dev.ordo.Error.Stale", message: "Complete of \(path) for transaction \(txn) came after its wait ended")
    }
    // The reply is sent once the writes are applied (or refused).
    return nil
  }

  private func contractsReply(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    let list = bus.contracts()
    var size = 64
    for c in list { size += 200 + c.name.utf8.count + c.reads.reduce(0) { $0 + $1.utf8.count + 8 } + c.writes.reduce(0) { $0 + $1.utf8.count + 8 } }
    guard size <= limits.maxMessageBytes else {
      throw .ordo(OrdoError(.limit, "the list of \(list.count) contracts (about \(size) bytes) is more than max-message-bytes (\(limits.maxMessageBytes))"))
    }
    return m.methodReturn { w in
      w.container(ORDO_DBUS_TYPE_ARRAY, "a{sv}") { a in
        for c in list {
          a.dict { d in
            d.entry("path", objectPath: ordoContractPathPrefix + String(c.id))
            d.entry("name", string: c.name)
            d.entry("owner", string: self.ownerOf[c.id] ?? "")
            d.entry("reads", strings: c.reads)
            d.entry("writes", strings: c.writes)
            if let p = c.priority { d.entry("priority", int32: p) }
            d.entry("level", uint32: UInt32(clamping: c.level))
            d.entry("calls", uint64: c.calls)
            d.entry("kind", string: c.kind.rawValue)
            d.entry("position", uint32: UInt32(clamping: c.position))
            d.entry("failures", uint64: c.failures)
            d.entry("last-txn", uint64: c.lastTransaction)
            if let t = self.timeoutOf[c.id] { d.entry("timeout-ms", uint32: t) }
          }
        }
      }
    }
  }

  private func writeStats(_ d: inout MessageWriter) {
    let s = bus.statistics
    d.entry("contracts", uint64: UInt64(s.contracts))
    d.entry("remote-contracts", uint64: UInt64(ownerOf.count))
    d.entry("peers", uint64: UInt64(byPeer.count))
    d.entry("transactions", uint64: s.transactions)
    d.entry("notifications", uint64: s.notifications)
    d.entry("notify-sent", uint64: notifySent.load(ordering: .relaxed))
    d.entry("notify-dropped", uint64: link.dropped)
    d.entry("notify-truncated", uint64: notifyTruncated.load(ordering: .relaxed))
    d.entry("failures", uint64: s.failures)
    d.entry("timeouts", uint64: timeouts.load(ordering: .relaxed))
    d.entry("writer-calls", uint64: writerCalls.load(ordering: .relaxed))
    d.entry("completes", uint64: completes.load(ordering: .relaxed))
    d.entry("completes-refused", uint64: completesRefused.load(ordering: .relaxed))
    d.entry("queued", uint64: queued)
    d.entry("queued-now", uint64: UInt64(deferred.count))
    d.entry("rollbacks", uint64: s.rollbacks)
    d.entry("values", uint64: UInt64(s.values))
    d.entry("method-calls", uint64: methodCalls)
    d.entry("error-replies", uint64: errorReplies)
    d.entry("commits", uint64: commits)
    d.entry("peers-left", uint64: peersLeft)
  }

  private func properties(_ m: DBusMessageRef, _ member: String) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = m.reader()
    func readIface() throws(OrdoServiceError) -> String {
      let i: String
      do { i = try r.string("interface_name") } catch { throw .invalidArgs(error.message) }
      guard i == ordoInterface || i.isEmpty else {
        throw .other(name: "org.freedesktop.DBus.Error.UnknownInterface", message: "\(ordoObjectPath) has no properties in interface \(i)")
      }
      return i
    }
    switch member {
    case "Get":
      try expect(m, "ss", "Properties.Get")
      _ = try readIface()
      let p: String
      do { p = try r.string("property_name") } catch { throw .invalidArgs(error.message) }
      switch p {
      case "Transaction":
        let t = bus.transactionID
        return m.methodReturn { $0.container(ORDO_DBUS_TYPE_VARIANT, "t") { $0.uint64(t) } }
      case "Version":
        return m.methodReturn { $0.container(ORDO_DBUS_TYPE_VARIANT, "s") { $0.string(ordoDBusVersion) } }
      default:
        throw .other(name: "org.freedesktop.DBus.Error.UnknownProperty", message: "\(ordoInterface) has no property \(p); it has Transaction and Version")
      }
    case "GetAll":
      try expect(m, "s", "Properties.GetAll")
      _ = try readIface()
      let t = bus.transactionID
      return m.methodReturn { w in
        w.dict { d in
          d.entry("Transaction", uint64: t)
          d.entry("Version", string: ordoDBusVersion)
        }
      }
    case "Set":
      try expect(m, "ssv", "Properties.Set")
      throw .other(name: "org.freedesktop.DBus.Error.PropertyReadOnly", message: "the properties of \(ordoInterface) are read-only")
    default:
      throw .other(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no method \(member) in org.freedesktop.DBus.Properties")
    }
  }

  // MARK: - Peers and signals

  private func handleSignal(_ m: DBusMessageRef) {
    guard m.member == "NameOwnerChanged", m.signature == "sss" else { return }
    var r = m.reader()
    guard let name = try? r.string("name"), let _ = try? r.string("old"), let new = try? r.string("new") else { return }
    guard name.hasPrefix(":"), new.isEmpty, byPeer[name] != nil else { return }
    // A writer awaited from a peer that left is timed out at once.
    if let a = slot.active, a.owner == name { slot.post(a, .ownerLeft) }
    if slot.active?.foreign == true || (loopWaits == 0 && !deferred.isEmpty) {
      deferred.append(.peerLeft(name))
    } else {
      removePeer(name)
    }
  }

  private func removePeer(_ name: String) {
    guard let ids = byPeer[name] else { return }
    byPeer[name] = nil
    peersLeft += 1
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    for id in ids.sorted() {
      ownerOf[id] = nil
      timeoutOf[id] = nil
      try? bus.unregister(id)
    }
    log(.info, "\(name) left the bus: removed its \(ids.count) contract\(ids.count == 1 ? "" : "s")")
  }

  /// A remote writer contract's call: sends its `Notify`, waits for its
  /// `Complete` (serving other peers meanwhile), then applies the writes,
  /// all or nothing, in this callback and answers the `Complete`.
  ///
  /// On the service thread the wait is a nested dispatch loop with the
  /// callback's checks suspended: `Get`/`Snapshot`/`Register`/`Unregister`
  /// … are answered, `Commit`s queue. On another thread (a host committing
  /// on its own thread) the callback waits on a condition variable; the
  /// service thread parks the `Complete` and queues `Register`,
  /// `Unregister` and `Commit` (they would wait for the bus this pass holds).
  private func writerCall(owner: String, name: String, timeoutMs: UInt32, _ note: ContractNotification) throws {
    let onLoop = link.isLoopThread
    if onLoop, let r = initialRegister, !r.replied, let ret = r.call.methodReturn({ $0.objectPath(ordoContractPathPrefix + String(note.contract)) }) {
      link.send(ret)
      initialRegister?.replied = true
    }
    writerCalls.add(1, ordering: .relaxed)
    let a = WriterAwait(contract: note.contract, transaction: note.transaction, owner: owner, name: name, timeoutMs: Int32(clamping: timeoutMs), foreign: !onLoop)
    slot.begin(a)
    notify(owner: owner, note, droppable: false)
    if onLoop {
      loopWaits += 1
      bus.withCallbackSuspended {
        while !slot.ended(a) {
          let left = a.deadline - Link.nowMs()
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
    let who = "writer contract \(note.contract) \"\(name)\" of \(owner)"
    switch outcome {
    case .writes(let batch, let call):
      do {
        try bus.write(batch)
      } catch {
        completesRefused.add(1, ordering: .relaxed)
        log(.warning, "\(who): Complete of transaction \(note.transaction) refused, none of its \(batch.count) writes applied: \(error.code.camelName): \(error.message)")
        if !call.noReply, let e = call.error("dev.ordo.Error." + error.code.camelName, error.message) { link.send(e) }
        throw error
      }
      completes.add(1, ordering: .relaxed)
      if !call.noReply, let ret = call.methodReturn({ _ in }) { link.send(ret) }
    case .refused(let why):
      throw RemoteWriterFailure(description: "\(who): its Complete of transaction \(note.transaction) could not be read: \(why)")
    case .timedOut, .ownerLeft, .serviceBusy:
      timeouts.add(1, ordering: .relaxed)
      let why =
        switch outcome {
        case .ownerLeft: "left the bus while its call was awaited"
        case .serviceBusy: "cannot be served: the service thread waits for the bus this pass holds (commit on the service thread, see docs/dbus.md)"
        default: "did not complete within \(timeoutMs) ms"
        }
      let message = "\(who) \(why) (transaction \(note.transaction)); the pass goes on without its writes"
      log(.warning, message)
      throw RemoteWriterFailure(description: message)
    case .unregistered, .stopped:
      return
    }
  }

  /// Sends a remote contract's `Notify`. Runs on the committing thread.
  private func notify(owner: String, _ note: ContractNotification, droppable: Bool = true) {
    var changed = note.changed
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
        guard let v = values[k] else { continue }
        size += k.utf8.count + Self.estimate(v)
        entries.append((k, v))
      }
      if size > limits.maxMessageBytes {
        entries = []
        notifyTruncated.add(1, ordering: .relaxed)
      }
    }
    let message = DBusMessageRef.signal(path: ordoObjectPath, interface: ordoInterface, member: "Notify", destination: owner) { w in
      w.objectPath(ordoContractPathPrefix + String(note.contract))
      w.uint64(note.transaction)
      w.stringArray(changed)
      w.valueDict(entries)
    }
    guard let m = message else { return }
    notifySent.add(1, ordering: .relaxed)
    link.send(m, droppable: droppable)
  }
}
