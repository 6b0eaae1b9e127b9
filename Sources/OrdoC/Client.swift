// The C client of a served bus (include/ordo.h "C client", SPEC §15): the C
// face of OrdoDBus.OrdoClient. A client's contracts are numbered by the
// client; their callbacks run from ordo_client_dispatch, which hands the
// signals OrdoClient reads to them. A writer's callback fills the batch of
// its contract (ClientWrites.swift), sent as its Complete when the callback
// returns.
//
// ordo_client_fd is an epoll set of the connection's socket, an eventfd and
// a timerfd. A call that blocks for its reply may read signals into
// libdbus' queue, where the socket no longer shows them, so every call made
// outside ordo_client_dispatch writes the eventfd and the program's loop
// comes back to dispatch them. While a lost connection is opened again
// there is no socket to poll: the timerfd brings the loop back every
// 100 ms to try.

import CDBus
import COrdo
import Ordo
import OrdoDBus

#if canImport(Glibc)
import Glibc
#endif

/// A contract registered through ordo_client_register.
final class CClientContract {
  let id: UInt64
  let name: String
  let callback: ordo_client_callback
  let userData: UnsafeMutableRawPointer?
  let destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
  /// A writer's answer; nil for an observer.
  let answer: CWrites?
  /// Its object path on the service.
  var path = ""
  /// False once unregistered (or its client freed): not called again.
  var live = true
  var running = false

  init(id: UInt64, name: String, spec: ordo_client_contract_spec, callback: ordo_client_callback, writes: [Pattern]) {
    self.id = id
    self.name = name
    self.callback = callback
    userData = spec.user_data
    destroy = spec.destroy
    answer = writes.isEmpty ? nil : CWrites(writer: (name, writes))
  }
}

/// What an `ordo_client *` points to.
final class CClient {
  let remote: OrdoClient
  /// The epoll set the program polls (ordo_client_fd).
  let fd: Int32
  /// Written by calls outside dispatch (signals may wait in libdbus' queue).
  private let wakefd: Int32
  /// Whether wakefd was written since the last dispatch (read it then).
  private var woken = false
  /// Readable when a lost connection is to be tried again; armed while it
  /// is being opened again.
  private let retryfd: Int32
  private var retryArmed = false
  /// The socket in the epoll set (-1: none) and the connection it is
  /// of (``OrdoClient/generation``).
  private var polledSocket: Int32 = -1
  private var polledGeneration = -1
  private(set) var contracts: [UInt64: CClientContract] = [:]
  private var byPath: [String: CClientContract] = [:]
  private var nextID: UInt64 = 1
  private var dispatching = false
  /// How many writer callbacks are running (nested calls included).
  private var writersRunning = 0
  var completeError: (ordo_client_complete_error_callback, UnsafeMutableRawPointer?)?
  var ownerChange: (ordo_client_owner_callback, UnsafeMutableRawPointer?)?

  init(address: String?, name: String, direct: Bool = false) throws(OrdoError) {
    do {
      if direct, let address {
        remote = try OrdoClient(direct: address, name: name)
      } else {
        remote = try OrdoClient(address: address, name: name)
      }
    } catch {
      throw clientError(error)
    }
    fd = ordo_epoll_create()
    wakefd = ordo_eventfd()
    retryfd = ordo_timerfd()
    guard fd >= 0, wakefd >= 0, retryfd >= 0 else {
      let errno = ordo_errno()
      for f in [fd, wakefd, retryfd] where f >= 0 { close(f) }
      remote.close()
      throw OrdoError(.dbus, "cannot create the client's epoll set, eventfd and timerfd: errno \(errno)")
    }
    _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_ADD, wakefd, ORDO_EPOLLIN)
    _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_ADD, retryfd, ORDO_EPOLLIN)
    followSocket()
    remote.onCompleteError = { [unowned self] path, txn, error in self.refused(path, txn, error) }
    remote.onOwnerChange = { [unowned self] owner in self.ownerChanged(owner) }
  }

  /// The client behind a handle, or INVALID_ARGUMENT for NULL.
  static func from(_ handle: OpaquePointer?) throws(OrdoError) -> CClient {
    guard let handle else { throw invalid("client is NULL") }
    return Unmanaged<CClient>.fromOpaque(UnsafeRawPointer(handle)).takeUnretainedValue()
  }

  var handle: OpaquePointer { OpaquePointer(Unmanaged.passUnretained(self).toOpaque()) }

  /// Puts the connection's current socket in the epoll set; while a lost
  /// connection is opened again, arms the timerfd instead.
  private func followSocket() {
    if remote.isReconnecting {
      _ = ordo_timerfd_arm(retryfd, 100)
      retryArmed = true
    } else if retryArmed {
      // Disarmed (which also clears an expiry not read yet).
      _ = ordo_timerfd_arm(retryfd, 0)
      retryArmed = false
    }
    let s = remote.socket ?? -1
    guard s != polledSocket || remote.generation != polledGeneration else { return }
    // A closed socket left the set by itself; its number may be the new one's.
    if polledSocket >= 0 { _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_DEL, polledSocket, 0) }
    if s >= 0 { _ = ordo_epoll_ctl(fd, ORDO_EPOLL_CTL_ADD, s, ORDO_EPOLLIN) }
    polledSocket = s
    polledGeneration = remote.generation
  }

  /// Closes the connection and ends every contract (ordo_client_free).
  func disconnect() {
    remote.close()
    endAll()
    close(fd)
    close(wakefd)
    close(retryfd)
  }

  // MARK: Calls

  /// Runs a call of the remote client, its error as the C status; outside
  /// dispatch, wakes the fd for the signals the call may have queued.
  func call<T>(_ body: (OrdoClient) throws(OrdoRemoteError) -> T) throws(OrdoError) -> T {
    defer { if !dispatching { wake() } }
    do {
      return try body(remote)
    } catch {
      throw clientError(error)
    }
  }

  private func wake() {
    guard !woken else { return }
    woken = true
    var one: UInt64 = 1
    _ = withUnsafePointer(to: &one) { write(wakefd, $0, 8) }
  }

  /// Commits a batch; refused from a writer's callback, whose pass waits
  /// for its answer and would not run the commit before it.
  func commit(_ w: CWrites) throws(OrdoError) -> UInt64 {
    guard w.writer == nil else { throw invalid("the writes of a notification are a writer's answer, not a commit") }
    guard writersRunning == 0 else {
      throw invalid("ordo_client_commit from a writer's callback: the service's pass waits for this writer's answer")
    }
    guard w.expect.isEmpty && !w.owned else {
      return try call { (r) throws(OrdoRemoteError) in
        try r.commit(set: w.sets, touch: w.touches, remove: w.removals, expect: w.expect, owned: w.owned)
      }
    }
    return try call { (r) throws(OrdoRemoteError) in try r.commit(set: w.sets, touch: w.touches, remove: w.removals) }
  }

  /// Waits up to `timeoutMs` for signals and delivers them.
  func dispatch(timeoutMs: Int32) throws(OrdoError) {
    guard !dispatching else { throw invalid("ordo_client_dispatch from a callback of the same client") }
    var drained: UInt64 = 0
    if woken {
      woken = false
      _ = withUnsafeMutablePointer(to: &drained) { read(wakefd, $0, 8) }
    }
    if retryArmed { _ = withUnsafeMutablePointer(to: &drained) { read(retryfd, $0, 8) } }
    dispatching = true
    let open = remote.process(timeoutMs: timeoutMs < 0 ? -1 : timeoutMs)
    dispatching = false
    followSocket()
    guard open else { throw OrdoError(.dbus, "the connection to the service is closed (lost, and not opened again)") }
  }

  // MARK: Contracts

  func register(_ s: ordo_client_contract_spec) throws(OrdoError) -> UInt64 {
    let name = try stringArg(s.name, "spec->name")
    guard let callback = s.callback else { throw invalid("contract \"\(name)\": spec->callback is NULL") }
    let unknown = s.flags & ~(UInt32(ORDO_NOTIFY_INITIAL) | UInt32(ORDO_CLIENT_CACHE))
    guard unknown == 0 else { throw invalid("contract \"\(name)\": unknown flags 0x\(String(unknown, radix: 16)) in spec->flags") }
    let reads = try stringArray(s.reads, s.n_reads, "reads", code: .invalidKeypath)
    let writes = try stringArray(s.writes, s.n_writes, "writes", code: .invalidKeypath)
    var patterns: [Pattern] = []
    for w in writes { patterns.append(try Pattern(w)) }
    if writes.isEmpty && s.timeout_ms != 0 {
      throw invalid("contract \"\(name)\": spec->timeout_ms is \(s.timeout_ms) but the contract has no writes (an observer is not waited for)")
    }
    let priority = s.priority == Int32.min /* ORDO_NO_PRIORITY */ ? nil : s.priority
    let notifyInitial = s.flags & UInt32(ORDO_NOTIFY_INITIAL) != 0
    let cache = s.flags & UInt32(ORDO_CLIENT_CACHE) != 0
    let c = CClientContract(id: nextID, name: name, spec: s, callback: callback, writes: patterns)
    c.path = try call { (r) throws(OrdoRemoteError) in
      if let answer = c.answer {
        try r.registerWriter(
          name: name, reads: reads, writes: writes, priority: priority, notifyInitial: notifyInitial,
          timeoutMs: s.timeout_ms == 0 ? nil : s.timeout_ms, cache: cache
        ) { [unowned self] note in
          self.invoke(c, note)
          return answer.remoteWrites
        }
      } else {
        try r.register(name: name, reads: reads, priority: priority, notifyInitial: notifyInitial, cache: cache) { [unowned self] note in
          self.invoke(c, note)
        }
      }
    }
    nextID += 1
    contracts[c.id] = c
    byPath[c.path] = c
    return c.id
  }

  func unregister(_ id: UInt64) throws(OrdoError) {
    guard let c = contracts.removeValue(forKey: id) else { throw OrdoError(.notFound, "this client has no contract \(id)") }
    byPath[c.path] = nil
    defer { end(c) }
    do {
      try call { (r) throws(OrdoRemoteError) in try r.unregister(c.path) }
    } catch {
      throw OrdoError(.dbus, "contract \"\(c.name)\" is forgotten here, but the service did not confirm its removal: \(error.message)")
    }
  }

  /// Forgets every contract and ends each, in registration order.
  private func endAll() {
    let all = contracts.values.sorted { $0.id < $1.id }
    contracts.removeAll()
    byPath.removeAll()
    for c in all { end(c) }
  }

  /// Marks a contract gone and calls its destroy, unless its callback runs
  /// (then `invoke` calls it when the callback returns).
  private func end(_ c: CClientContract) {
    c.live = false
    if !c.running { c.destroy?(c.userData) }
  }

  /// Calls a contract's callback with a notification (and, for a writer,
  /// its batch open during the call).
  private func invoke(_ c: CClientContract, _ note: RemoteNotification) {
    guard c.live else {
      c.answer?.clear()
      return
    }
    c.running = true
    if let answer = c.answer {
      answer.clear()
      answer.open = true
      writersRunning += 1
    }
    withNotification(note, contract: c.id, writes: c.answer?.handle) { cnote in c.callback(handle, cnote, c.userData) }
    if let answer = c.answer {
      answer.open = false
      writersRunning -= 1
    }
    c.running = false
    if !c.live {
      c.answer?.clear()
      c.destroy?(c.userData)
    }
  }

  /// The service's name changed owner. Without reconnection the contracts
  /// went with the old owner (OrdoClient forgot them): they end here too.
  private func ownerChanged(_ owner: String?) {
    if !remote.reconnect { endAll() }
    guard let (callback, userData) = ownerChange else { return }
    if let owner { owner.withCString { callback(handle, $0, userData) } } else { callback(handle, nil, userData) }
  }

  /// A refused Complete, told to the program's callback.
  private func refused(_ path: String, _ txn: UInt64, _ error: OrdoRemoteError) {
    guard let (callback, userData) = completeError, let c = byPath[path] else { return }
    let e = clientError(error)
    e.message.withCString { callback(handle, c.id, txn, status(e.code), $0, userData) }
  }
}

/// The C status and message of an error of the service or of the connection.
func clientError(_ e: OrdoRemoteError) -> OrdoError {
  if let code = e.code { return OrdoError(code, e.description) }
  if e.name == DBusErrorName.invalidArgs { return OrdoError(.invalidArgument, e.description) }
  return OrdoError(.dbus, e.description)
}

/// Calls `body` with the C view of a notification: one block holding the
/// changed keypaths, their values and the strings, freed after the call.
private func withNotification(
  _ note: RemoteNotification, contract: UInt64, writes: OpaquePointer?, _ body: (UnsafePointer<ordo_client_notification>) -> Void
) {
  let n = note.changed.count
  let values = note.changed.map { note.values[$0] }
  let slot = MemoryLayout<UnsafeRawPointer?>.stride
  let valueStride = MemoryLayout<ordo_value>.stride
  // Layout: the ordo_values, changed[n + 1], values[n], then the bytes.
  let structs = values.count * valueStride
  let pointers = structs + (2 * n + 1) * slot
  let text = note.changed.reduce(0) { $0 + $1.utf8.count + 1 } + values.reduce(0) { $0 + ($1.map(payloadSize) ?? 0) }
  guard let block = malloc(max(pointers + text, 1)) else { fatalError("ordo: out of memory allocating \(pointers + text) bytes") }
  defer { free(block) }
  let changedArray = (block + structs).bindMemory(to: UnsafePointer<CChar>?.self, capacity: n + 1)
  let valueArray = (block + structs + (n + 1) * slot).bindMemory(to: UnsafePointer<ordo_value>?.self, capacity: max(n, 1))
  var data = block + pointers
  for (i, k) in note.changed.enumerated() {
    changedArray[i] = UnsafePointer(data.assumingMemoryBound(to: CChar.self))
    data = storeCString(k, at: data)
    if let v = values[i] {
      let p = (block + i * valueStride).bindMemory(to: ordo_value.self, capacity: 1)
      data = store(v, at: p, payload: data)
      valueArray[i] = UnsafePointer(p)
    } else {
      valueArray[i] = nil
    }
  }
  changedArray[n] = nil
  var cnote = ordo_client_notification(
    txn: note.transaction, contract: contract, changed: changedArray, n_changed: n, values: valueArray, writes: writes,
    kind: kind(note.kind))
  body(&cnote)
}

/// The bytes a value's payload takes after its ordo_value: a string with
/// its NUL, or the bytes.
private func payloadSize(_ v: Value) -> Int {
  switch v {
  case .string(let s): s.utf8.count + 1
  case .bytes(let b): b.count
  case .bool, .int64, .double: 0
  }
}

/// Copies `s` with a NUL to `at`; returns the byte after it.
private func storeCString(_ s: String, at: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
  var s = s
  let n = s.withUTF8 { u in
    if let src = u.baseAddress { at.copyMemory(from: src, byteCount: u.count) }
    return u.count
  }
  at.storeBytes(of: 0, toByteOffset: n, as: UInt8.self)
  return at + n + 1
}

/// Writes the C view of `v` to `slot`, its string or bytes copied to
/// `payload`; returns the byte after the payload.
private func store(_ v: Value, at slot: UnsafeMutablePointer<ordo_value>, payload: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
  let empty = ordo_value(type: ORDO_TYPE_BOOL, b: false, i: 0, d: 0, s: nil, bytes: nil, len: 0)
  slot.initialize(to: empty)
  switch v {
  case .bool(let x): slot.pointee.b = x
  case .int64(let x): (slot.pointee.type, slot.pointee.i) = (ORDO_TYPE_INT64, x)
  case .double(let x): (slot.pointee.type, slot.pointee.d) = (ORDO_TYPE_DOUBLE, x)
  case .string(let s):
    (slot.pointee.type, slot.pointee.s, slot.pointee.len) = (ORDO_TYPE_STRING, UnsafePointer(payload.assumingMemoryBound(to: CChar.self)), s.utf8.count)
    return storeCString(s, at: payload)
  case .bytes(let b):
    (slot.pointee.type, slot.pointee.bytes, slot.pointee.len) = (ORDO_TYPE_BYTES, UnsafeRawPointer(payload), b.count)
    b.withUnsafeBytes { if let src = $0.baseAddress { payload.copyMemory(from: src, byteCount: $0.count) } }
    return payload + b.count
  }
  return payload
}

// MARK: - The exported functions

@c @implementation
public func ordo_client_connect(_ address: UnsafePointer<CChar>?, _ name: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let out = try outArg(out, "out")
    let addr = try address.map { p throws(OrdoError) in try stringArg(p, "address") }
    let service = try name.map { p throws(OrdoError) in try stringArg(p, "name") } ?? ordoDefaultName
    out.pointee = OpaquePointer(Unmanaged.passRetained(try CClient(address: addr, name: service)).toOpaque())
  }
}

@c @implementation
public func ordo_client_connect_direct(_ address: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let out = try outArg(out, "out")
    let addr = try stringArg(address, "address")
    out.pointee = OpaquePointer(Unmanaged.passRetained(try CClient(address: addr, name: ordoDefaultName, direct: true)).toOpaque())
  }
}

@c @implementation
public func ordo_client_free(_ client: OpaquePointer?) {
  guard let c = try? CClient.from(client) else { return }
  c.disconnect()
  Unmanaged.passUnretained(c).release()
}

@c @implementation
public func ordo_client_commit(_ client: OpaquePointer?, _ writes: OpaquePointer?, _ out_txn: UnsafeMutablePointer<UInt64>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let c = try CClient.from(client)
    let txn = try c.commit(try CWrites.from(writes))
    out_txn?.pointee = txn
  }
}

/// The smallest and largest `size` of a client contract spec this library
/// takes: its own struct, or a newer header's whose unknown bytes are zero.
private func checkedSpec(_ spec: UnsafePointer<ordo_client_contract_spec>?) throws(OrdoError) -> ordo_client_contract_spec {
  guard let spec else { throw invalid("spec is NULL") }
  let raw = UnsafeRawPointer(spec)
  let size = Int(raw.load(as: UInt32.self))
  let known = MemoryLayout<ordo_client_contract_spec>.size
  guard size >= known, size <= 4096, (known..<size).allSatisfy({ raw.load(fromByteOffset: $0, as: UInt8.self) == 0 }) else {
    throw invalid("spec->size is \(size): set it to sizeof(ordo_client_contract_spec) = \(known) (a larger size needs its unknown bytes zero)")
  }
  return spec.pointee
}

@c @implementation
public func ordo_client_register(_ client: OpaquePointer?, _ spec: UnsafePointer<ordo_client_contract_spec>?, _ out_id: UnsafeMutablePointer<UInt64>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let c = try CClient.from(client)
    let id = try c.register(try checkedSpec(spec))
    out_id?.pointee = id
  }
}

@c @implementation
public func ordo_client_unregister(_ client: OpaquePointer?, _ id: UInt64) -> ordo_status {
  guarded { () throws(OrdoError) in try CClient.from(client).unregister(id) }
}

@c @implementation
public func ordo_client_set_complete_error(
  _ client: OpaquePointer?, _ callback: ordo_client_complete_error_callback?, _ userData: UnsafeMutableRawPointer?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    try CClient.from(client).completeError = callback.map { ($0, userData) }
  }
}

@c @implementation
public func ordo_client_set_owner_change(_ client: OpaquePointer?, _ callback: ordo_client_owner_callback?, _ userData: UnsafeMutableRawPointer?) -> ordo_status {
  guarded { () throws(OrdoError) in
    try CClient.from(client).ownerChange = callback.map { ($0, userData) }
  }
}

@c @implementation
public func ordo_client_set_reconnect(_ client: OpaquePointer?, _ reconnect: Bool) -> ordo_status {
  guarded { () throws(OrdoError) in
    try CClient.from(client).remote.reconnect = reconnect
  }
}

@c @implementation
public func ordo_client_set_reconnect_timeout(_ client: OpaquePointer?, _ timeout_ms: Int32) -> ordo_status {
  guarded { () throws(OrdoError) in
    let c = try CClient.from(client)
    guard timeout_ms >= 0 else { throw OrdoError(.invalidArgument, "reconnect timeout \(timeout_ms) ms: give 0 (forever) or more") }
    c.remote.reconnectTimeoutMs = timeout_ms
  }
}

@c @implementation
public func ordo_client_fd(_ client: OpaquePointer?) -> Int32 {
  do {
    return try CClient.from(client).fd
  } catch {
    _ = report(error)
    return -1
  }
}

@c @implementation
public func ordo_client_dispatch(_ client: OpaquePointer?, _ timeout_ms: Int32) -> ordo_status {
  guarded { () throws(OrdoError) in try CClient.from(client).dispatch(timeoutMs: timeout_ms) }
}

@c @implementation
public func ordo_client_get(
  _ client: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<ordo_value>?>?,
  _ out_counter: UnsafeMutablePointer<UInt64>?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let c = try CClient.from(client)
    let k = try keypathArg(keypath)
    let out = try outArg(out, "out")
    let (value, counter) = try c.call { (r) throws(OrdoRemoteError) in try r.get(k) }
    let head = MemoryLayout<ordo_value>.stride
    guard let block = malloc(head + payloadSize(value)) else { throw outOfMemory(head + payloadSize(value)) }
    let p = block.bindMemory(to: ordo_value.self, capacity: 1)
    _ = store(value, at: p, payload: block + head)
    out.pointee = p
    out_counter?.pointee = counter
  }
}

/// A read reported per keypath (ordo_client_snapshot, ordo_client_changes):
/// checks the arguments, runs `read` with the client and the patterns, then
/// calls the callback for each keypath it returns, in keypath order, with
/// its value (NULL for none) and counter.
func perKeypath(
  _ client: OpaquePointer?, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n: Int, _ callback: ordo_snapshot_callback?,
  _ userData: UnsafeMutableRawPointer?, _ out_txn: UnsafeMutablePointer<UInt64>?,
  _ read: (CClient, [String]) throws(OrdoError) -> (keys: [String], values: [String: Value], counters: [String: UInt64], txn: UInt64)
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let c = try CClient.from(client)
    guard let callback else { throw invalid("callback is NULL") }
    let r = try read(c, try stringArray(patterns, n, "patterns", code: .invalidKeypath, owner: ""))
    for k in inKeypathOrder(r.keys) {
      withCValue(r.values[k]) { v in k.withCString { callback($0, v, r.counters[k] ?? 0, userData) } }
    }
    out_txn?.pointee = r.txn
  }
}

@c @implementation
public func ordo_client_snapshot(
  _ client: OpaquePointer?, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n_patterns: Int,
  _ callback: ordo_snapshot_callback?, _ userData: UnsafeMutableRawPointer?, _ out_txn: UnsafeMutablePointer<UInt64>?
) -> ordo_status {
  perKeypath(client, patterns, n_patterns, callback, userData, out_txn) { (c, list) throws(OrdoError) in
    let s = try c.call { (r) throws(OrdoRemoteError) in try r.snapshot(list) }
    let values = Dictionary(s.values, uniquingKeysWith: { _, last in last })
    let counters = Dictionary(s.counters, uniquingKeysWith: { _, last in last })
    return (Array(Set(values.keys).union(counters.keys)), values, counters, s.transaction)
  }
}

@c @implementation
public func ordo_client_changes(
  _ client: OpaquePointer?, _ since: UInt64, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n_patterns: Int,
  _ callback: ordo_snapshot_callback?, _ userData: UnsafeMutableRawPointer?, _ out_txn: UnsafeMutablePointer<UInt64>?
) -> ordo_status {
  perKeypath(client, patterns, n_patterns, callback, userData, out_txn) { (c, list) throws(OrdoError) in
    let ch = try c.call { (r) throws(OrdoRemoteError) in try r.changes(since: since, patterns: list) }
    return (Array(ch.values.keys) + ch.removed, ch.values, ch.counters, ch.transaction)
  }
}

@c @implementation
public func ordo_client_epoch(_ client: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let c = try CClient.from(client)
    let out = try outArg(out, "out")
    let epoch = try c.call { (r) throws(OrdoRemoteError) in try r.epoch }
    guard let p = strdup(epoch) else { throw outOfMemory(epoch.utf8.count + 1) }
    out.pointee = p
  }
}

/// The C kind of a client notification.
private func kind(_ k: RemoteNotification.Kind) -> ordo_notification_kind {
  switch k {
  case .notify: ORDO_KIND_NOTIFY
  case .changes: ORDO_KIND_CHANGES
  case .snapshot: ORDO_KIND_SNAPSHOT
  }
}
