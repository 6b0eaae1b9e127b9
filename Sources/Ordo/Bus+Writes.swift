/// The bus's writes by keypath beside ``Bus/set(_:_:)-(String,_)``, each
/// through the one write path (``Bus/write(_:_:)``) under the lock.
extension Bus {
  /// Marks `keypath` changed without storing a value (for values that live
  /// in the host program). Throws like ``set(_:_:)-(String,_)``.
  public func touch(_ keypath: String) throws(OrdoError) {
    try withGate { () throws(OrdoError) in try write(store.writeTarget(keypath, .touch), .touch) }
  }

  /// Removes the value of `keypath` (no change if it has none). Throws like
  /// ``set(_:_:)-(String,_)``.
  public func remove(_ keypath: String) throws(OrdoError) {
    try withGate { () throws(OrdoError) in try write(store.writeTarget(keypath, .remove), .remove) }
  }

  /// Removes the values of `keypath` and of every descendant. Inside a
  /// callback the write set must allow the keypath and all its descendants
  /// (e.g. `k.**`). Throws like ``set(_:_:)-(String,_)``.
  public func removeTree(_ keypath: String) throws(OrdoError) {
    try withGate { () throws(OrdoError) in try write(store.writeTarget(keypath, .removeTree), .removeTree) }
  }

  /// Sets the value of a keypath given as UTF-8 bytes when the store has it,
  /// through the one write path. Returns false, doing nothing, when the
  /// store does not have the keypath; the caller then calls ``set(_:_:)``
  /// with a `String`. For bridges that receive keypaths as C strings: the
  /// common write makes no `String`.
  package func setExisting(utf8 keypath: UnsafeBufferPointer<UInt8>, _ value: Value) throws(OrdoError) -> Bool {
    // withLock, as set(_:_:): the write may be held back.
    try withLock { () throws(OrdoError) in
      guard let n = store.existing(utf8: UnsafeRawBufferPointer(keypath)) else { return false }
      let op = WriteOp.set(value)
      if !n._withUnsafeGuaranteedRef({ $0.schemaRule.admits(op) }) { try checkSchema(n._withUnsafeGuaranteedRef { $0.key }, op) }
      try write(.node(n._withUnsafeGuaranteedRef { $0.ref }), op)
      return true
    }
  }

  /// Writes several keypaths at once, all or nothing: every keypath and every
  /// contract rule is checked before anything changes. For surfaces that
  /// receive a set of writes in one message (D-Bus `Commit`, `Complete`).
  ///
  /// - Throws: like ``set(_:_:)``, for the first write that is refused; then
  ///   none of the writes is applied.
  package func write(_ batch: [Write]) throws(OrdoError) {
    guard !batch.isEmpty else { return }
    try withGate { () throws(OrdoError) in
      var resolved: [(Target, WriteOp)] = []
      resolved.reserveCapacity(batch.count)
      for w in batch {  // every keypath is valid before anything else
        switch w {
        case .set(let k, let v):
          let t = try store.writeTarget(k, .set(v))
          if case .string(let s) = v { try Rules.checkString(s, t) }
          resolved.append((t, .set(v)))
        case .touch(let k): resolved.append((try store.writeTarget(k, .touch), .touch))
        case .remove(let k): resolved.append((try store.writeTarget(k, .remove), .remove))
        case .removeTree(let k): resolved.append((try store.writeTarget(k, .removeTree), .removeTree))
        }
      }
      let access = gate.writeAccess
      switch access {
      case .refused: throw Rules.noTransaction(resolved[0].1, resolved[0].0.keypath)
      case .free, .owned: break
      case .contract(let c):
        for (t, op) in resolved {
          do throws(OrdoError) { try Rules.checkWrite(c, t, op, contractGraph) } catch {
            passes.recorder?.refused(t.keypath, error)
            throw error
          }
        }
      }
      for (t, op) in resolved { apply(t, op, access) }
    }
  }

  /// Checks that the calling thread may write `keypath` now, without
  /// writing. For host-owned values (see ``HostedProperty``), whose
  /// equal-value set changes nothing but obeys the same rules as a stored
  /// value's (SPEC §5: stability is checked before the equal-value test).
  func checkWrite(_ keypath: String) throws(OrdoError) {
    try withGate { () throws(OrdoError) in
      let t = try store.writeTarget(keypath, .touch)
      switch gate.writeAccess {
      case .refused: throw Rules.noTransaction(.touch, keypath)
      case .free, .owned: break
      case .contract(let c): try Rules.checkWrite(c, t, .touch, contractGraph)
      }
    }
  }
}
