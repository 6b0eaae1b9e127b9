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
      // readable gets no Notify.
      if !changed.allSatisfy({ filter.allows($0) }) {
        changed = ChangedKeypaths(changed.filter { filter.allows($0) })
        if changed.isEmpty && record.everyTransaction { return }
      }
    }
    var entries: [(String, Value)] = []
    var size = 64
    for k in changed { size += k.utf8.count + 8 }
    if size > limits.maxMessageBytes {
      changed = []
      statistics.notifyTruncated.add(1, ordering: .relaxed)
    } else {
      // Values only for a list that fits (read from the bus once).
      let values = bus.values(of: note)
      for k in changed {
        guard let v = values[k], filter?.allows(k) ?? true else { continue }
        size += k.utf8.count + Self.estimate(v)
        entries.append((k, v))
      }
      if size > limits.maxMessageBytes {
        entries = []
        statistics.notifyTruncated.add(1, ordering: .relaxed)
      }
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
