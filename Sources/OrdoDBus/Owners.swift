// Owned values of peers (SPEC §15): a `CommitWith` with `owned` makes the
// values it sets belong to the committing peer; when the peer leaves they
// are removed in one transaction. `Owners` lists who owns what.
import CDBus
import Ordo

extension DBusService {
  /// The owner standing for `peer`, made at its first owned commit.
  func owner(of peer: String) -> Owner {
    if let o = owners[peer] { return o }
    let o = Owner(bus, name: peer)
    owners[peer] = o
    return o
  }

  /// Removes the values `peer` owns, in one transaction with a normal pass
  /// (a peer that left).
  func releaseOwner(of peer: String) {
    guard let o = owners.removeValue(forKey: peer) else { return }
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    o.release()
    log(.info, "\(peer) left the bus: removed the values it owned")
  }

  /// `Owners(as patterns) → a{ss}`: the owned values among the keypaths
  /// matching `patterns` that the caller may read, keypath → owner (the
  /// peer's unique name).
  func ownersReply(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let patterns = try r.stringArray("patterns", limit: limits.maxKeypathsPerCall)
    var owned: [OwnedValue]
    do { owned = try bus.ownedValues(patterns) } catch { throw .ordo(error) }
    if let f = c.access.readFilter { owned = owned.filter { f.allows($0.keypath) } }
    return c.m.methodReturn { w in
      w.stringDict(owned.map { ($0.keypath, $0.owner) })
    }
  }
}
