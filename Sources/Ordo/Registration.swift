/// What ``Bus/register(_:)`` does, in its order: the spec checked without
/// the lock; under the lock the contract made, admitted (name, order,
/// cycles) and inserted; then, with ``ContractFlags/notifyInitial``, its
/// initial call where the calling thread stands — at its position in the
/// running pass, in a pass of its own outside any transaction, or now
/// inside the transaction that is open. What goes (a refused or retired
/// contract, rollback actions, end-of-pass hooks) goes once the lock is
/// let go.
struct Registration {
  let bus: Bus
  let spec: ContractSpec
  let reads: [Pattern]
  let writes: [Pattern]

  /// Checks the spec: a name of 1 to 255 bytes, valid patterns, no writes
  /// on an every-transaction contract (empty read set).
  init(_ spec: ContractSpec, on bus: Bus) throws(OrdoError) {
    guard !spec.name.isEmpty else { throw OrdoError(.invalidArgument, "a contract needs a non-empty name") }
    guard spec.name.utf8.count <= 255 else {
      throw OrdoError(.invalidArgument, "contract name \"\(spec.name.prefix(40))…\" is longer than 255 bytes")
    }
    reads = try Bus.parse(spec.reads)
    writes = try Bus.parse(spec.writes)
    if reads.isEmpty && !writes.isEmpty {
      throw OrdoError(.invalidArgument, "contract \"\(spec.name)\" has an empty read set (every-transaction) and may not write; its write set is [\(spec.writes.joined(separator: ", "))]")
    }
    self.spec = spec
    self.bus = bus
  }

  /// What is left to do once the lock is let go.
  private struct Leftovers {
    var result: Result<ContractHandle, OrdoError>
    /// Released without the lock: contracts retired during the initial
    /// call, and the new contract's reference from here (the last one when
    /// it was refused or unregistered itself).
    var released: ([ContractState], ContractState)
    /// Rollback actions of a refused initial pass, run last first.
    var undo: [@Sendable () -> Void] = []
    var hooks: [@Sendable () -> Void] = []
  }

  /// Registers the contract; throws what admission refused.
  func run() throws(OrdoError) -> ContractHandle {
    let left = bus.withGate { admitAndCall() }
    withExtendedLifetime(left.released) {}
    for action in left.undo.reversed() { action() }
    for hook in left.hooks { hook() }
    return try left.result.get()
  }

  /// Admission and the initial call. Lock held.
  private func admitAndCall() -> Leftovers {
    let gate = bus.gate, graph = bus.contractGraph, passes = bus.passes
    let initial = spec.flags.contains(.notifyInitial)
    let acquired = gate.acquire()
    let c = graph.make(spec, reads: reads, writes: writes)
    do {
      try graph.admit(c, initialDuringPassAfter: initial && passes.hasTransaction ? gate.running : nil)
    } catch {
      if acquired { gate.release() }
      return Leftovers(result: .failure(error), released: ([], c))
    }
    graph.insert(c, deferLevels: passes.hasTransaction)
    var left = Leftovers(result: .success(ContractHandle(id: c.id, name: c.name, bus: bus)), released: ([], c))
    guard initial else {
      if acquired { gate.release() }
      return left
    }
    switch gate.phase {
    case .pass where passes.hasTransaction:
      passes.scheduleInitial(c)
    case .idle:
      // Outside any transaction: the initial call opens a pass of its own.
      let outcome = passes.runInitial(c)
      if let trace = outcome.trace { bus.withoutGate { bus.deliver(trace) } }
      left.hooks = bus.passEnded(outcome)
      left.released.0 = outcome.retired
      if let refusal = outcome.refusal {
        passes.report(ContractFailure(contract: c.id, name: c.name, transaction: 0, message: refusal.description))
        left.undo = outcome.undo
      }
    default:
      // Inside an open transaction, an initial call, or the initial call
      // that opened a pass: called now; its writes join what is open.
      passes.callInitial(c)
      if !gate.inPass { left.released.0 = graph.takeRetired() }
    }
    return left
  }
}
