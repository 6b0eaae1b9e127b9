/// The rules that the reads and writes of a running callback obey (SPEC §5),
/// and the rule that writes need a transaction (SPEC §3). Each check changes
/// nothing when it fails, and its message names the contract, the keypath
/// and the rule.
enum Rules {
  /// A write outside any transaction or callback (SPEC §3).
  static func noTransaction(_ op: WriteOp, _ k: String) -> OrdoError {
    OrdoError(.noTransaction, "\(op.name) \"\(k)\" outside a transaction: call begin first")
  }

  /// A value every surface can carry (SPEC §2; docs/semantics.md): a
  /// string without U+0000, which C strings (`ordo_get_string`) and D-Bus
  /// strings cannot hold, so a reader there would get it cut short.
  @inline(never)
  static func checkString(_ s: String, _ t: Target) throws(OrdoError) {
    if let e = nulCharacterError(s, keypath: t.keypath) { throw e }
  }

  /// The running contract's write rules: the write set allows the write
  /// (for removeTree, the keypath and all its descendants), and no contract
  /// placed before it in the pass reads what it writes (stability, checked
  /// before the equal-value test). Marks the write pattern used.
  static func checkWrite(_ c: ContractState, _ t: Target, _ op: WriteOp, _ graph: ContractGraph) throws(OrdoError) {
    let keyIDs = t.ids
    var allowed: Int?
    for (i, w) in c.writes.enumerated() {
      if case .removeTree = op { if w.coversTree(keyIDs) { allowed = i; break } } else if w.matches(keyIDs) {
        allowed = i
        break
      }
    }
    let k = t.keypath
    guard let i = allowed else {
      let set = c.writes.isEmpty ? "its write set is empty" : "its write set is \(graph.text(c.writes))"
      let what: String
      if case .removeTree = op {
        what = "removeTree \"\(k)\" (needs a pattern covering \"\(k)\" and all its descendants, such as \"\(k).**\")"
      } else {
        what = "\(op.name) \"\(k)\""
      }
      throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not \(what): \(set)")
    }
    // Readers compared by their pass states' order keys: a contract's
    // object is read only for the message.
    let key = c.key
    var earlier: (ref: ContractRef, key: OrderKey)?
    graph.forEachReader(affectedBy: t) { r in
      let rk = r.key
      if rk < key, earlier.map({ rk < $0.key }) ?? true { earlier = (r, rk) }
    }
    if let e = earlier {
      throw OrdoError(.stability, "contract \"\(c.name)\" may not \(op.name) \"\(k)\": contract \"\(e.ref.contract.name)\", placed before it in the pass, reads it")
    }
    c.usedWrites |= ContractState.bit(i)
  }

  /// The running contract's read rule: a keypath read through the bus is
  /// matched by its read or write set (every-transaction contracts may read
  /// anything). Marks the read pattern used.
  static func checkRead(_ c: ContractState, _ k: String, _ keyIDs: [UInt32], _ graph: ContractGraph) throws(OrdoError) {
    if c.kind == .everyTransaction { return }
    for (i, r) in c.reads.enumerated() where r.matches(keyIDs) {
      c.usedReads |= ContractState.bit(i)
      return
    }
    for w in c.writes where w.matches(keyIDs) { return }
    throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not read \"\(k)\": its read set is \(graph.text(c.reads)) and its write set \(graph.text(c.writes))")
  }

  /// The read rule for a query by patterns (snapshot, changes, a scope's
  /// values): each pattern is covered by one of the contract's read or
  /// write patterns. Marks used the read patterns a query covers or is
  /// covered by (checked in full first: a refused query marks nothing).
  static func checkRead(_ c: ContractState, patterns: [CPattern], as written: [String]) throws(OrdoError) {
    if c.kind == .everyTransaction { return }
    for (i, p) in patterns.enumerated() where !c.reads.contains(where: { $0.covers(p) }) && !c.writes.contains(where: { $0.covers(p) }) {
      throw OrdoError(.contractViolation, "contract \"\(c.name)\" may not read \"\(written[i])\": outside its read and write sets")
    }
    for p in patterns {
      for (i, r) in c.reads.enumerated() where r.covers(p) || p.covers(r) { c.usedReads |= ContractState.bit(i) }
    }
  }
}
