// The blocking client of a published bus (`OrdoClient`, used by ordoctl):
// its calls, its contracts' `Notify` and `Trace` signals, and the types
// its answers come in.
import CDBus
import Ordo

#if canImport(Glibc)
import Glibc
#endif

/// An error returned by a remote bus (or by the connection to it): the D-Bus
/// error name (`dev.ordo.Error.NotFound`, `org.freedesktop.DBus.Error.InvalidArgs`
/// …) and its message.
public struct OrdoRemoteError: Error, Hashable, Sendable, CustomStringConvertible {
  /// The D-Bus error name.
  public let name: String
  /// What was wrong.
  public let message: String

  /// Makes an error.
  public init(name: String, message: String) {
    self.name = name
    self.message = message
  }

  /// The Ordo code for a `dev.ordo.Error.<Name>`, if it is one.
  public var code: OrdoError.Code? {
    let prefix = DBusErrorName.prefix
    guard name.hasPrefix(prefix) else { return nil }
    let n = name.dropFirst(prefix.count)
    return OrdoError.Code.allCases.first { $0.camelName == n }
  }

  /// `name: message`.
  public var description: String { "\(name): \(message)" }
}

/// A `Notify` received by a ``OrdoClient``, or the catch-up it reads for
/// an observer after the service came back (SPEC §10).
public struct RemoteNotification: Sendable, Hashable {
  /// What a notification is (the same names as the Python package's `kind`).
  public enum Kind: String, Sendable, Hashable {
    /// A `Notify` of the service. An empty ``RemoteNotification/changed``
    /// is an initial call: read what you need.
    case notify
    /// The catch-up after the service came back with the same epoch:
    /// `Changes` since the last transaction delivered; ``changed`` lists
    /// every keypath of the read set that changed meanwhile.
    case changes
    /// The catch-up after the service came back with another epoch (its
    /// history is new): a full `Snapshot` of the read set; replace what you
    /// hold with ``values``.
    case snapshot
  }

  /// The contract's object path (its path now: a contract registered again
  /// has a new one).
  public let contract: String
  /// The transaction id.
  public let transaction: UInt64
  /// The changed keypaths that affect the contract's read set. For a
  /// cached contract's catch-up, the keypaths whose value it changed.
  public internal(set) var changed: [String]
  /// The current values of those that hold one (for a cached contract,
  /// what the service sent its cache: docs/dbus.md, "Consistent reads").
  public internal(set) var values: [String: Value]
  /// ``Kind/notify``, or the catch-up: the first notification after the
  /// service came back.
  public internal(set) var kind: Kind = .notify
  /// For a contract registered with `cache`, the value of every keypath of
  /// its read set as of ``transaction`` (those that hold one); nil for
  /// others. When the values did not fit in one `Notify`, the read set is
  /// read again with one `Snapshot` per read pattern (brought to one
  /// transaction by a `Changes` when they differ) and delivered as a
  /// ``Kind/snapshot`` (``transaction`` is then that read's; a pattern
  /// whose values alone do not fit in a reply is left out).
  public internal(set) var cache: [String: Value]?
}

/// A contract an ``OrdoClient`` registered, kept to register it again
/// when the service comes back.
private final class ClientContract {
  enum Handler {
    case observer((RemoteNotification) -> Void)
    case writer((RemoteNotification) -> RemoteWrites)
  }

  let name: String
  let reads: [String]
  let writes: [String]
  let priority: Int32?
  let notifyInitial: Bool
  let timeoutMs: UInt32?
  let handler: Handler
  /// Its read set's values, for a contract registered with `cache`.
  var cache: ReadSetCache?
  /// The catch-up a cached observer registered again owes: delivered
  /// with the initial call that refills its cache.
  var refill: RemoteNotification.Kind?
  /// The path its first registration returned (``OrdoClient/unregister(_:)``
  /// takes it as well as the path now).
  var firstPath = ""
  /// Its place in the order of registration.
  var order = 0
  /// Its path now; nil while the service is away.
  var path: String?
  /// An observer's position (SPEC §10): the last transaction it was told
  /// of — at least the last committed one when it registered — and the
  /// last one a catch-up covered, if any (`Notify`s up to it are not
  /// delivered).
  var last: UInt64 = 0
  var covered: UInt64?

  init(
    name: String, reads: [String], writes: [String], priority: Int32?, notifyInitial: Bool, timeoutMs: UInt32?, cache: Bool, handler: Handler
  ) {
    self.cache = cache ? ReadSetCache(reads: reads) : nil
    self.name = name
    self.reads = reads
    self.writes = writes
    self.priority = priority
    self.notifyInitial = notifyInitial
    self.timeoutMs = timeoutMs
    self.handler = handler
  }
}

/// One step of a ``RemoteTrace``: a scheduled contract and what happened
/// to it (the `Trace` signal's step dictionary, docs/dbus.md).
public struct RemoteTraceStep: Sendable, Hashable {
  /// Its object path.
  public var contract: String
  public var name: String
  /// The transaction its callback received.
  public var transaction: UInt64
  /// `called`, `failed`, `unchanged` or `unregistered`.
  public var outcome: String
  public var initial: Bool
  /// The keypaths that scheduled it.
  public var because: [String]
  public var writes: [String]
  /// Refused writes, `KEYPATH: CODE: message`.
  public var refused: [String]
  public var failure: String?
  public var durationNS: UInt64
  /// The keypath lists were left out (the trace was over max-message-bytes).
  public var truncated: Bool
}

/// One pass as a `Trace` signal reports it (see `SubscribeTrace` in docs/dbus.md).
public struct RemoteTrace: Sendable, Hashable {
  public var transaction: UInt64
  public var committed: Bool
  public var changed: [String]
  public var steps: [RemoteTraceStep]
  public var durationNS: UInt64
}

/// The writes a remote writer contract answers its `Notify` with (its
/// `Complete`): applied all or nothing, sets, then touches, then removes
/// (`k.**` removes the tree).
public struct RemoteWrites: Sendable, Hashable {
  public var set: [String: Value]
  public var touch: [String]
  public var remove: [String]

  /// Nothing to write.
  public static let none = RemoteWrites()

  public init(set: [String: Value] = [:], touch: [String] = [], remove: [String] = []) {
    self.set = set
    self.touch = touch
    self.remove = remove
  }
}

/// A value in a dictionary returned by `Contracts` or `Stats`.
public enum RemoteField: Sendable, Hashable, CustomStringConvertible {
  case string(String)
  case int(Int64)
  case uint(UInt64)
  case bool(Bool)
  case double(Double)
  case strings([String])
  case other(String)

  /// A plain rendering (`[a, b]` for lists).
  public var description: String {
    switch self {
    case .string(let s): s
    case .int(let x): String(x)
    case .uint(let x): String(x)
    case .bool(let b): String(b)
    case .double(let d): String(d)
    case .strings(let a): "[" + a.joined(separator: ", ") + "]"
    case .other(let sig): "<\(sig)>"
    }
  }
}

/// A small blocking client of a bus published over D-Bus (`ordoctl` is
/// built on it). Use it from one thread: calls block until their reply, and
/// ``process(timeoutMs:)`` delivers `Notify` signals to the callbacks of the
/// contracts registered with ``register(name:reads:priority:notifyInitial:cache:_:)``.
///
/// When the service goes away and comes back (a new owner of its name:
/// `ordod` restarted), ``process(timeoutMs:)`` registers every contract
/// again (same names and options; writers with notify-initial, so that
/// what they compute comes back in line) and catches each observer up
/// (SPEC §10): same epoch, `Changes` since the last transaction it was told
/// of, delivered as one ``RemoteNotification/Kind/changes`` notification
/// (none when nothing changed); another epoch, a full `Snapshot`, delivered
/// as one ``RemoteNotification/Kind/snapshot``. `Notify`s that catch-up
/// covers are not delivered: each change is delivered once. A lost
/// connection (the bus daemon gone, or `ordod` restarted behind a direct
/// connection) is opened again at the same address, by
/// ``process(timeoutMs:)`` and by any call, for up to
/// ``reconnectTimeoutMs``; then the contracts come back the same way.
/// Turn it off with ``reconnect``.
public final class OrdoClient {
  /// The connection now: another one after a lost one was opened again.
  private(set) var connection: Connection
  /// Where ``connection`` was opened (the session bus's address read from
  /// the environment when none was given), to open it there again.
  private let address: String
  /// How many times a lost connection was opened again: a reply awaited
  /// on an earlier connection never comes.
  package private(set) var generation = 0
  /// When the connection was found lost (monotonic ms), until it is open again.
  private var lostAtMs: Int64?
  /// Whether ``deliver()`` runs (the callbacks of what the last read brought).
  private var delivering = false
  /// Whether the next ``process(timeoutMs:)`` tells the program about a
  /// lost connection (nil owner) and, once it is open again, registers the
  /// contracts again and tells the new owner.
  private var toldLost = true
  private var reopened = false
  /// Set by ``close()``, or when the connection stayed lost past
  /// ``reconnectTimeoutMs``: nothing is opened again.
  private var ended = false
  /// The service's well-known (or unique) name.
  public let destination: String
  /// Reply timeout for calls.
  public var timeoutMs: Int32
  /// The contracts registered with the service's owner now, by path.
  private var registered: [String: ClientContract] = [:]
  /// How many contracts were ever added (their registration order).
  private var added = 0
  /// Those registered with an owner that left, in registration order: to
  /// register again with the next one.
  private var away: [ClientContract] = []
  /// The epoch of the owner the contracts are registered with.
  private var knownEpoch: String?
  /// Whether the contracts are registered again, with a catch-up, when the
  /// service's name gets a new owner, and a lost connection is opened
  /// again (default true). Off, the contracts are forgotten with the owner
  /// or the connection that held them, and a lost connection stays lost.
  public var reconnect = true
  /// How long a lost connection is tried again, every 100 ms, before the
  /// client gives up (``process(timeoutMs:)`` returns false from then on);
  /// 0 (or less): for ever. Default 30 000 ms, as `ordoctl watch --reconnect-timeout`
  /// and the Python client's `reconnect_timeout`.
  public var reconnectTimeoutMs: Int32 = 30_000
  /// Told when a contract cannot be registered again with the service's
  /// new owner (its name and the error); it stays away until the next
  /// owner.
  public var onReconnectError: ((String, OrdoRemoteError) -> Void)?
  private var traceCallback: ((RemoteTrace) -> Void)?
  /// Told when the bus refuses a writer's `Complete` (a rule broken, a
  /// timeout passed: `dev.ordo.Error.Stale` …): the contract's path as its
  /// registration returned it (also after it was registered again), the
  /// txn and the error. None of that `Complete`'s writes was applied.
  public var onCompleteError: ((String, UInt64, OrdoRemoteError) -> Void)?
  /// The unique name that owns ``destination`` now: `Notify` signals are
  /// accepted from it only (any peer can send a signal to this connection).
  public private(set) var serviceOwner: String?
  private var followingOwner = false
  /// Called from ``process(timeoutMs:)`` when the owner of ``destination``
  /// changes (after the first contract was registered): nil when it left
  /// the bus or the connection was lost, else the new owner's unique name
  /// (over a direct connection opened again: its address), once the
  /// contracts are registered again and caught up (see ``reconnect``). Without
  /// ``reconnect`` the contracts registered with the old owner are gone
  /// with it (their callbacks are forgotten): register again and catch up
  /// with ``changes(since:patterns:)`` (same ``epoch``) or ``snapshot(_:)``
  /// (SPEC §10). Any call made meanwhile may see the old or the new owner.
  public var onOwnerChange: ((String?) -> Void)?
  /// Replies awaited by calls sent without blocking (``MergingWriter``), by
  /// the call's serial: ``process(timeoutMs:)`` hands each reply to its own.
  var replyHandlers: [UInt32: (DBusMessageRef) -> Void] = [:]

  /// Connects to the bus daemon at `address`; with none, directly to the
  /// service at `ORDO_ADDRESS` when that is set (as
  /// ``init(direct:name:timeoutMs:)``), else to the session bus from
  /// `DBUS_SESSION_BUS_ADDRESS`.
  ///
  /// - Throws: `org.freedesktop.DBus.Error.InvalidArgs` when `name` is not a
  ///   valid D-Bus bus name (nothing connected); `dev.ordo.Error.Dbus` when
  ///   the bus cannot be reached.
  public convenience init(address: String? = nil, name: String = ordoDefaultName, timeoutMs: Int32 = 10_000) throws(OrdoRemoteError) {
    try Self.check(name)
    if address == nil, let direct = getenv(ordoAddressVariable).map({ String(cString: $0) }), !direct.isEmpty {
      self.init(connection: try Connection(direct: direct), address: direct, name: name, timeoutMs: timeoutMs)
    } else {
      let at = address ?? getenv("DBUS_SESSION_BUS_ADDRESS").map { String(cString: $0) }
      self.init(connection: try Connection(address: at), address: at ?? "", name: name, timeoutMs: timeoutMs)
    }
  }

  /// Connects directly, peer to peer with no bus daemon, to a service's
  /// listening socket at `address` (`ordod --listen`, SPEC §16), e.g.
  /// `unix:path=/run/ordo/bus`. `name` only labels the calls: the socket
  /// is the service's. Its `Notify` signals are accepted from that
  /// connection, which nobody else can send on.
  ///
  /// - Throws: as ``init(address:name:timeoutMs:)``.
  public convenience init(direct address: String, name: String = ordoDefaultName, timeoutMs: Int32 = 10_000) throws(OrdoRemoteError) {
    try Self.check(name)
    self.init(connection: try Connection(direct: address), address: address, name: name, timeoutMs: timeoutMs)
  }

  private init(connection: Connection, address: String, name: String, timeoutMs: Int32) {
    destination = name
    self.timeoutMs = timeoutMs
    self.connection = connection
    self.address = address
    if connection.direct {
      serviceOwner = Connection.directService
    } else if name.hasPrefix(":") {
      serviceOwner = name
    }
  }

  private static func check(_ name: String) throws(OrdoRemoteError) {
    if let problem = busNameProblem(name) { throw OrdoRemoteError(name: DBusErrorName.invalidArgs, message: problem) }
  }

  /// Starts following the service, once, before the first contract is
  /// registered: who owns its name and the epoch of its history.
  private func followOwner() {
    guard !followingOwner else { return }
    followingOwner = true
    watchOwner()
    knownEpoch = try? epoch
  }

  /// Learns who owns the service's name (`GetNameOwner`) and follows its
  /// changes (`NameOwnerChanged` from the bus daemon); nothing to follow
  /// over a direct connection or for a unique name.
  private func watchOwner() {
    guard !destination.hasPrefix(":"), !connection.direct else { return }
    try? connection.addMatch(
      "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(destination)'"
    )
    guard
      let m = DBusMessageRef.methodCall(
        destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "GetNameOwner")
    else { return }
    var w = m.writer()
    w.string(destination)
    // No owner yet (the service is started by activation): the reply to
    // the first call names it.
    guard let reply = try? connection.call(m, timeoutMs: timeoutMs) else { return }
    var rd = reply.reader()
    if reply.signature == "s", let owner = try? rd.string("owner") { serviceOwner = owner }
  }

  deinit { close() }

  /// Closes the connection (the bus removes this client's contracts); it
  /// is not opened again.
  public func close() {
    ended = true
    connection.close()
  }

  /// Whether the connection is lost and being opened again
  /// (``reconnect``): ``process(timeoutMs:)`` tries, and so does each call.
  public var isReconnecting: Bool { lostAtMs != nil && !ended }

  // MARK: A lost connection

  /// Notes a lost connection: the contracts went with it (with
  /// ``reconnect`` they wait to be registered again), and so did the
  /// replies it awaited and the trace subscription.
  private func noteLost() {
    guard lostAtMs == nil, !ended else { return }
    lostAtMs = Connection.nowMs()
    // Its socket is freed now, not at the next connection.
    connection.close(flush: false)
    let gone = registered.values.sorted { $0.order < $1.order }
    registered.removeAll()
    replyHandlers.removeAll()
    traceCallback = nil
    if reconnect {
      for c in gone { c.path = nil }
      away += gone
    } else {
      ended = true
    }
    // Told only when the service was there: one that left was told already.
    toldLost = !followingOwner || serviceOwner == nil
    if !destination.hasPrefix(":") { serviceOwner = nil }
    reopened = false
  }

  /// Opens the lost connection again at its address (without a `guid=`: a
  /// bus daemon or a service started again there has a new one). The
  /// contracts are registered again by the next ``process(timeoutMs:)``.
  private func reopen() -> Bool {
    guard lostAtMs != nil, !ended else { return false }
    let again = addressWithoutGUID(address)
    let c: Connection
    do {
      c = connection.direct ? try Connection(direct: again) : try Connection(address: again)
    } catch {
      if reconnectTimeoutMs > 0, let t = lostAtMs, Connection.nowMs() - t >= Int64(reconnectTimeoutMs) { ended = true }
      return false
    }
    connection = c
    generation += 1
    lostAtMs = nil
    if c.direct { serviceOwner = Connection.directService }
    if followingOwner { watchOwner() }
    reopened = true
    return true
  }

  /// Tells the program about a lost connection and, once it is open
  /// again, registers the contracts again with the service (if it is there
  /// yet; else its `NameOwnerChanged` does) and tells the new owner.
  /// Returns whether it told anything.
  private func resume() -> Bool {
    var told = false
    if !toldLost {
      toldLost = true
      if let cb = onOwnerChange {
        cb(nil)
        told = true
      }
    }
    guard reopened else { return told }
    reopened = false
    guard followingOwner, let owner = serviceOwner else { return told }
    if !away.isEmpty {
      registerAgain()
      told = true
    }
    if let cb = onOwnerChange {
      cb(connection.direct ? address : owner)
      told = true
    }
    return told
  }

  /// This connection's unique name.
  public var uniqueName: String { connection.uniqueName }

  // MARK: Calls

  private func call(_ member: String, interface: String = ordoInterface, _ build: (inout MessageWriter) -> Void) throws(OrdoRemoteError) -> DBusMessageRef {
    guard let m = DBusMessageRef.methodCall(destination: destination, path: ordoObjectPath, interface: interface, member: member) else {
      throw OrdoRemoteError(name: DBusErrorName.dbus, message: "cannot build a \(member) call")
    }
    var w = m.writer()
    w.checked = true
    build(&w)
    if let problem = w.problem { throw OrdoRemoteError(name: DBusErrorName.invalidArgs, message: "\(member): \(problem)") }
    if !delivering && connection.isConnected {
      // The service may have gone since the last call (a direct
      // connection closed), which only a read tells; a call sent there
      // would fail. A callback's call (a writer's Complete) comes right
      // after the read that brought its signal.
      _ = connection.readWrite(timeoutMs: 0)
    }
    if !connection.isConnected {
      // One attempt, without waiting: the contracts come back in process().
      noteLost()
      _ = reopen()
    }
    let reply = try connection.call(m, timeoutMs: timeoutMs)
    if followingOwner, serviceOwner == nil, let s = reply.sender { serviceOwner = s }
    return reply
  }

  private static func bad(_ what: String) -> OrdoRemoteError {
    OrdoRemoteError(name: DBusErrorName.invalidSignature, message: "unexpected reply to \(what)")
  }

  /// Registers an observer contract whose `Notify` signals call `callback`
  /// (from ``process(timeoutMs:)``). With `cache`, each notification's
  /// ``RemoteNotification/cache`` holds the whole read set as of its
  /// transaction (docs/dbus.md, "Consistent reads"; implies
  /// `notifyInitial`; an empty read set is refused). Returns the contract's
  /// object path.
  @discardableResult
  public func register(
    name: String, reads: [String], priority: Int32? = nil, notifyInitial: Bool = false, cache: Bool = false,
    _ callback: @escaping (RemoteNotification) -> Void
  ) throws(OrdoRemoteError) -> String {
    try add(
      ClientContract(
        name: name, reads: reads, writes: [], priority: priority, notifyInitial: notifyInitial, timeoutMs: nil, cache: cache, handler: .observer(callback)))
  }

  /// Registers a writer contract: for each `Notify`, ``process(timeoutMs:)``
  /// calls `body` and answers with a `Complete` carrying the writes it
  /// returns, which join the transaction (all or nothing; see
  /// ``onCompleteError``). The bus waits for the answer up to `timeoutMs`
  /// (nil: the service's default), so keep calling ``process(timeoutMs:)``,
  /// and do not commit from this client while a pass may wait for it (a
  /// `Commit` queues behind the running pass). `cache` as for
  /// ``register(name:reads:priority:notifyInitial:cache:_:)``. Returns the
  /// contract's path.
  @discardableResult
  public func registerWriter(
    name: String, reads: [String], writes: [String], priority: Int32? = nil, notifyInitial: Bool = false,
    timeoutMs: UInt32? = nil, cache: Bool = false, _ body: @escaping (RemoteNotification) -> RemoteWrites
  ) throws(OrdoRemoteError) -> String {
    try add(
      ClientContract(
        name: name, reads: reads, writes: writes, priority: priority, notifyInitial: notifyInitial, timeoutMs: timeoutMs, cache: cache,
        handler: .writer(body)))
  }

  /// Registers `c` for the first time; returns its path.
  private func add(_ c: ClientContract) throws(OrdoRemoteError) -> String {
    followOwner()
    added += 1
    c.order = added
    let path = try register(c, again: false)
    c.firstPath = path
    return path
  }

  /// `Register`s `c` with the service's owner now and files it under its
  /// path. Registered again, a writer is called initially whatever it
  /// asked: what it computes may have missed changes. An observer's
  /// position starts at the last committed transaction: every later one
  /// is either notified or in its next catch-up.
  private func register(_ c: ClientContract, again: Bool) throws(OrdoRemoteError) -> String {
    let r = try call("Register") { w in
      w.string(c.name)
      w.stringArray(c.reads)
      w.stringArray(c.writes)
      w.dict { d in
        if let priority = c.priority { d.entry("priority", int32: priority) }
        if c.notifyInitial || (again && !c.writes.isEmpty) { d.entry("notify-initial", bool: true) }
        if let timeoutMs = c.timeoutMs { d.entry("timeout-ms", uint32: timeoutMs) }
        if c.cache != nil { d.entry("cache", bool: true) }
      }
    }
    guard r.signature == "o" else { throw Self.bad("Register") }
    var rd = r.reader()
    guard let path = try? rd.string("contract") else { throw Self.bad("Register") }
    c.path = path
    registered[path] = c
    if case .observer = c.handler, !again { c.last = (try? transaction) ?? 0 }
    return path
  }

  /// Registers the contracts that are away with the service's new owner and
  /// catches each observer up (SPEC §10): same epoch, `Changes` since its
  /// position; another epoch (or a position past this history), `Snapshot`.
  private func registerAgain() {
    let now = try? epoch
    let sameHistory = now != nil && now == knownEpoch
    knownEpoch = now
    let pending = away
    away = []
    for c in pending {
      do {
        _ = try register(c, again: true)
        guard case .observer(let callback) = c.handler, let path = c.path else { continue }
        if c.cache != nil {
          // Its initial call refills the cache and is the catch-up.
          c.refill = sameHistory ? .changes : .snapshot
          c.covered = nil
          continue
        }
        let patterns = c.reads.isEmpty ? ["**"] : c.reads
        var caughtUp: RemoteNotification?
        if sameHistory, let ch = try? changes(since: c.last, patterns: patterns) {
          c.last = ch.transaction
          let keys = Set(ch.values.keys).union(ch.removed).sorted()
          if !keys.isEmpty { caughtUp = RemoteNotification(contract: path, transaction: ch.transaction, changed: keys, values: ch.values, kind: .changes) }
        } else {
          let s = try snapshot(patterns)
          c.last = s.transaction
          caughtUp = RemoteNotification(
            contract: path, transaction: s.transaction, changed: s.counters.map(\.0).sorted(),
            values: Dictionary(s.values, uniquingKeysWith: { a, _ in a }), kind: .snapshot)
        }
        c.covered = c.last
        if let caughtUp { callback(caughtUp) }
      } catch {
        if let path = c.path, registered[path] === c { registered[path] = nil }
        c.path = nil
        away.append(c)
        onReconnectError?(c.name, error)
      }
    }
  }

  /// Answers a writer's call: applies nothing unless the bus accepts all.
  /// A cached writer's accepted writes enter its cache.
  private func complete(_ c: ClientContract, _ note: RemoteNotification, _ writes: RemoteWrites) {
    do {
      _ = try call("Complete") { w in
        w.objectPath(note.contract)
        w.uint64(note.transaction)
        w.valueDict(writes.set.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        w.stringArray(writes.touch)
        w.stringArray(writes.remove)
      }
      c.cache?.apply(own: writes)
    } catch {
      onCompleteError?(registered[note.contract]?.firstPath ?? note.contract, note.transaction, error)
    }
  }

  /// A cached contract's cache (``RemoteNotification/cache``) and the
  /// transaction it is at, read without a call; the contract is named by
  /// the path its registration returned or by its path now. Nil for a
  /// contract of another client or registered without `cache`.
  public func cache(of path: String) -> (values: [String: Value], transaction: UInt64)? {
    let c = registered[path] ?? registered.values.first { $0.firstPath == path } ?? away.first { $0.firstPath == path }
    return c?.cache.map { ($0.values, $0.transaction) }
  }

  /// Unregisters one of this client's contracts, named by the path its
  /// registration returned or by its path now.
  public func unregister(_ path: String) throws(OrdoRemoteError) {
    if let i = away.firstIndex(where: { $0.firstPath == path }) {
      away.remove(at: i)
      return
    }
    let c = registered[path] ?? registered.values.first { $0.firstPath == path }
    _ = try call("Unregister") { $0.objectPath(c?.path ?? path) }
    if let now = c?.path { registered[now] = nil }
  }

  /// Asks the service for a `Trace` signal per pass touching `patterns`
  /// (`SubscribeTrace`); ``process(timeoutMs:)`` calls `callback` with each,
  /// taken only from the service's current owner.
  public func subscribeTrace(_ patterns: [String], _ callback: @escaping (RemoteTrace) -> Void) throws(OrdoRemoteError) {
    followOwner()
    _ = try call("SubscribeTrace") { $0.stringArray(patterns) }
    traceCallback = callback
  }

  /// Stops the `Trace` signals (`UnsubscribeTrace`).
  public func unsubscribeTrace() throws(OrdoRemoteError) {
    _ = try call("UnsubscribeTrace") { _ in }
    traceCallback = nil
  }

  /// Commits one transaction: sets, then touches, then removes (`k.**`
  /// removes the tree). Returns its id, 0 if nothing changed.
  @discardableResult
  public func commit(set: [(String, Value)] = [], touch: [String] = [], remove: [String] = []) throws(OrdoRemoteError) -> UInt64 {
    let r = try call("Commit") { w in
      w.valueDict(set)
      w.stringArray(touch)
      w.stringArray(remove)
    }
    guard r.signature == "t" else { throw Self.bad("Commit") }
    var rd = r.reader()
    return rd.uint64()
  }

  /// Commits one transaction with options (`CommitWith`, SPEC §15): it
  /// applies only if every keypath of `expect` still has its counter (0:
  /// never changed), else it fails with `dev.ordo.Error.Conflict`
  /// (``OrdoRemoteError/code`` ``OrdoError/Code/conflict``) and nothing is
  /// applied; with `owned`, the values it sets belong to this connection and
  /// are removed, in one transaction, when it closes. Returns its id, 0 if
  /// nothing changed.
  @discardableResult
  public func commit(
    set: [(String, Value)] = [], touch: [String] = [], remove: [String] = [], expect: [(String, UInt64)] = [],
    owned: Bool = false
  ) throws(OrdoRemoteError) -> UInt64 {
    let r = try call("CommitWith") { w in
      w.valueDict(set)
      w.stringArray(touch)
      w.stringArray(remove)
      w.dict { d in
        if !expect.isEmpty { d.entry("expect", "a{st}") { $0.counterDict(Dictionary(expect, uniquingKeysWith: { $1 })) } }
        if owned { d.entry("owned", bool: true) }
      }
    }
    guard r.signature == "t" else { throw Self.bad("CommitWith") }
    var rd = r.reader()
    return rd.uint64()
  }

  /// The owned values among the keypaths matching `patterns` that this
  /// peer may read: keypath and owner (the owning peer's unique name), by
  /// keypath.
  public func owners(_ patterns: [String] = ["**"]) throws(OrdoRemoteError) -> [(keypath: String, owner: String)] {
    let r = try call("Owners") { $0.stringArray(patterns) }
    guard r.signature == "a{ss}" else { throw Self.bad("Owners") }
    var rd = r.reader()
    var out: [(keypath: String, owner: String)] = []
    var d = rd.recurse()
    while !d.atEnd {
      var e = d.recurse()
      d.next()
      guard let k = try? e.string("keypath"), let o = try? e.string("owner") else { throw Self.bad("Owners") }
      out.append((k, o))
    }
    return out
  }

  /// The value and counter of a keypath.
  public func get(_ keypath: String) throws(OrdoRemoteError) -> (value: Value, counter: UInt64) {
    let r = try call("Get") { $0.string(keypath) }
    guard r.signature == "vt" else { throw Self.bad("Get") }
    var rd = r.reader()
    guard let v = try? rd.value("value", maxBytes: Int.max) else { throw Self.bad("Get") }
    return (v, rd.uint64())
  }

  /// Values and counters of the keypaths matching `patterns`, and the last
  /// committed transaction id, read at one moment.
  public func snapshot(_ patterns: [String]) throws(OrdoRemoteError) -> (values: [(String, Value)], counters: [(String, UInt64)], transaction: UInt64) {
    let r = try call("Snapshot") { $0.stringArray(patterns) }
    guard r.signature == "a{sv}a{st}t" else { throw Self.bad("Snapshot") }
    var rd = r.reader()
    var values: [(String, Value)] = []
    var d = rd.recurse()
    rd.next()
    while !d.atEnd {
      var e = d.recurse()
      d.next()
      guard let k = try? e.string("key"), let v = try? e.value("value", maxBytes: Int.max) else { throw Self.bad("Snapshot") }
      values.append((k, v))
    }
    var counters: [(String, UInt64)] = []
    var c = rd.recurse()
    rd.next()
    while !c.atEnd {
      var e = c.recurse()
      c.next()
      guard let k = try? e.string("key") else { throw Self.bad("Snapshot") }
      counters.append((k, e.uint64()))
    }
    return (values, counters, rd.uint64())
  }

  /// What changed after transaction `since` among the keypaths matching
  /// `patterns` (`Changes`, SPEC §10), read at one moment: values, the
  /// keypaths that hold none (removed or touched), their counters, and the
  /// last committed id. `since` after the last committed id is
  /// `dev.ordo.Error.InvalidArgument`: that history belongs to another
  /// ``epoch``.
  public func changes(since: UInt64, patterns: [String]) throws(OrdoRemoteError) -> Changes {
    let r = try call("Changes") { w in
      w.uint64(since)
      w.stringArray(patterns)
    }
    guard r.signature == "a{sv}asa{st}t" else { throw Self.bad("Changes") }
    var rd = r.reader()
    var d = rd.recurse()
    rd.next()
    var values: [String: Value] = [:]
    while !d.atEnd {
      var e = d.recurse()
      d.next()
      guard let k = try? e.string("key"), let v = try? e.value("value", maxBytes: Int.max) else { throw Self.bad("Changes") }
      values[k] = v
    }
    guard let removed = try? rd.stringArray("removed", limit: Int.max) else { throw Self.bad("Changes") }
    var counters: [String: UInt64] = [:]
    var c = rd.recurse()
    rd.next()
    while !c.atEnd {
      var e = c.recurse()
      c.next()
      guard let k = try? e.string("key") else { throw Self.bad("Changes") }
      counters[k] = e.uint64()
    }
    var out = Changes(transaction: rd.uint64())
    out.values = values
    out.removed = Set(removed)
    out.counters = counters
    return out
  }

  /// A property of `dev.ordo.Bus1` (`org.freedesktop.DBus.Properties.Get`).
  private func property(_ name: String, _ signature: String) throws(OrdoRemoteError) -> MessageReader {
    let r = try call("Get", interface: "org.freedesktop.DBus.Properties") { w in
      w.string(ordoInterface)
      w.string(name)
    }
    guard r.signature == "v" else { throw Self.bad("Properties.Get(\(name))") }
    var rd = r.reader()
    let v = rd.recurse()
    var probe = v
    guard probe.currentSignature() == signature else { throw Self.bad("Properties.Get(\(name))") }
    return v
  }

  /// The epoch of the bus's history (property `Epoch`, SPEC §10): transaction
  /// ids, counters and changed-at compare only within one epoch.
  public var epoch: String {
    get throws(OrdoRemoteError) {
      var v = try property("Epoch", "s")
      guard let e = try? v.string("Epoch") else { throw Self.bad("Properties.Get(Epoch)") }
      return e
    }
  }

  /// The schema the service enforces (property `Schema`, SPEC §14), nil
  /// when it has none.
  public var schema: Schema? {
    get throws(OrdoRemoteError) {
      var v = try property("Schema", "s")
      guard let text = try? v.string("Schema") else { throw Self.bad("Properties.Get(Schema)") }
      if text.isEmpty { return nil }
      do { return try Schema(json: text) } catch {
        throw OrdoRemoteError(name: DBusErrorName.ordo(.schema), message: "the service's Schema property does not validate: \(error.message)")
      }
    }
  }

  /// The last committed transaction id (property `Transaction`).
  public var transaction: UInt64 {
    get throws(OrdoRemoteError) {
      var v = try property("Transaction", "t")
      return v.uint64()
    }
  }

  /// Whether the connection to the bus daemon is open.
  public var isConnected: Bool { connection.isConnected }

  /// The connection's socket, for a program's own poll loop beside
  /// ``process(timeoutMs:)``; nil when the connection is closed (while it
  /// is opened again, ``isReconnecting``, call `process` every 100 ms or
  /// so). A call reads the signals that come before its reply into the
  /// client's queue, where the socket no longer shows them: call
  /// `process(timeoutMs: 0)` before each wait on the socket (`process`
  /// leaves nothing queued; the C client's `ordo_client_fd` wakes for them
  /// by itself).
  public var socket: Int32? { connection.unixFd }

  /// One dictionary per contract, in pass order (see `Contracts` in docs/dbus.md).
  public func contracts() throws(OrdoRemoteError) -> [[(String, RemoteField)]] {
    let r = try call("Contracts") { _ in }
    guard r.signature == "aa{sv}" else { throw Self.bad("Contracts") }
    var rd = r.reader()
    var a = rd.recurse()
    var out: [[(String, RemoteField)]] = []
    while !a.atEnd {
      out.append(Self.fields(&a))
    }
    return out
  }

  /// The dependency graph in Graphviz DOT.
  public func graph() throws(OrdoRemoteError) -> String {
    let r = try call("Graph") { _ in }
    var rd = r.reader()
    guard r.signature == "s", let s = try? rd.string("dot") else { throw Self.bad("Graph") }
    return s
  }

  /// The service's counters.
  public func stats() throws(OrdoRemoteError) -> [(String, RemoteField)] {
    let r = try call("Stats") { _ in }
    guard r.signature == "a{sv}" else { throw Self.bad("Stats") }
    var rd = r.reader()
    return Self.fields(&rd)
  }

  /// Reads the `a{sv}` at the reader's position.
  private static func fields(_ rd: inout MessageReader) -> [(String, RemoteField)] {
    var d = rd.recurse()
    rd.next()
    var out: [(String, RemoteField)] = []
    while !d.atEnd {
      var e = d.recurse()
      d.next()
      guard let k = try? e.string("key") else { continue }
      var v = e.recurse()
      let sig = v.currentSignature()
      let f: RemoteField
      switch sig {
      case "s", "o": f = (try? v.string("v")).map { .string($0) } ?? .other(sig)
      case "i": f = .int(Int64(v.int32()))
      case "x": f = .int(v.int64())
      case "u": f = .uint(UInt64(v.uint32()))
      case "t": f = .uint(v.uint64())
      case "b": f = .bool(v.bool())
      case "d": f = .double(v.double())
      case "as":
        var a = v.recurse()
        var list: [String] = []
        while !a.atEnd, let s = try? a.string("item") { list.append(s) }
        f = .strings(list)
      default: f = .other(sig)
      }
      out.append((k, f))
    }
    return out
  }

  // MARK: Notifications

  /// Decodes a `Trace(t b as aa{sv} t)` signal; nil when it is malformed.
  static func trace(_ m: DBusMessageRef) -> RemoteTrace? {
    guard m.signature == "tbasaa{sv}t" else { return nil }
    var r = m.reader()
    let txn = r.uint64()
    let committed = r.bool()
    guard let changed = try? r.stringArray("changed", limit: Int.max) else { return nil }
    var a = r.recurse()
    r.next()
    var steps: [RemoteTraceStep] = []
    while !a.atEnd {
      let f = Dictionary(fields(&a), uniquingKeysWith: { x, _ in x })
      func str(_ k: String) -> String? { if case .string(let s) = f[k] { s } else { nil } }
      func list(_ k: String) -> [String] { if case .strings(let s) = f[k] { s } else { [] } }
      func num(_ k: String) -> UInt64 { if case .uint(let x) = f[k] { x } else { 0 } }
      func flag(_ k: String) -> Bool { if case .bool(let b) = f[k] { b } else { false } }
      steps.append(
        RemoteTraceStep(
          contract: str("contract") ?? "", name: str("name") ?? "", transaction: num("txn"), outcome: str("outcome") ?? "",
          initial: flag("initial"), because: list("because"), writes: list("writes"), refused: list("refused"),
          failure: str("failure"), durationNS: num("duration-ns"), truncated: flag("truncated")))
    }
    return RemoteTrace(transaction: txn, committed: committed, changed: changed, steps: steps, durationNS: r.uint64())
  }

  /// Waits up to `timeoutMs` (-1: forever) for incoming signals and calls
  /// the callbacks of the `Notify` signals received. A lost connection is
  /// opened again meanwhile (``reconnect``): the contracts are registered
  /// again and caught up, and ``onOwnerChange`` is told. Returns false once
  /// the client is closed, or the connection is lost for good (without
  /// ``reconnect``, or past ``reconnectTimeoutMs``). It returns with every
  /// signal it read delivered: a loop that waits on ``socket`` next misses
  /// nothing.
  @discardableResult
  public func process(timeoutMs: Int32) -> Bool {
    let deadline = timeoutMs < 0 ? Int64.max : Connection.nowMs() + Int64(timeoutMs)
    while true {
      if !connection.isConnected { noteLost() }
      if resume() {
        // The calls that brought the contracts back (and any call from
        // onOwnerChange) may have read signals, such as a re-registered
        // contract's initial call: they wait in libdbus' queue, where the
        // socket no longer shows them, so they are delivered now.
        _ = deliver()
        return true
      }
      if ended { return false }
      if lostAtMs != nil {
        if reopen() { continue }
        if ended { return false }
        let now = Connection.nowMs()
        if now >= deadline { return true }
        usleep(UInt32(min(100, deadline - now)) * 1000)
        continue
      }
      if deliver() { break }
      let left = deadline == Int64.max ? -1 : Int32(clamping: max(0, deadline - Connection.nowMs()))
      _ = connection.readWrite(timeoutMs: left)
      if deliver() || (left == 0 && connection.isConnected) { break }
    }
    // A loss found by the last read (after the signals read with it) is
    // noted now: ``isReconnecting`` tells the program's loop to come back.
    if !connection.isConnected { noteLost() }
    return true
  }

  func deliver() -> Bool {
    let outer = delivering
    delivering = true
    defer { delivering = outer }
    var any = false
    while let m = connection.popMessage() {
      guard m.type == ORDO_DBUS_MESSAGE_TYPE_SIGNAL else {
        takeReply(m)
        continue
      }
      // The header fields compared where libdbus holds them, each read once.
      let member = dbus_message_get_member(m.raw)
      let sender = dbus_message_get_sender(m.raw)
      if same(member, "NameOwnerChanged"), same(sender, "org.freedesktop.DBus"), same(dbus_message_get_signature(m.raw), "sss") {
        var r = m.reader()
        if let name = try? r.string("name"), name == destination, let _ = try? r.string("old"), let new = try? r.string("new") {
          let owner = new.isEmpty ? nil : new
          let changed = owner != serviceOwner
          if changed {
            serviceOwner = owner
            // The old owner's contracts (and trace subscription) went with it.
            let gone = registered.values.sorted { $0.order < $1.order }
            registered.removeAll()
            traceCallback = nil
            if reconnect {
              for c in gone { c.path = nil }
              away += gone
            }
          }
          // A call's reply may have named the new owner before this signal.
          if owner != nil, !away.isEmpty {
            registerAgain()
            any = true
          }
          if changed, let cb = onOwnerChange {
            cb(owner)
            any = true
          }
        }
        continue
      }
      let interface = dbus_message_get_interface(m.raw)
      if same(member, "Trace"), same(interface, ordoInterface), let cb = traceCallback, let owner = serviceOwner, same(sender, owner),
        same(dbus_message_get_path(m.raw), ordoObjectPath), let t = Self.trace(m)
      {
        cb(t)
        any = true
        continue
      }
      // Only the service's current owner sends real Notify signals.
      guard same(member, "Notify"), same(interface, ordoInterface), same(dbus_message_get_signature(m.raw), "otasa{sv}"),
        let owner = serviceOwner, same(sender, owner), same(dbus_message_get_path(m.raw), ordoObjectPath)
      else { continue }
      var r = m.reader()
      guard let path = try? r.string("contract") else { continue }
      let txn = r.uint64()
      guard let changed = try? r.stringArray("changed", limit: Int.max) else { continue }
      var values: [String: Value] = [:]
      var d = r.recurse()
      while !d.atEnd {
        var e = d.recurse()
        d.next()
        if let k = try? e.string("key"), let v = try? e.value("value", maxBytes: Int.max) { values[k] = v }
      }
      var note = RemoteNotification(contract: path, transaction: txn, changed: changed, values: values)
      guard let c = registered[path] else { continue }
      if case .observer = c.handler, let covered = c.covered, txn <= covered { continue }
      if c.cache != nil {
        guard let filled = fill(c, note) else { continue }
        note = filled
      }
      switch c.handler {
      case .observer(let callback):
        c.last = max(c.last, note.transaction)
        callback(note)
      case .writer(let body):
        complete(c, note, body(note))
      }
      any = true
    }
    return any
  }

  /// A cached contract's notification with its cache brought to the
  /// notified transaction (docs/dbus.md, "Consistent reads"); nil when
  /// there is nothing to deliver: a catch-up that changed nothing.
  private func fill(_ c: ClientContract, _ received: RemoteNotification) -> RemoteNotification? {
    // Taken out while it changes, so that its values are not copied.
    guard var cache = c.cache else { return received }
    c.cache = nil
    defer { c.cache = cache }
    var note = received
    if note.changed == ["**"] {
      // Too large for one Notify, and so for one Snapshot: the read set
      // read again one pattern at a time, brought to one transaction by a
      // `Changes` since the earliest read when they differ, and delivered
      // as a catch-up. A pattern whose values alone are too large is left
      // out.
      var values: [String: Value] = [:]
      var earliest = UInt64.max
      var transaction = note.transaction
      for p in c.reads {
        guard let s = try? snapshot([p]) else { continue }
        for (k, v) in s.values { values[k] = v }
        earliest = min(earliest, s.transaction)
        transaction = max(transaction, s.transaction)
      }
      if earliest < transaction, let ch = try? changes(since: earliest, patterns: c.reads) {
        for k in ch.removed { values[k] = nil }
        values.merge(ch.values) { _, v in v }
        transaction = ch.transaction
      }
      c.refill = nil
      note = RemoteNotification(contract: note.contract, transaction: transaction, changed: cache.replace(with: values), values: values, kind: .snapshot)
    } else if note.changed.isEmpty {
      let differ = cache.replace(with: note.values)
      if let kind = c.refill {
        c.refill = nil
        guard kind == .snapshot || !differ.isEmpty else { return nil }
        note.kind = kind
        note.changed = differ
      }
    } else {
      cache.apply(changed: note.changed, values: note.values)
    }
    cache.transaction = note.transaction
    note.cache = cache.values
    return note
  }
}
