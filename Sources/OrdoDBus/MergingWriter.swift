// Client-side write merging: writes issued while a `Commit` is in flight
// join the next one (`MergingWriter`, behind `ordoctl set --merge`).
import CDBus
import Ordo

#if canImport(Glibc)
import Glibc
#endif

/// The batch a write given to a ``MergingWriter`` joined: every write merged
/// into one `Commit` has the same ticket. Ask the writer for its
/// ``MergedWriteState``.
public struct MergedWrite: Hashable, Sendable, Comparable, CustomStringConvertible {
  /// The batch's number, from 0, in the order the batches were sent.
  public let batch: Int

  public static func < (a: MergedWrite, b: MergedWrite) -> Bool { a.batch < b.batch }
  public var description: String { "batch \(batch)" }
}

/// Where a merged write is.
public enum MergedWriteState: Sendable, Hashable {
  /// Not acknowledged yet: waiting in the pending batch or in flight.
  case pending
  /// Its `Commit` succeeded: the transaction id it landed in (0 if that
  /// `Commit` changed nothing).
  case committed(UInt64)
  /// Its `Commit` failed: none of the batch's writes was applied, unless
  /// the error is a timeout or a lost connection (then the writer cannot
  /// know; read the values back).
  case failed(OrdoRemoteError)
}

/// Client-side merging of writes, like dconf's `dconf_client_write_fast`
/// (docs/dbus.md, "Merging writes"). At most one `Commit` of this writer is
/// in flight: a write issued while none is goes out at once as its own
/// `Commit`; writes issued while one is in flight are merged into one
/// pending batch, sent as a single `Commit` when the reply arrives. A burst
/// of N writes therefore takes about two `Commit`s, not N.
///
/// Merging keeps the result of applying the writes one by one in the
/// order they were issued (last write per keypath wins):
/// - a set of `k` replaces an earlier set or remove of `k` in the batch;
/// - a remove of `k` replaces an earlier set of `k`; a tree removal `p.**`
///   drops the batch's earlier sets of `p` and its descendants;
/// - touches accumulate (a touch never changes a value, so it merges with
///   anything);
/// - a set of a keypath that a tree removal already in the batch covers
///   cannot be merged (a `Commit` applies removes after sets): it starts a
///   new batch, sent after the current one.
/// A batch also closes at `maxBatchKeypaths` entries (keep it at most the
/// service's `max-keypaths-per-call`, 4096 by default). One `write(set:touch:remove:)`
/// call is never split: its entries land in one batch, all or nothing.
///
/// What merging gives up: the writes of one batch are one transaction (one
/// id, one `Notify` per observer, net change over the batch: `a → x → a`
/// is no change), and one failure (a policy refusal, a storage error, a
/// limit) fails every write of its batch. Keypaths are validated before a
/// write is accepted, so a malformed one is refused to its caller alone.
///
/// Single-threaded, like ``OrdoClient``: replies are taken by ``poll()``,
/// ``flush()``, each write call and the client's
/// ``OrdoClient/process(timeoutMs:)``, which also deliver `Notify` signals
/// to the client's callbacks.
public final class MergingWriter {
  /// The client whose connection the `Commit`s go through.
  public let client: OrdoClient
  /// The most entries (set + touch + remove) merged into one `Commit`.
  public let maxBatchKeypaths: Int
  /// `Commit`s sent so far.
  public private(set) var commitsSent = 0
  /// Writes accepted so far (calls of ``write(set:touch:remove:)``,
  /// ``set(_:_:)``, ``touch(_:)``, ``remove(_:)``).
  public private(set) var writesIssued = 0
  /// Whether each write first takes the replies that arrived (without
  /// waiting), so that a reply is seen as soon as possible (default). A
  /// program that issues writes in groups (the lines of one read) may turn
  /// it off and call ``poll()`` between groups: the writes of a group then
  /// always merge, and the group costs no system call per write.
  public var pollsOnWrite = true
  /// Called once per batch when its outcome is known (from whichever call
  /// took the reply): the ticket and the transaction id or the error.
  public var onResult: ((MergedWrite, Result<UInt64, OrdoRemoteError>) -> Void)?

  private struct Batch {
    let number: Int
    var sets: [String: Value] = [:]
    var touches: Set<String> = []
    /// Exact removes and tree removals (`p.**`), as sent.
    var removes: Set<String> = []
    /// The prefixes `p` of the tree removals `p.**`.
    var trees: [String] = []
    var count: Int { sets.count + touches.count + removes.count }

    func covered(_ k: String) -> Bool {
      trees.contains { k == $0 || (k.hasPrefix($0) && k.utf8.dropFirst($0.utf8.count).first == UInt8(ascii: ".")) }
    }
  }

  private var states: [MergedWriteState] = []
  private var queue: [Batch] = []
  /// The `Commit` in flight: its batch, serial, when it was sent and on
  /// which of the client's connections (``OrdoClient/generation``).
  private var inFlight: (batch: Int, serial: UInt32, sentMs: Int64, generation: Int)?
  private var unreported: OrdoRemoteError?
  private var handling = false

  /// A merging writer on `client`'s connection.
  public init(client: OrdoClient, maxBatchKeypaths: Int = 4096) {
    self.client = client
    self.maxBatchKeypaths = max(1, maxBatchKeypaths)
  }

  /// Whether nothing is pending or in flight.
  public var isIdle: Bool { inFlight == nil && queue.isEmpty }

  /// The state of a write.
  public func state(_ w: MergedWrite) -> MergedWriteState {
    w.batch >= 0 && w.batch < states.count ? states[w.batch] : .failed(Self.error(DBusErrorName.invalidArgs, "\(w) is not a batch of this writer"))
  }

  /// Sets one value (merged; see the type's documentation).
  @discardableResult
  public func set(_ keypath: String, _ value: Value) throws(OrdoRemoteError) -> MergedWrite {
    try write(set: [(keypath, value)])
  }

  /// Touches one keypath (merged).
  @discardableResult
  public func touch(_ keypath: String) throws(OrdoRemoteError) -> MergedWrite {
    try write(touch: [keypath])
  }

  /// Removes one value, or a tree with `p.**` (merged).
  @discardableResult
  public func remove(_ keypath: String) throws(OrdoRemoteError) -> MergedWrite {
    try write(remove: [keypath])
  }

  /// Issues one write: sets, then touches, then removes, as one `Commit`
  /// would apply them, merged into the pending batch (or sent at once when
  /// no `Commit` of this writer is in flight). Returns the ticket of the
  /// batch it joined. Throws, accepting nothing, for a malformed keypath, an
  /// empty write or a closed connection.
  @discardableResult
  public func write(set: [(String, Value)] = [], touch: [String] = [], remove: [String] = []) throws(OrdoRemoteError) -> MergedWrite {
    if set.isEmpty && touch.isEmpty && remove.isEmpty {
      throw Self.error(DBusErrorName.ordo(.invalidArgument), "a merged write needs at least one set, touch or remove")
    }
    do throws(OrdoError) {
      for (k, v) in set {
        _ = try Keypath(k)
        if case .string(let s) = v, let e = nulCharacterError(s, keypath: k) { throw e }
      }
      for k in touch { _ = try Keypath(k) }
      for k in remove { _ = try Keypath(k.hasSuffix(".**") ? String(k.dropLast(3)) : k) }
    } catch {
      throw Self.error(DBusErrorName.ordo(error.code), error.message)
    }
    guard client.isConnected else { throw Self.error(DBusErrorName.dbus, "the connection to the bus is closed") }
    if !handling && pollsOnWrite { poll() }
    let size = set.count + touch.count + remove.count
    if let last = queue.last, last.count + size <= maxBatchKeypaths || last.count == 0,
      !set.contains(where: { last.covered($0.0) })
    {
      // joins the open batch
    } else {
      queue.append(Batch(number: states.count))
      states.append(.pending)
    }
    var b = queue[queue.count - 1]
    for (k, v) in set {
      b.removes.remove(k)
      b.sets[k] = v
    }
    for k in touch { b.touches.insert(k) }
    for k in remove {
      if k.hasSuffix(".**") {
        let p = String(k.dropLast(3))
        if !b.trees.contains(p) { b.trees.append(p) }
        for s in b.sets.keys where s == p || s.hasPrefix(p + ".") { b.sets[s] = nil }
      } else {
        b.sets[k] = nil
      }
      b.removes.insert(k)
    }
    queue[queue.count - 1] = b
    writesIssued += 1
    if !handling { sendNext() }
    return MergedWrite(batch: b.number)
  }

  /// Takes the replies that arrived (without waiting) and sends the pending
  /// batch if no `Commit` is in flight; fails a `Commit` unanswered for the
  /// client's ``OrdoClient/timeoutMs``. Also delivers `Notify` signals, as
  /// ``OrdoClient/process(timeoutMs:)`` does.
  public func poll() {
    if client.isConnected {
      client.connection.readWrite(timeoutMs: 0)
      _ = client.deliver()
    }
    checkTimeoutAndConnection()
    sendNext()
  }

  /// Waits until every write issued so far is acknowledged (or failed).
  /// Throws the first failure of a batch since the previous `flush()`; the
  /// state of each write says which failed.
  public func flush() throws(OrdoRemoteError) {
    while !isIdle {
      sendNext()
      checkTimeoutAndConnection()
      guard let f = inFlight else { continue }
      let left = f.sentMs + Int64(client.timeoutMs) - Connection.nowMs()
      if left > 0 && client.isConnected {
        client.connection.readWrite(timeoutMs: Int32(clamping: left))
        _ = client.deliver()
      }
    }
    if let e = unreported {
      unreported = nil
      throw e
    }
  }

  // MARK: Inside

  private static func error(_ name: String, _ message: String) -> OrdoRemoteError {
    OrdoRemoteError(name: name, message: message)
  }

  private func finish(_ batch: Int, _ result: Result<UInt64, OrdoRemoteError>) {
    switch result {
    case .success(let t): states[batch] = .committed(t)
    case .failure(let e):
      states[batch] = .failed(e)
      if unreported == nil { unreported = e }
    }
    if let cb = onResult {
      handling = true
      defer { handling = false }
      cb(MergedWrite(batch: batch), result)
    }
  }

  private func checkTimeoutAndConnection() {
    if let f = inFlight, f.generation != client.generation {
      // Sent on a connection that was lost and opened again: no reply comes.
      inFlight = nil
      finish(
        f.batch,
        .failure(Self.error(DBusErrorName.dbus, "the connection to the bus was lost before the Commit was answered (its writes may or may not have been committed)")))
    }
    if !client.isConnected {
      let e = Self.error(DBusErrorName.dbus, "the connection to the bus closed before the Commit was answered")
      if let f = inFlight {
        client.replyHandlers[f.serial] = nil
        inFlight = nil
        finish(f.batch, .failure(e))
      }
      let left = queue
      queue.removeAll()
      for b in left { finish(b.number, .failure(Self.error(DBusErrorName.dbus, "the connection to the bus is closed: not sent"))) }
      return
    }
    if let f = inFlight, Connection.nowMs() - f.sentMs >= Int64(client.timeoutMs) {
      client.replyHandlers[f.serial] = nil
      inFlight = nil
      finish(
        f.batch,
        .failure(
          Self.error(
            "org.freedesktop.DBus.Error.NoReply",
            "Commit of \(MergedWrite(batch: f.batch)): no reply within \(client.timeoutMs) ms (its writes may or may not have been committed)"
          )))
    }
  }

  /// Sends the oldest pending batch if none is in flight.
  private func sendNext() {
    while inFlight == nil, !queue.isEmpty {
      let b = queue.removeFirst()
      guard
        let m = DBusMessageRef.methodCall(destination: client.destination, path: ordoObjectPath, interface: ordoInterface, member: "Commit")
      else {
        finish(b.number, .failure(Self.error(DBusErrorName.dbus, "cannot build a Commit call")))
        continue
      }
      var w = m.writer()
      w.valueDict(b.sets.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
      w.stringArray(b.touches.sorted())
      w.stringArray(b.removes.sorted())
      guard client.isConnected, let serial = client.connection.send(m) else {
        finish(b.number, .failure(Self.error(DBusErrorName.dbus, "cannot send the Commit: the connection is closed")))
        continue
      }
      commitsSent += 1
      inFlight = (b.number, serial, Connection.nowMs(), client.generation)
      let number = b.number
      client.replyHandlers[serial] = { [weak self] reply in self?.answered(number, reply) }
      client.connection.flush()
    }
  }

  private func answered(_ batch: Int, _ reply: DBusMessageRef) {
    guard let f = inFlight, f.batch == batch else { return }
    inFlight = nil
    var rd = reply.reader()
    if reply.type == ORDO_DBUS_MESSAGE_TYPE_ERROR {
      let text = reply.signature.hasPrefix("s") ? ((try? rd.string("message")) ?? "") : ""
      finish(batch, .failure(Self.error(reply.errorName ?? DBusErrorName.failed, text)))
    } else if reply.signature == "t" {
      finish(batch, .success(rd.uint64()))
    } else {
      finish(batch, .failure(Self.error(DBusErrorName.invalidSignature, "unexpected reply to Commit: (\(reply.signature))")))
    }
    // The next batch goes out from the caller's loop (poll, flush, write)
    // or here when called from the client's process().
    if !handling { sendNext() }
  }
}

extension OrdoClient {
  /// A ``MergingWriter`` on this client's connection: writes issued while
  /// one of its `Commit`s is in flight join the next one.
  public func mergingWriter(maxBatchKeypaths: Int = 4096) -> MergingWriter {
    MergingWriter(client: self, maxBatchKeypaths: maxBatchKeypaths)
  }

  /// The connection's socket, to wait on with `poll(2)` beside other input
  /// (then call ``process(timeoutMs:)`` or ``MergingWriter/poll()``).
  public var fileDescriptor: Int32? {
    connection.unixFd
  }

  /// Hands a method return or error to the call that awaits it (replies to
  /// calls sent without blocking). A reply from anyone but the service's
  /// current owner is dropped.
  func takeReply(_ m: DBusMessageRef) {
    let serial = m.replySerial
    guard let handler = replyHandlers[serial] else { return }
    if let owner = serviceOwner, let s = m.sender, s != owner, s != "org.freedesktop.DBus" { return }
    replyHandlers[serial] = nil
    handler(m)
  }
}
