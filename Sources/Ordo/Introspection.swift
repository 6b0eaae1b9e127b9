/// What a bus tells about itself: its contracts in pass order, its
/// statistics, and its dependency graph in Graphviz DOT.
extension Bus {
  /// Every registered contract, in pass order.
  public func contracts() -> [ContractInfo] {
    withGate {
      // An owner-bound contract whose owner is gone is as good as
      // unregistered: it is never called again.
      let dead = contractsOfDeadOwners()
      let sorted = contractGraph.registry.live.filter { !dead.contains($0.id) }.sorted { $0.key < $1.key }
      return sorted.enumerated().map { i, c in
        ContractInfo(
          id: c.id, name: c.name, kind: c.kind, reads: c.reads.map(store.text), writes: c.writes.map(store.text),
          priority: c.priority, level: c.level, position: i, calls: c.passState.pointee.calls,
          lastTransaction: c.passState.pointee.lastTransaction, failures: contractGraph.failures[c.id] ?? 0,
          unusedReads: c.reads.enumerated().filter { c.usedReads & ContractState.bit($0.offset) == 0 }.map { store.text($0.element) },
          unusedWrites: c.writes.enumerated().filter { c.usedWrites & ContractState.bit($0.offset) == 0 }.map { store.text($0.element) })
      }
    }
  }

  /// The contract with this id, if registered.
  public func contract(_ id: ContractID) -> ContractInfo? {
    contracts().first { $0.id == id }
  }

  /// The id of the contract whose callback runs on this thread now, if any.
  public var currentContract: ContractID? { withGate { gate.running?.id } }

  /// Counts kept since the bus was made.
  public var statistics: BusStatistics {
    withGate {
      BusStatistics(
        contracts: contractGraph.registry.count, transactions: visibleTransaction(),
        notifications: passes.notifications, failures: passes.failures, rollbacks: rollbackCount, conflicts: conflictCount, values: store.valueCount,
        ownedValues: store.ownership.count)
    }
  }

  /// The dependency graph in Graphviz DOT: contracts (boxes, in pass order,
  /// labelled with priority or level) and the patterns they read (edges into
  /// the contract) and write (edges out of it).
  public func graph() -> String {
    let list = contracts()
    func escape(_ s: String) -> String { s.replacingAll("\\", "\\\\").replacingAll("\"", "\\\"") }
    func quote(_ s: String) -> String { "\"" + escape(s) + "\"" }
    var out = "digraph ordo {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n"
    var patterns = Set<String>()
    for c in list {
      let rank = c.priority.map { "priority \($0)" } ?? (c.kind == .everyTransaction ? "every transaction" : "level \(c.level)")
      out += "  \(quote("c:" + c.name)) [shape=box, label=\"#\(c.position) \(escape(c.name))\\n\(rank)\"];\n"
      patterns.formUnion(c.reads)
      patterns.formUnion(c.writes)
    }
    for p in patterns.sorted() {
      out += "  \(quote("k:" + p)) [shape=ellipse, label=\(quote(p))];\n"
    }
    for c in list {
      for r in c.reads { out += "  \(quote("k:" + r)) -> \(quote("c:" + c.name));\n" }
      for w in c.writes { out += "  \(quote("c:" + c.name)) -> \(quote("k:" + w)) [style=bold];\n" }
    }
    return out + "}\n"
  }
}

extension String {
  /// The string with every `target` replaced by `replacement`.
  func replacingAll(_ target: String, _ replacement: String) -> String {
    guard contains(target) else { return self }
    return split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
  }
}
