// Peer tracking: the bus daemon's `NameOwnerChanged` (or a direct peer's
// closed connection) tells which peer left; its contracts, trace
// subscription and owned values go with it.
import CDBus
import Ordo

extension DBusService {
  /// A `NameOwnerChanged` from the bus daemon: a unique name that lost its
  /// owner is a peer that left.
  func handleSignal(_ m: DBusMessageRef) {
    guard m.member == "NameOwnerChanged", m.signature == "sss" else { return }
    var r = m.reader()
    guard let name = try? r.string("name"), let _ = try? r.string("old"), let new = try? r.string("new") else { return }
    guard name.hasPrefix(":"), new.isEmpty else { return }
    peerLeft(name)
  }

  /// Peer `name` left. Its writer awaited now is timed out; its contracts
  /// are removed at once, or after the calls queued before it.
  func peerLeft(_ name: String) {
    dropTraceSubscriber(name)
    // A peer that left with calls still queued (a Register waiting for the
    // pass) leaves after them, so that nothing it registered outlives it.
    let callsQueued = deferred.contains { if case .call(let c) = $0 { c.sender == name } else { false } }
    if !callsQueued {
      guard let peer = remote.peers[name], !peer.contracts.isEmpty else {
        // Only its identity, or nothing, was known: forget it.
        _ = remote.removePeer(name)
        releaseOwner(of: name)
        return
      }
    }
    // A writer awaited from a peer that left is timed out at once.
    if let a = slot.active, a.owner == name { slot.post(a, .ownerLeft) }
    if callsQueued || slot.active?.foreign == true || (loopWaits == 0 && !deferred.isEmpty) {
      deferred.append(.peerLeft(name))
    } else {
      removePeer(name)
    }
  }

  /// Unregisters the contracts of a peer that left, removes the values it
  /// owned and forgets it.
  func removePeer(_ name: String) {
    releaseOwner(of: name)
    guard remote.peers[name] != nil else { return }
    let ids = remote.removePeer(name)
    if ids.isEmpty { return }
    statistics.peersLeft.add(1, ordering: .relaxed)
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    for id in ids { try? bus.unregister(id) }
    log(.info, "\(name) left the bus: removed its \(ids.count) contract\(ids.count == 1 ? "" : "s")")
  }
}

