// The methods that describe the service: `Contracts`, `Graph`, `Stats` and
// the properties of `dev.ordo.Bus1` (`Transaction`, `Version`, `Epoch`,
// `Schema`).
import CDBus
import Ordo

extension DBusService {
  /// `Graph() → s`: the dependency graph in Graphviz DOT.
  func graphReply(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    let dot = bus.graph()
    guard dot.utf8.count <= limits.maxMessageBytes else {
      throw .ordo(OrdoError(.limit, "the graph is \(dot.utf8.count) bytes, more than max-message-bytes (\(limits.maxMessageBytes))"))
    }
    return m.methodReturn { $0.string(dot) }
  }

  /// `Contracts() → aa{sv}`: one dictionary per contract, in pass order.
  func contractsReply(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
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
            if record?.cache == true { d.entry("cache", bool: true) }
          }
        }
      }
    }
  }

  /// `Stats() → a{sv}`: the bus's, the service's and the connection's
  /// counters.
  func writeStats(_ d: inout MessageWriter) {
    let s = bus.statistics
    d.entry("contracts", uint64: UInt64(s.contracts))
    d.entry("remote-contracts", uint64: UInt64(remote.byID.count))
    d.entry("peers", uint64: UInt64(remote.peersWithContracts))
    d.entry("transactions", uint64: s.transactions)
    d.entry("notifications", uint64: s.notifications)
    d.entry("notify-sent", uint64: statistics.notifySent.load(ordering: .relaxed))
    d.entry("notify-dropped", uint64: link.dropped)
    d.entry("notify-truncated", uint64: statistics.notifyTruncated.load(ordering: .relaxed))
    d.entry("failures", uint64: s.failures)
    d.entry("timeouts", uint64: statistics.timeouts.load(ordering: .relaxed))
    d.entry("writer-calls", uint64: statistics.writerCalls.load(ordering: .relaxed))
    d.entry("writers-skipped", uint64: statistics.writersSkipped.load(ordering: .relaxed))
    d.entry("suspensions", uint64: statistics.suspensions.load(ordering: .relaxed))
    d.entry("resumes", uint64: statistics.resumes.load(ordering: .relaxed))
    d.entry("completes", uint64: statistics.completes.load(ordering: .relaxed))
    d.entry("completes-refused", uint64: statistics.completesRefused.load(ordering: .relaxed))
    d.entry("access-denied", uint64: statistics.accessDenied.load(ordering: .relaxed))
    d.entry("queued", uint64: statistics.queued.load(ordering: .relaxed))
    d.entry("queued-now", uint64: UInt64(deferred.count))
    d.entry("rollbacks", uint64: s.rollbacks)
    d.entry("conflicts", uint64: s.conflicts)
    d.entry("values", uint64: UInt64(s.values))
    d.entry("owned-values", uint64: UInt64(s.ownedValues))
    d.entry("method-calls", uint64: statistics.methodCalls.load(ordering: .relaxed))
    d.entry("error-replies", uint64: statistics.errorReplies.load(ordering: .relaxed))
    d.entry("commits", uint64: statistics.commits.load(ordering: .relaxed))
    d.entry("peers-left", uint64: statistics.peersLeft.load(ordering: .relaxed))
    d.entry("syncs", uint64: hold.syncs.load(ordering: .relaxed))
    d.entry("sync-failures", uint64: hold.syncFailures.load(ordering: .relaxed))
    d.entry("storage-errors", uint64: hold.storageErrors.load(ordering: .relaxed))
    d.entry("notify-lost", uint64: hold.notifyLost.load(ordering: .relaxed))
    d.entry("trace-subscribers", uint64: UInt64(traces.count))
    d.entry("trace-sent", uint64: traces.sent.load(ordering: .relaxed))
    d.entry("trace-truncated", uint64: traces.truncated.load(ordering: .relaxed))
  }

  /// Reads the interface argument of a Properties call: `dev.ordo.Bus1` or
  /// empty.
  func propertyInterface(_ r: inout MessageReader) throws(OrdoServiceError) {
    let i: String
    do { i = try r.string("interface_name") } catch { throw .invalidArgs(error.message) }
    guard i == ordoInterface || i.isEmpty else {
      throw .other(name: DBusErrorName.unknownInterface, message: "\(ordoObjectPath) has no properties in interface \(i)")
    }
  }

  /// `Properties.Get(s interface, s property) → v`.
  func propertyGet(_ m: DBusMessageRef, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
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
    case "Schema":
      let s = schemaText
      return m.methodReturn { $0.container(ORDO_DBUS_TYPE_VARIANT, "s") { $0.string(s) } }
    default:
      throw Self.unknownProperty(p)
    }
  }

  /// The properties of `dev.ordo.Bus1` (all read-only).
  static let propertyNames = ["Transaction", "Version", "Epoch", "Schema"]

  /// The `Schema` property: the bus's schema as canonical JSON text, ""
  /// without one.
  var schemaText: String { bus.schema?.json ?? "" }

  /// The error for a property `dev.ordo.Bus1` does not have.
  static func unknownProperty(_ p: String) -> OrdoServiceError {
    .other(name: DBusErrorName.unknownProperty, message: "\(ordoInterface) has no property \(p); it has \(propertyNames.joined(separator: ", "))")
  }

  /// Every property is read-only; an unknown interface or property gets
  /// the error `Get` gives for it.
  func propertySet(_ m: DBusMessageRef) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = m.reader()
    try propertyInterface(&r)
    let p: String
    do { p = try r.string("property_name") } catch { throw .invalidArgs(error.message) }
    guard Self.propertyNames.contains(p) else { throw Self.unknownProperty(p) }
    throw .other(name: DBusErrorName.propertyReadOnly, message: "the properties of \(ordoInterface) are read-only (\(p))")
  }

  /// `Properties.GetAll(s interface) → a{sv}`.
  func propertyGetAll(_ m: DBusMessageRef, _ sender: String) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = m.reader()
    try propertyInterface(&r)
    let t = transactionID(for: sender)
    let e = bus.epoch
    let s = schemaText
    return m.methodReturn { w in
      w.dict { d in
        d.entry("Transaction", uint64: t)
        d.entry("Version", string: ordoDBusVersion)
        d.entry("Epoch", string: e)
        d.entry("Schema", string: s)
      }
    }
  }
}
