// The methods that write: `Commit` and `CommitWith`, and the decoding of
// the writes they and `Complete` carry.
import CDBus
import Ordo

extension DBusService {
  /// ``readWrites(_:_:limits:)`` within this service's limits.
  func readWrites(_ r: inout MessageReader, _ method: String) throws(OrdoServiceError) -> [Write] {
    try DBusService.readWrites(&r, method, limits: limits)
  }

  /// Decodes the `a{sv} set, as touch, as remove` of a `Commit` or
  /// `Complete` body within the limits into one batch of writes (a `remove`
  /// entry ending in `.**` removes the tree). Also the entry point of the
  /// D-Bus fuzz target, Fuzz/dbus/DBusFuzz.swift.
  static func readWrites(_ r: inout MessageReader, _ method: String, limits: ServiceLimits) throws(OrdoServiceError) -> [Write] {
    var sets: [(String, Value)] = []
    var d = r.recurse()
    r.next()
    while !d.atEnd {
      if sets.count >= limits.maxKeypathsPerCall {
        throw .ordo(OrdoError(.limit, "\(method): more than \(limits.maxKeypathsPerCall) entries in set (limit max-keypaths-per-call)"))
      }
      var e = d.recurse()
      d.next()
      let k: String
      do { k = try e.string("\(method) set key") } catch { throw .invalidArgs(error.message) }
      sets.append((k, try e.value("\(method): value of \"\(k)\"", maxBytes: limits.maxValueBytes)))
    }
    // Each list is read within the limit, then the three together are
    // held to it (the message names the sum, not what was left of it).
    let touch = try r.stringArray("\(method) touch", limit: limits.maxKeypathsPerCall)
    let remove = try r.stringArray("\(method) remove", limit: limits.maxKeypathsPerCall)
    guard sets.count + touch.count + remove.count <= limits.maxKeypathsPerCall else {
      throw .ordo(OrdoError(.limit, "\(method): more than \(limits.maxKeypathsPerCall) entries in set, touch and remove together (limit max-keypaths-per-call)"))
    }
    var batch: [Write] = sets.map { .set($0.0, $0.1) }
    batch.reserveCapacity(sets.count + touch.count + remove.count)
    for k in touch { batch.append(.touch(k)) }
    for k in remove { batch.append(k.hasSuffix(".**") ? .removeTree(String(k.dropLast(3))) : .remove(k)) }
    return batch
  }

  /// `Commit(a{sv} set, as touch, as remove) → t`: one transaction, with
  /// the write right on each keypath; with a durability, its reply waits in
  /// the acknowledgement hold.
  func commit(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let batch = try readWrites(&r, "Commit")
    try c.access.requireWrites(batch, for: "Commit")
    return try commit(c, batch)
  }

  /// `CommitWith(a{sv} set, as touch, as remove, a{sv} options) → t`
  /// (SPEC §15): a `Commit` with options — `expect` (`a{st}`, keypath →
  /// counter: a counter that moved fails the whole commit with `Conflict`;
  /// needs the read right on each keypath) and `owned` (`b`: the values it
  /// sets belong to the caller and are removed when it leaves).
  func commitWith(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let batch = try readWrites(&r, "CommitWith")
    var expect: [(String, UInt64)] = []
    var owned = false
    try readOptions(&r, "CommitWith", ["expect": "a{st}", "owned": "b"]) { key, v throws(OrdoServiceError) in
      switch key {
      case "expect":
        var d = v.recurse()
        while !d.atEnd {
          guard expect.count < limits.maxKeypathsPerCall else {
            throw .ordo(OrdoError(.limit, "CommitWith: more than \(limits.maxKeypathsPerCall) entries in expect (limit max-keypaths-per-call)"))
          }
          var e = d.recurse()
          d.next()
          let k: String
          do throws(InvalidArgs) { k = try e.string("CommitWith expect key") } catch { throw .invalidArgs(error.message) }
          expect.append((k, e.uint64()))
        }
      case "owned":
        owned = v.bool()
      default:
        break
      }
    }
    try c.access.requireWrites(batch, for: "CommitWith")
    for (k, _) in expect { try c.access.require(.read, k, for: "CommitWith expect") }
    guard owned else { return try commit(c, batch, expect: expect) }
    // A peer's owner record made for a commit that fails goes with it.
    let made = owners[c.sender] == nil
    do {
      return try commit(c, batch, expect: expect, owner: owner(of: c.sender))
    } catch {
      if made { owners[c.sender] = nil }
      throw error
    }
  }

  /// Runs one remote transaction: `batch` with its conditions, its sets
  /// owned by `owner` if given; the reply waits in the acknowledgement hold
  /// with a durability.
  private func commit(
    _ c: Call, _ batch: [Write], expect: [(String, UInt64)] = [], owner: Owner? = nil
  ) throws(OrdoServiceError) -> DBusMessageRef? {
    statistics.commits.add(1, ordering: .relaxed)
    loopInBusCall.add(1, ordering: .relaxed)
    defer { loopInBusCall.subtract(1, ordering: .relaxed) }
    if let owner {
      do throws(OrdoError) { try bus.begin(owner: owner) } catch { throw .ordo(error) }
    } else {
      bus.begin()
    }
    let txn: UInt64
    do throws(OrdoError) {
      for (k, n) in expect { try bus.expect(k, counter: n) }
      try bus.write(batch)
      txn = try bus.commit()
    } catch {
      try? bus.rollback()
      if hold.isOn {
        // The pass ran (observers' Notify signals are held) but the
        // transaction was not applied, e.g. the state file refused it.
        hold.dropNotifies(after: bus.transactionID)
      }
      throw .ordo(error)
    }
    guard let reply = c.m.methodReturn({ $0.uint64(txn) }) else { return nil }
    if hold.isOn {
      // Sent once the transaction is durable (releaseHeld).
      if !c.m.noReply { hold.hold(reply: reply, to: c.m, of: txn) }
      return nil
    }
    return reply
  }
}
