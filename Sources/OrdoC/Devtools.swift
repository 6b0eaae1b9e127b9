import COrdo
import Ordo

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Devtools (include/ordo.h "Devtools"; docs/devtools.md)

/// Lays out strings and pointer arrays in one `malloc`ed block after a
/// struct of `T`: what C receives is freed with one `ordo_free`.
private struct Block<T> {
  private var lists: [[String]] = []

  /// Adds a list; returns its index (for ``list(_:in:)``).
  mutating func add(_ list: [String]) -> Int {
    lists.append(list)
    return lists.count - 1
  }

  /// Allocates the block; `fill` gets the struct and the NUL-terminated
  /// pointer arrays, one per added list. Returns nil when out of memory.
  func make(_ fill: (UnsafeMutablePointer<T>, [UnsafePointer<UnsafePointer<CChar>?>]) -> Void) -> UnsafeMutablePointer<T>? {
    let ptr = MemoryLayout<UnsafePointer<CChar>?>.stride
    var size = (MemoryLayout<T>.size + ptr - 1) / ptr * ptr
    let arraysAt = size
    for l in lists { size += (l.count + 1) * ptr }
    let stringsAt = size
    for l in lists { for s in l { size += s.utf8.count + 1 } }
    guard let raw = calloc(1, size) else { return nil }
    var arrays: [UnsafePointer<UnsafePointer<CChar>?>] = []
    var a = raw + arraysAt
    var cursor = raw + stringsAt
    for l in lists {
      let p = a.bindMemory(to: UnsafePointer<CChar>?.self, capacity: l.count + 1)
      for (i, s) in l.enumerated() {
        var s = s
        let start = cursor.assumingMemoryBound(to: CChar.self)
        s.withUTF8 { u in if let b = u.baseAddress { cursor.copyMemory(from: b, byteCount: u.count) } }
        cursor += s.utf8.count
        cursor.storeBytes(of: 0, as: UInt8.self)
        cursor += 1
        p[i] = UnsafePointer(start)
      }
      p[l.count] = nil
      arrays.append(UnsafePointer(p))
      a += (l.count + 1) * ptr
    }
    let t = raw.bindMemory(to: T.self, capacity: 1)
    fill(t, arrays)
    return t
  }
}

@c @implementation
public func ordo_get_contract_info(_ bus: OpaquePointer?, _ id: UInt64, _ out: UnsafeMutablePointer<UnsafeMutablePointer<ordo_contract_info>?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    let out = try outArg(out, "out")
    guard let info = box.bus.contract(id) else { throw OrdoError(.notFound, "no contract with id \(id) on this bus") }
    var block = Block<ordo_contract_info>()
    let name = block.add([info.name])
    let reads = block.add(info.reads)
    let writes = block.add(info.writes)
    let unusedReads = block.add(info.unusedReads)
    let unusedWrites = block.add(info.unusedWrites)
    let kind: ordo_contract_kind =
      switch info.kind {
      case .priority: ORDO_KIND_PRIORITY
      case .data: ORDO_KIND_DATA
      case .everyTransaction: ORDO_KIND_EVERY_TRANSACTION
      }
    guard
      let p = block.make({ t, arrays in
        t.pointee = ordo_contract_info(
          size: UInt32(MemoryLayout<ordo_contract_info>.size), id: info.id, name: arrays[name][0], kind: kind,
          priority: info.priority ?? Int32.min, level: UInt32(info.level), position: UInt32(info.position),
          calls: info.calls, failures: info.failures, last_txn: info.lastTransaction,
          reads: arrays[reads], n_reads: info.reads.count, writes: arrays[writes], n_writes: info.writes.count,
          unused_reads: arrays[unusedReads], n_unused_reads: info.unusedReads.count,
          unused_writes: arrays[unusedWrites], n_unused_writes: info.unusedWrites.count)
      })
    else { throw outOfMemory(0) }
    out.pointee = p
  }
}

@c @implementation
public func ordo_set_trace(_ bus: OpaquePointer?, _ callback: ordo_trace_callback?, _ userData: UnsafeMutableRawPointer?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    guard let callback else { return box.bus.onTrace(nil) }
    let user = UserData(userData)
    // Not retained: the bus (inside `box`) holds the handler.
    box.bus.onTrace { [unowned(unsafe) box] trace in deliverTrace(trace, box.handle, callback, user.pointer) }
  }
}

/// A caller's `user_data`, passed back as is.
private struct UserData: @unchecked Sendable {
  let pointer: UnsafeMutableRawPointer?
  init(_ p: UnsafeMutableRawPointer?) { pointer = p }
}

/// Builds the C view of a trace in one temporary block and calls back.
private func deliverTrace(_ trace: PassTrace, _ bus: OpaquePointer, _ callback: ordo_trace_callback, _ userData: UnsafeMutableRawPointer?) {
  var block = Block<ordo_trace>()
  let changed = block.add(trace.changed)
  var lists: [(name: Int, because: Int, writes: Int, refused: Int, failure: Int)] = []
  for s in trace.steps {
    lists.append(
      (block.add([s.name]), block.add(s.because), block.add(s.writes), block.add(s.refused), block.add(s.failure.map { [$0] } ?? [])))
  }
  let steps = UnsafeMutablePointer<ordo_trace_step>.allocate(capacity: max(trace.steps.count, 1))
  defer { steps.deallocate() }
  guard
    let t = block.make({ t, arrays in
      for (i, s) in trace.steps.enumerated() {
        let l = lists[i]
        let outcome: ordo_trace_outcome =
          switch s.outcome {
          case .called: ORDO_TRACE_CALLED
          case .failed: ORDO_TRACE_FAILED
          case .unchanged: ORDO_TRACE_UNCHANGED
          case .unregistered: ORDO_TRACE_UNREGISTERED
          }
        (steps + i).initialize(
          to: ordo_trace_step(
            contract: s.contract, name: arrays[l.name][0], txn: s.transaction, outcome: outcome, initial: s.initial,
            because: arrays[l.because], n_because: s.because.count, writes: arrays[l.writes], n_writes: s.writes.count,
            refused: arrays[l.refused], n_refused: s.refused.count, failure: s.failure == nil ? nil : arrays[l.failure][0],
            duration_ns: s.durationNS))
      }
      t.pointee = ordo_trace(
        txn: trace.transaction, committed: trace.committed, changed: arrays[changed], n_changed: trace.changed.count,
        steps: UnsafePointer(steps), n_steps: trace.steps.count, duration_ns: trace.durationNS)
    })
  else { return }
  defer { free(t) }
  callback(bus, t, userData)
}

@c @implementation
public func ordo_lint(
  _ bus: OpaquePointer?, _ callback: ordo_lint_callback?, _ userData: UnsafeMutableRawPointer?, _ out_count: UnsafeMutablePointer<Int>?
) -> ordo_status {
  guarded { () throws(OrdoError) in
    let box = try CBus.from(bus)
    guard let callback else { throw invalid("callback is NULL") }
    // Found under the lock, then the callbacks without it.
    let findings = box.bus.lint()
    for f in findings {
      var block = Block<ordo_lint_finding>()
      let strings = block.add([f.earlier, f.reads, f.later, f.writes, f.keypath, f.description])
      guard
        let c = block.make({ t, arrays in
          let s = arrays[strings]
          t.pointee = ordo_lint_finding(earlier: s[0], reads: s[1], later: s[2], writes: s[3], keypath: s[4], message: s[5])
        })
      else { throw outOfMemory(0) }
      defer { free(c) }
      callback(c, userData)
    }
    out_count?.pointee = findings.count
  }
}
