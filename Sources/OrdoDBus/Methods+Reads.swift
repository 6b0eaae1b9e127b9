// The methods that read the bus: `Get`, `Snapshot` and `Changes`, filtered
// to what the caller may read and held to max-message-bytes.
import CDBus
import Ordo

extension DBusService {
  /// `Get(s keypath) → (v value, t counter)`: the stored value or, for a
  /// keypath the schema declares, its default (a `Snapshot`, which holds
  /// stored values only, tells them apart).
  func get(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
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
    guard let v = snap.values[k] ?? bus.schema?.declaration(for: k)?.defaultValue else {
      throw .ordo(OrdoError(.notFound, "\"\(k)\" holds no value (its counter is \(counter))"))
    }
    return c.m.methodReturn { w in
      w.value(v)
      w.uint64(counter)
    }
  }

  /// `Snapshot(as patterns) → (a{sv} values, a{st} counters, t txn)`.
  func snapshot(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
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
      w.counterDict(snap.counters)
      w.uint64(snap.transaction)
    }
  }

  /// `Changes(t since, as patterns) → (a{sv} values, as removed, a{st}
  /// counters, t txn)` (SPEC §10): filtered and limited like `Snapshot`.
  func changes(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
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
      w.counterDict(ch.counters)
      w.uint64(ch.transaction)
    }
  }
}
