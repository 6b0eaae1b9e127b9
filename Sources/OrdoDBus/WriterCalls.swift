// Remote writer contracts in a pass: the awaited call (`Notify`, then wait
// for `Complete`) and the liveness rules (suspend a peer that does not
// answer, resume it when it calls again, then call its writers again).
import CDBus
import Ordo

extension DBusService {
  /// A remote writer contract's call: sends its `Notify`, waits for its
  /// `Complete` (serving other peers meanwhile), then applies the writes,
  /// all or nothing, in this callback and answers the `Complete`.
  ///
  /// Liveness (SPEC §12): a suspended writer is skipped (no `Notify`, no
  /// wait). The wait ends at the writer's timeout or at its peer's budget
  /// for this pass — the peer's largest timeout, counted from the first wait
  /// for one of its writers in this pass — whichever comes first. A wait
  /// that ends without an answer suspends the peer's writers until the peer
  /// calls the service again (then ``recallResumedWriters()`` calls them).
  ///
  /// On the service thread the wait is a nested dispatch loop with the
  /// callback's checks suspended: `Get`/`Snapshot`/`Register`/`Unregister`
  /// … are answered, `Commit`s queue. On another thread (a host committing
  /// on its own thread) the callback waits on a condition variable; the
  /// service thread parks the `Complete` and queues `Register`,
  /// `Unregister` and `Commit` (they would wait for the bus this pass holds).
  func writerCall(_ record: RemoteContract, _ note: ContractNotification) throws {
    let owner = record.owner
    let name = record.name
    let timeoutMs = record.timeoutMs ?? limits.defaultWriterTimeoutMs
    let peer = record.peer
    let who = "writer contract \(note.contract) \"\(name)\" of \(owner)"
    if peer.suspended.load(ordering: .relaxed) {
      statistics.writersSkipped.add(1, ordering: .relaxed)
      log(.debug, "\(who) is suspended: not called in transaction \(note.transaction)")
      throw RemoteWriterFailure(description: "\(who) is suspended (its peer did not answer in time): not called (transaction \(note.transaction))")
    }
    let onLoop = link.isLoopThread
    if onLoop, let r = initialRegister, !r.replied, let ret = r.call.methodReturn({ $0.objectPath(ordoContractPathPrefix + String(note.contract)) }) {
      // The peer learns the contract's path before its Notify, and the
      // contract is its peer's from then on: the Complete of this initial
      // call is accepted, and a peer leaving meanwhile takes it along.
      link.send(ret)
      initialRegister?.replied = true
      remote.add(record)
    }
    let now = Connection.nowMs()
    var deadline = now + Int64(timeoutMs)
    // An initial call (empty list) is outside any pass's budget.
    if !note.changed.isEmpty {
      if peer.budgetTransaction != note.transaction {
        peer.budgetTransaction = note.transaction
        peer.budgetDeadline = now + Int64(max(timeoutMs, peer.maxTimeoutMs.load(ordering: .relaxed)))
      }
      deadline = min(deadline, peer.budgetDeadline)
    }
    guard deadline > now else {
      suspend(peer, "its writers used up their \(peer.maxTimeoutMs.load(ordering: .relaxed)) ms budget in transaction \(note.transaction)")
      statistics.timeouts.add(1, ordering: .relaxed)
      throw RemoteWriterFailure(description: "\(who) not called: its peer's writers used up their budget in transaction \(note.transaction)")
    }
    statistics.writerCalls.add(1, ordering: .relaxed)
    let a = WriterAwait(contract: note.contract, transaction: note.transaction, owner: owner, name: name, deadline: deadline, foreign: !onLoop)
    slot.begin(a)
    notify(record, note, droppable: false)
    if onLoop {
      loopWaits += 1
      bus.withCallbackSuspended {
        while !slot.ended(a) {
          let left = a.deadline - Connection.nowMs()
          if left <= 0 { break }
          if stopFlag.load(ordering: .relaxed) || closed || !link.step(timeoutMs: Int32(clamping: left)) {
            slot.post(a, .stopped)
          }
        }
      }
      loopWaits -= 1
    } else {
      slot.wait(a) { loopInBusCall.load(ordering: .relaxed) > 0 }
    }
    let outcome = slot.end(a)
    // The service thread runs what it queued meanwhile.
    if !onLoop { link.wake() }
    switch outcome {
    case .writes(let batch, let call):
      do {
        try bus.write(batch)
      } catch {
        statistics.completesRefused.add(1, ordering: .relaxed)
        log(.warning, "\(who): Complete of transaction \(note.transaction) refused, none of its \(batch.count) writes applied: \(error.code.camelName): \(error.message)")
        if !call.noReply, let e = call.error(DBusErrorName.ordo(error.code), error.message) { link.send(e) }
        throw error
      }
      statistics.completes.add(1, ordering: .relaxed)
      if !call.noReply, let ret = call.methodReturn({ _ in }) { link.send(ret) }
    case .refused(let why):
      throw RemoteWriterFailure(description: "\(who): its Complete of transaction \(note.transaction) could not be read: \(why)")
    case .timedOut, .ownerLeft, .serviceBusy:
      statistics.timeouts.add(1, ordering: .relaxed)
      let waited = a.deadline - now
      let why =
        switch outcome {
        case .ownerLeft: "left the bus while its call was awaited"
        case .serviceBusy: "cannot be served: the service thread waits for the bus this pass holds (commit on the service thread, see docs/dbus.md)"
        default:
          waited < Int64(timeoutMs)
            ? "did not complete within the \(waited) ms left of its peer's budget for this pass"
            : "did not complete within \(timeoutMs) ms"
        }
      let message = "\(who) \(why) (transaction \(note.transaction)); the pass goes on without its writes"
      log(.warning, message)
      if case .timedOut = outcome { suspend(peer, "\(who) did not answer") }
      throw RemoteWriterFailure(description: message)
    case .unregistered, .stopped:
      return
    }
  }

  /// Stops awaiting `peer`'s writers until it calls the service again.
  func suspend(_ peer: RemotePeer, _ why: String) {
    guard !peer.suspended.exchange(true, ordering: .relaxed) else { return }
    statistics.suspensions.add(1, ordering: .relaxed)
    log(.warning, "\(why): \(peer.name)'s writer contracts are suspended (not called) until it calls the service again")
  }

  /// Any call shows that the peer is alive: its suspended writers are
  /// awaited again, and called again as initial calls once no pass runs
  /// (``recallResumedWriters()``).
  func resume(_ sender: String, calling member: String) {
    guard let p = remote.peers[sender], p.suspended.load(ordering: .relaxed) else { return }
    p.suspended.store(false, ordering: .relaxed)
    p.recallDue = p.contracts.filter { remote.byID[$0]?.isWriter == true }.sorted()
    statistics.resumes.add(1, ordering: .relaxed)
    log(.info, "\(sender) called \(member): its writer contracts are awaited again")
  }

  /// Calls each writer contract of the resumed peers once more as an
  /// initial call (an empty list, the last committed id), each in a pass of
  /// its own: the transactions that skipped it while it was suspended left
  /// what it computes behind, and its answer brings that back in line.
  /// Service thread, while no pass waits and no call is queued. It never
  /// waits for the bus (a host's thread committing would then find the
  /// service thread busy): a call the bus is not free for now is made at a
  /// later dispatch.
  func recallResumedWriters() {
    for peer in remote.peers.values where !peer.recallDue.isEmpty {
      while let id = peer.recallDue.first {
        guard loopWaits == 0, slot.active == nil, deferred.isEmpty, !closed else { return }
        guard let record = remote.byID[id], !record.isSuspended else {
          peer.recallDue.removeFirst()
          continue
        }
        guard bus.callInitial(id) else { return }
        peer.recallDue.removeFirst()
        log(.info, "writer contract \(id) \"\(record.name)\" of \(peer.name) was called again (initial call): its peer is back")
      }
    }
  }
}
