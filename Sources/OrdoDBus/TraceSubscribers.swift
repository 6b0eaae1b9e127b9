// The peers subscribed to pass traces and how one pass becomes their
// `Trace` signals (each filtered to what its peer may read).
import CDBus
import Ordo
import Synchronization

/// The peers that asked for pass traces with `SubscribeTrace` (docs/devtools.md,
/// docs/dbus.md "Pass traces"), and how one pass becomes their `Trace`
/// signals. Any thread: the service thread subscribes and unsubscribes, the
/// committing thread (the core's trace hook) reads the table.
final class TraceSubscribers: @unchecked Sendable {
  /// The most peers subscribed at once; `SubscribeTrace` beyond it is
  /// `dev.ordo.Error.Limit`.
  static let maxSubscribers = 64
  /// The most patterns one subscription holds.
  static let maxPatterns = 256

  struct Subscriber: Sendable {
    /// What it asked for: a pass is sent when a keypath of it matches one.
    let patterns: [Pattern]
    /// Who it is (fetched when it subscribed); nil when the bus daemon did
    /// not tell: under a policy it then sees nothing.
    let identity: PeerIdentity?
  }

  private let table = PThreadLocked<[String: Subscriber]>([:])
  /// Trace signals queued for sending.
  let sent = Atomic<UInt64>(0)
  /// Trace signals sent without their keypath lists (over max-message-bytes).
  let truncated = Atomic<UInt64>(0)

  var count: Int { table.withLock { $0.count } }

  /// Adds or replaces `peer`'s subscription. Returns the number of
  /// subscribers before, or nil when the table is full.
  func set(_ peer: String, _ s: Subscriber) -> Int? {
    table.withLock { t in
      let before = t.count
      if t[peer] == nil && before >= Self.maxSubscribers { return nil }
      t[peer] = s
      return before
    }
  }

  /// Removes `peer`'s subscription. Returns whether it had one and the
  /// number of subscribers left.
  func remove(_ peer: String) -> (removed: Bool, left: Int) {
    table.withLock { t in
      let had = t.removeValue(forKey: peer) != nil
      return (had, t.count)
    }
  }

  func removeAll() { table.withLock { $0.removeAll() } }

  var all: [(String, Subscriber)] { table.withLock { t in t.map { ($0.key, $0.value) } } }

  /// The keypath a refused write names (`KEYPATH: CODE: message`).
  static func refusedKeypath(_ r: String) -> String {
    guard let colon = r.firstIndex(of: ":") else { return r }
    return String(r[..<colon])
  }

  /// What one subscriber sees of `trace`: with a read filter the changed
  /// keypaths, each step's because, writes and refused writes are only those
  /// it may read, and a step left with none of them is dropped (an initial
  /// call, scheduled by nothing, stays). Nil when nothing left matches one
  /// of its patterns: it is not sent the pass.
  static func view(_ trace: PassTrace, patterns: [Pattern], filter: ReadFilter?) -> PassTrace? {
    var t = trace
    if let f = filter {
      t.changed = trace.changed.filter { f.allows($0) }
      t.steps = trace.steps.compactMap { s in
        var s = s
        let scheduled = !s.because.isEmpty
        s.because = s.because.filter { f.allows($0) }
        s.writes = s.writes.filter { f.allows($0) }
        s.refused = s.refused.filter { f.allows(refusedKeypath($0)) }
        if scheduled && s.because.isEmpty && s.writes.isEmpty && s.refused.isEmpty { return nil }
        return s
      }
    }
    func wanted(_ k: String) -> Bool { patterns.contains { $0.isAffected(byWriteTo: k) } }
    let matched =
      t.changed.contains(where: wanted)
      || t.steps.contains { s in s.because.contains(where: wanted) || s.writes.contains(where: wanted) || s.refused.contains { wanted(refusedKeypath($0)) } }
    return matched ? t : nil
  }

  /// The `Trace(t txn, b committed, as changed, aa{sv} steps, t duration_ns)`
  /// signal of `t` to `destination`. Over `maxBytes` (estimated) its keypath
  /// lists are left out and each step says `truncated`.
  func signal(_ t: PassTrace, to destination: String, maxBytes: Int) -> DBusMessageRef? {
    var size = 96
    for k in t.changed { size += k.utf8.count + 8 }
    for s in t.steps {
      size += 260 + s.name.utf8.count + (s.failure?.utf8.count ?? 0)
      for k in s.because { size += k.utf8.count + 8 }
      for k in s.writes { size += k.utf8.count + 8 }
      for k in s.refused { size += k.utf8.count + 8 }
    }
    let cut = size > maxBytes
    if cut { truncated.add(1, ordering: .relaxed) }
    return DBusMessageRef.signal(path: ordoObjectPath, interface: ordoInterface, member: "Trace", destination: destination) { w in
      w.uint64(t.transaction)
      w.bool(t.committed)
      w.stringArray(cut ? [] : t.changed)
      w.container(ORDO_DBUS_TYPE_ARRAY, "a{sv}") { a in
        for s in t.steps {
          a.dict { d in
            d.entry("contract", objectPath: ordoContractPathPrefix + String(s.contract))
            d.entry("name", string: s.name)
            d.entry("txn", uint64: s.transaction)
            d.entry("outcome", string: s.outcome.rawValue)
            d.entry("initial", bool: s.initial)
            d.entry("because", strings: cut ? [] : s.because)
            d.entry("writes", strings: cut ? [] : s.writes)
            d.entry("refused", strings: cut ? [] : s.refused)
            if let f = s.failure { d.entry("failure", string: cut ? String(f.prefix(200)) : f) }
            d.entry("duration-ns", uint64: s.durationNS)
            if cut { d.entry("truncated", bool: true) }
          }
        }
      }
      w.uint64(t.durationNS)
    }
  }
}
