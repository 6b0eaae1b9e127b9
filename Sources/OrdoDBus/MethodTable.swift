// The method table of `/dev/ordo/Bus` (one row per method, as an sd-bus
// vtable) and the routing of every incoming message: which row answers it,
// whether it waits for the running pass (queued calls), and its reply.
import CDBus
import Ordo

extension DBusService {
  /// A message held back until the waiting pass ends.
  enum Deferred {
    case call(DBusMessageRef)
    case peerLeft(String)
  }

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

  static let introspectable = "org.freedesktop.DBus.Introspectable"
  static let properties = "org.freedesktop.DBus.Properties"

  /// Every method of `/dev/ordo/Bus`. A call without an interface finds the
  /// first row with its member, in this order.
  static let methods: [Method] = [
    Method(ordoInterface, "Register", "sasasa{sv}", right: .read, queueing: .register) { s, c throws(OrdoServiceError) in try s.register(c) },
    Method(ordoInterface, "Unregister", "o", queueing: .whileForeignPass) { s, c throws(OrdoServiceError) in try s.unregister(c) },
    Method(ordoInterface, "Commit", "a{sv}asas", right: .write, queueing: .whilePassWaits) { s, c throws(OrdoServiceError) in try s.commit(c) },
    Method(ordoInterface, "CommitWith", "a{sv}asasa{sv}", right: .write, queueing: .whilePassWaits) { s, c throws(OrdoServiceError) in
      try s.commitWith(c)
    },
    Method(ordoInterface, "Owners", "as", right: .read) { s, c throws(OrdoServiceError) in try s.ownersReply(c) },
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

  static let methodIndex: [String: Method] = {
    var d: [String: Method] = [:]
    for m in methods {
      d[m.interface + "." + m.member] = m
      if d[m.member] == nil { d[m.member] = m }
    }
    return d
  }()

  /// The row for a call to the bus object, or the error to answer.
  static func method(_ iface: String?, _ member: String) throws(OrdoServiceError) -> Method {
    if let iface {
      if let m = methodIndex[iface + "." + member] { return m }
      throw .other(name: DBusErrorName.unknownMethod, message: "no method \(member) in interface \(iface) at \(ordoObjectPath)")
    }
    if let m = methodIndex[member] { return m }
    throw .other(name: DBusErrorName.unknownMethod, message: "no method \(member) in interface (none) at \(ordoObjectPath)")
  }

  /// The ``Link``'s handler: answers (or queues) one incoming message, then
  /// runs what was queued once no pass waits.
  func handle(_ m: DBusMessageRef) {
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
  func mustQueue(_ q: Queueing, sender: String) -> Bool {
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
  func outsideWaitingPass(_ sender: String) -> Bool {
    guard loopWaits > 0, let a = slot.active, !a.foreign else { return false }
    return a.owner != sender
  }

  /// The snapshot `sender` sees (see ``outsideWaitingPass(_:)``).
  func snapshot(_ patterns: [String], for sender: String) throws(OrdoError) -> Snapshot {
    outsideWaitingPass(sender) ? try bus.committedSnapshot(patterns) : try bus.snapshot(patterns)
  }

  /// The last transaction id `sender` sees (see ``outsideWaitingPass(_:)``).
  func transactionID(for sender: String) -> UInt64 {
    outsideWaitingPass(sender) ? bus.committedTransactionID : bus.transactionID
  }

  /// Runs the queued calls in arrival order, unless a pass still waits.
  func runDeferred() {
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
    recallResumedWriters()
  }

  /// Answers one message: a signal goes to ``handleSignal(_:)``; a method
  /// call is counted, resumes its peer, is queued if ``mustQueue(_:sender:)``
  /// says so (not when `replay`ed from the queue), else routed and answered.
  func handle(_ m: DBusMessageRef, replay: Bool) {
    if m.type == ORDO_DBUS_MESSAGE_TYPE_SIGNAL {
      handleSignal(m)
      return
    }
    let member = m.member ?? ""
    let path = m.path ?? ""
    let sender = m.sender ?? ""
    if !replay {
      statistics.methodCalls.add(1, ordering: .relaxed)
      log(.debug, "\(sender) calls \(m.interface ?? "-").\(member)(\(m.signature)) on \(path)")
      resume(sender, calling: member)
      if path == ordoObjectPath, let row = try? Self.method(m.interface, member), mustQueue(row.queueing, sender: sender) {
        statistics.queued.add(1, ordering: .relaxed)
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
      statistics.errorReplies.add(1, ordering: .relaxed)
      if error.name == DBusErrorName.accessDenied { statistics.accessDenied.add(1, ordering: .relaxed) }
      log(.warning, "\(sender) \(member): \(error.name): \(error.message)")
      if m.noReply { return }
      if let e = m.error(error.name, error.message) { link.send(e) }
    }
  }

  /// The reply to a method call: the bus object's row (its signature and,
  /// with a right, the caller's ``Access`` checked first), or the parent
  /// nodes' `Introspect`.
  func route(_ m: DBusMessageRef, path: String, member: String, sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
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

  /// Refuses arguments whose signature is not `signature`.
  func expect(_ m: DBusMessageRef, _ signature: String, _ method: String) throws(OrdoServiceError) {
    let got = m.signature
    guard got == signature else {
      throw .invalidArgs("\(method) expects arguments (\(signature)), got (\(got))")
    }
  }
}

extension DBusService {
  /// Reads a method's `a{sv}` options: each key must be one of `types`
  /// (option → signature of its value), given once, and its value of that
  /// signature, else `InvalidArgs` naming the options; `body` reads the
  /// value.
  func readOptions(
    _ r: inout MessageReader, _ method: String, _ types: KeyValuePairs<String, String>,
    _ body: (String, inout MessageReader) throws(OrdoServiceError) -> Void
  ) throws(OrdoServiceError) {
    // Named in errors only: not made for a call whose options are right.
    func known() -> String { types.map { "\($0.key) (\($0.value))" }.joined(separator: ", ") }
    var opts = r.recurse()
    r.next()
    var given: [String] = []
    while !opts.atEnd {
      var e = opts.recurse()
      opts.next()
      let key: String
      do { key = try e.string("option name") } catch { throw .invalidArgs(error.message) }
      guard let sig = types.first(where: { $0.key == key })?.value else {
        throw .invalidArgs("\(method): unknown option \"\(key)\"; the options are \(known())")
      }
      guard !given.contains(key) else { throw .invalidArgs("\(method): option \"\(key)\" is given twice") }
      given.append(key)
      var v = e.recurse()
      let got = v.currentSignature()
      guard got == sig else { throw .invalidArgs("\(method): option \"\(key)\" must be of type '\(sig)', got '\(got)'") }
      try body(key, &v)
    }
  }
}
