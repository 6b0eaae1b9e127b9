// Building a remote contract's `Notify`: the keypaths and values its peer
// may read, within max-message-bytes, held when acknowledgements wait for
// durability.
import CDBus
import Ordo

extension DBusService {
  /// Sends a remote contract's `Notify`. Runs on the committing thread. With
  /// a policy, the keypaths and values are filtered to what the contract's
  /// peer may read (an every-transaction observer left with nothing to see
  /// is not sent one).
  func notify(_ record: RemoteContract, _ note: ContractNotification, droppable: Bool = true) {
    var changed = note.changed
    var filter: ReadFilter?
    if policyOn.load(ordering: .relaxed), let policy = policyBox.withLock({ $0 }) {
      filter = record.peer.identity.map { policy.readable(by: $0) } ?? ReadFilter(allow: [], deny: [])
    }
    if let filter, !changed.isEmpty {
      // Only keypaths the peer may read (SPEC §12), for every contract: a
      // write to an unreadable ancestor of what it reads (SPEC §1) still
      // calls it, with the keypath left out (an empty list: read again
      // what you read). An every-transaction contract with nothing
      // readable gets no Notify. A cached contract, whose client could not
      // tell what went under the hidden keypath, gets its whole read set.
      if !changed.allSatisfy({ filter.allows($0) }) {
        changed = record.cache ? [] : ChangedKeypaths(changed.filter { filter.allows($0) })
        if changed.isEmpty && record.everyTransaction { return }
      }
    }
    var entries: [(String, Value)] = []
    var size = 64
    for k in changed { size += k.utf8.count + 8 }
    let listFits = size <= limits.maxMessageBytes
    if listFits && record.cache {
      // What the client's cache of the read set needs, in keypath order.
      for (k, v) in bus.readSetValues(of: note.contract, under: changed) where filter?.allows(k) ?? true {
        size += k.utf8.count + Self.estimate(v)
        entries.append((k, v))
      }
      entries.sort { $0.0 < $1.0 }
    } else if listFits {
      // Values only for a list that fits (read from the bus once).
      let values = bus.values(of: note)
      for k in changed {
        guard let v = values[k], filter?.allows(k) ?? true else { continue }
        size += k.utf8.count + Self.estimate(v)
        entries.append((k, v))
      }
    }
    if size > limits.maxMessageBytes {
      // Too large: values are left out, and a list that does not fit
      // either goes empty (read again what you read). A cached contract's
      // list is "**", never a keypath: its client tells it from the
      // initial call that fills its cache, and reads its read set again.
      entries = []
      if record.cache {
        changed = ["**"]
      } else if !listFits {
        changed = []
      }
      statistics.notifyTruncated.add(1, ordering: .relaxed)
    }
    let message = DBusMessageRef.notify(
      destination: record.owner, contractPath: ordoContractPathPrefix + String(note.contract), transaction: note.transaction,
      changed: changed, values: entries)
    guard let m = message else { return }
    if droppable && hold.isOn {
      // An observer's Notify waits until its transaction is durable.
      hold.hold(notify: m, of: note.transaction)
      if !link.isLoopThread { link.wake() }
      return
    }
    statistics.notifySent.add(1, ordering: .relaxed)
    link.send(m, droppable: droppable)
  }
}
