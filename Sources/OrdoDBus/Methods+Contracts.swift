// The methods that manage remote contracts: `Register`, `Unregister` and a
// writer's `Complete`.
import CDBus
import Ordo

extension DBusService {
  /// `Register(s name, as reads, as writes, a{sv} options) → o`: a remote
  /// contract, within the limits and the caller's rights; its `Notify`
  /// signals go to the caller only.
  func register(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
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
    var cache = false
    try readOptions(&r, "Register", ["priority": "i", "notify-initial": "b", "timeout-ms": "u", "cache": "b"]) { key, v throws(OrdoServiceError) in
      switch key {
      case "priority":
        priority = v.int32()
      case "notify-initial":
        if v.bool() { flags.insert(.notifyInitial) }
      case "timeout-ms":
        timeoutMs = v.uint32()
        guard timeoutMs > 0 else { throw .invalidArgs("Register: option \"timeout-ms\" must be at least 1") }
        guard timeoutMs <= limits.maxWriterTimeoutMs else {
          throw .ordo(OrdoError(.limit, "Register: timeout-ms \(timeoutMs) is more than \(limits.maxWriterTimeoutMs) (limit max-writer-timeout-ms)"))
        }
      case "cache":
        cache = v.bool()
      default:
        break
      }
    }
    // A cache starts from the initial call's values: the whole read set.
    if cache {
      guard !reads.isEmpty else {
        throw .ordo(OrdoError(.invalidArgument, "Register: option \"cache\" needs a read set; contract \"\(name)\" reads nothing (an every-transaction contract)"))
      }
      flags.insert(.notifyInitial)
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
    let cached = cache
    let box = LazyRemoteContract { id in RemoteContract(id: id, name: name, peer: peer, timeoutMs: writer ? timeout : nil, everyTransaction: reads.isEmpty, cache: cached) }
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
    // A writer called initially was added when its path was sent.
    if initialRegister?.replied != true { remote.add(record) }
    let path = ordoContractPathPrefix + String(handle.id)
    log(.info, "\(sender) registered contract \(handle.id) \"\(name)\" reads [\(reads.joined(separator: ", "))]\(writer ? " writes [\(writes.joined(separator: ", "))] timeout \(timeoutMs) ms" : "")\(priority.map { " priority \($0)" } ?? "")")
    if initialRegister?.replied == true { return nil }
    return m.methodReturn { $0.objectPath(path) }
  }

  func contractID(_ path: String) -> ContractID? {
    guard path.hasPrefix(ordoContractPathPrefix) else { return nil }
    let digits = path.dropFirst(ordoContractPathPrefix.count)
    // Only the paths the service hands out: no leading zero (…/0009 is not …/9).
    guard !digits.isEmpty, digits.count <= 20, digits.first != "0", digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
    return ContractID(digits)
  }

  /// The remote contract at `path` that `sender` registered, or the error.
  func ownContract(_ path: String, _ sender: String, doing what: String) throws(OrdoServiceError) -> RemoteContract {
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

  /// `Unregister(o contract)`: only by the peer that registered it.
  func unregister(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
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


  /// `Complete(o contract, t txn, a{sv} set, as touch, as remove)`: a
  /// writer's answer to the call the pass awaits; the writes are applied
  /// (all or nothing) by the awaiting pass, which then sends the reply.
  func complete(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
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
      if slot.post(a, .refused("\(error.name): \(error.message)")) { statistics.completesRefused.add(1, ordering: .relaxed) }
      throw error
    }
    guard slot.post(a, .writes(batch, c.m)) else {
      throw .other(name: DBusErrorName.stale, message: "Complete of \(path) for transaction \(txn) came after its wait ended")
    }
    // The reply is sent once the writes are applied (or refused).
    return nil
  }
}

/// The remote contract record a contract's callback uses: made from its id
/// on first use (an initial call runs inside `Bus.register`, before the id
/// is returned), then kept. Any thread.
private final class LazyRemoteContract: @unchecked Sendable {
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
