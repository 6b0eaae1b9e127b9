/// What ``Bus/register(_:)`` does, in its order: the spec checked without
/// the lock; under the lock the contract made, admitted (name, order,
/// cycles) and inserted; then, with ``ContractFlags/notifyInitial``, its
/// initial call where the calling thread stands — at its position in the
/// running pass, in a pass of its own outside any transaction, in the pass
/// of the transaction that is open (or after it, when it ends without one:
/// ``Bus/runAwaitedInitials(_:)``), or now inside the initial call that
/// opened a pass. What goes (a refused or retired contract, rollback
/// actions, end-of-pass hooks) goes once the lock is let go.
struct Registration {
  let bus: Bus
  let spec: ContractSpec
  let reads: [Pattern]
  let writes: [Pattern]
  /// What the contract's call reads first, outside the core, if it says.
  let prefetchHint: PrefetchHint?

  /// Checks the spec: a name of 1 to 255 bytes, valid patterns, no writes
  /// on an every-transaction contract (empty read set), and with a schema
  /// patterns that each match a declared keypath.
  init(_ spec: ContractSpec, on bus: Bus, prefetchHint: PrefetchHint? = nil) throws(OrdoError) {
    guard !spec.name.isEmpty else { throw OrdoError(.invalidArgument, "a contract needs a non-empty name") }
    guard spec.name.utf8.count <= 255 else {
      throw OrdoError(.invalidArgument, "contract name \"\(spec.name.prefix(40))…\" is longer than 255 bytes")
    }
    reads = try Bus.parse(spec.reads)
    writes = try Bus.parse(spec.writes)
    if reads.isEmpty && !writes.isEmpty {
      throw OrdoError(.invalidArgument, "contract \"\(spec.name)\" has an empty read set (every-transaction) and may not write; its write set is [\(spec.writes.joined(separator: ", "))]")
    }
    try bus.checkSchema(spec, reads: reads, writes: writes)
    self.spec = spec
    self.bus = bus
    self.prefetchHint = prefetchHint
  }

  /// What is left to do once the lock is let go.
  private struct Leftovers {
    var result: Result<ContractHandle, OrdoError>
    /// Released without the lock: the new contract's reference from here
    /// (the last one when it was refused or unregistered itself).
    var released: ContractState
    /// What the initial call leaves: contracts it retired, rollback
    /// actions, end-of-pass hooks.
    var ending = InitialPassEnding()
  }

  /// Registers the contract; throws what admission refused.
  func run() throws(OrdoError) -> ContractHandle {
    let left = bus.withGate { admitAndCall() }
    withExtendedLifetime(left.released) {}
    left.ending.settle()
    return try left.result.get()
  }

  /// Admission and the initial call. Lock held.
  private func admitAndCall() -> Leftovers {
    let gate = bus.gate, graph = bus.contractGraph, passes = bus.passes
    let initial = spec.flags.contains(.notifyInitial)
    let acquired = gate.acquire()
    let c = graph.make(spec, reads: reads, writes: writes)
    if let prefetchHint { graph.slab.setPrefetchHint(prefetchHint, of: c.passState) }
    do {
      try graph.admit(c, initialDuringPassAfter: initial && passes.hasTransaction ? gate.running ?? passes.failing : nil)
    } catch {
      if acquired { gate.release() }
      return Leftovers(result: .failure(error), released: c)
    }
    graph.insert(c, deferLevels: passes.hasTransaction)
    var left = Leftovers(result: .success(ContractHandle(id: c.id, name: c.name, bus: bus)), released: c)
    guard initial else {
      if acquired { gate.release() }
      return left
    }
    switch gate.phase {
    case .pass where passes.hasTransaction:
      passes.scheduleInitial(c)
    case .idle:
      // Outside any transaction: the initial call opens a pass of its own.
      left.ending = bus.runInitialPass(c)
    case .open, .openOwned:
      // Inside an open transaction: called once, in its pass or after it.
      passes.initialsAwaitingPass.append(c)
    case .pass:
      // Inside the initial call that opened a pass: called now; its writes
      // join that pass.
      passes.callInitial(c)
    }
    return left
  }
}

/// What an initial call in a pass of its own leaves to do once the lock is
/// let go.
struct InitialPassEnding {
  /// Contracts unregistered during the call, released without the lock.
  var retired: [ContractState] = []
  /// Rollback actions of a refused pass, run last first.
  var undo: [@Sendable () -> Void] = []
  /// End-of-pass hooks.
  var hooks: [@Sendable () -> Void] = []

  /// Releases, undoes and runs the hooks, in that order. Without the lock.
  func settle() {
    withExtendedLifetime(retired) {}
    for action in undo.reversed() { action() }
    for hook in hooks { hook() }
  }
}

extension Bus {
  /// The initial call of `c` in a pass of its own, outside any transaction
  /// (SPEC §5). Lock and ownership held on entry; ownership given up on
  /// return.
  func runInitialPass(_ c: ContractState) -> InitialPassEnding {
    let outcome = passes.runInitial(c)
    if let trace = outcome.trace { withoutGate { deliver(trace) } }
    var ending = InitialPassEnding(retired: outcome.retired, hooks: passEnded(outcome))
    if let refusal = outcome.refusal {
      passes.report(ContractFailure(contract: c.id, name: c.name, transaction: 0, message: refusal.description))
      ending.undo = outcome.undo
    }
    return ending
  }

  /// The initial calls of contracts registered inside a transaction that
  /// ended (committed without changes, or rolled back) without a pass that
  /// called them: each, still registered, in a pass of its own, as if
  /// registered outside any transaction. Without the lock.
  func runAwaitedInitials(_ contracts: [ContractState]) {
    for c in contracts {
      let ending = withGate { () -> InitialPassEnding in
        guard c.registered else { return InitialPassEnding() }
        _ = gate.acquire()
        return runInitialPass(c)
      }
      ending.settle()
    }
  }
}

extension Bus {
  /// Calls the registered contract `id` once more as an initial call (SPEC
  /// §5: an empty `changed` list, the last committed id) in a pass of its
  /// own, as its registration with ``ContractFlags/notifyInitial`` outside
  /// any transaction does. For bridges whose remote contract computes what
  /// it writes and missed calls (a writer back after a suspension). Never
  /// waits for the bus: returns false, calling nothing, when any thread
  /// holds it (the calling one too: an open transaction, a callback) or
  /// waits for it, or when `id` is not registered.
  package func callInitial(_ id: ContractID) -> Bool {
    let ending = withGate { () -> InitialPassEnding? in
      guard gate.tryAcquire() else { return nil }
      guard case .idle = gate.phase, let c = contractGraph.contract(id), c.registered else {
        gate.release()
        return nil
      }
      return runInitialPass(c)
    }
    ending?.settle()
    return ending != nil
  }
}
