/// The bus's contracts (SPEC §4): registration, removal, and the handlers
/// told about their calls (failures, traces).
extension Bus {
  /// Registers a contract (SPEC §4). With ``ContractFlags/notifyInitial`` the
  /// contract is called once with an empty `changed` list: during this call
  /// outside any transaction (its writes then form a transaction of their
  /// own, committed when the callback returns); at its position in the
  /// running pass, from a callback; and while this thread has a transaction
  /// open, not now but once for that transaction — at its position in the
  /// pass of the outermost ``commit()``, or, when the transaction changes
  /// nothing or is rolled back, at the end of that `commit` or
  /// ``rollback()`` as outside a transaction. A view registered while its
  /// model is being built renders once, with the finished model.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` (empty name, writes on an
  ///   every-transaction contract), ``OrdoError/Code/invalidKeypath``,
  ///   ``OrdoError/Code/duplicateName``, ``OrdoError/Code/cycle``,
  ///   ``OrdoError/Code/orderConflict``, ``OrdoError/Code/schema`` (with a
  ///   schema, a read or write pattern that matches no declared keypath).
  ///   Nothing changes when it throws.
  @discardableResult
  public func register(_ spec: ContractSpec) throws(OrdoError) -> ContractHandle {
    try Registration(spec, on: self).run()
  }

  /// Registers a contract (see ``register(_:)``) whose call reads
  /// `bytes` first (1 to 64, memory the caller owns): a pass that may call
  /// it starts fetching their lines before it schedules
  /// (``PrefetchHint``). For bindings whose call reads an object of theirs
  /// (the C shim's contract object).
  @discardableResult
  package func register(_ spec: ContractSpec, prefetching bytes: UnsafeRawBufferPointer) throws(OrdoError) -> ContractHandle {
    try Registration(spec, on: self, prefetchHint: PrefetchHint(bytes)).run()
  }

  /// Registers a contract. See ``register(_:)``.
  @discardableResult
  public func register(
    name: String, reads: [String], writes: [String] = [], priority: Int32? = nil, flags: ContractFlags = [],
    callback: @escaping ContractCallback
  ) throws(OrdoError) -> ContractHandle {
    try register(ContractSpec(name: name, reads: reads, writes: writes, priority: priority, flags: flags, callback: callback))
  }

  /// Unregisters a contract. It is not called afterwards, even later in the
  /// running pass.
  ///
  /// - Throws: ``OrdoError/Code/notFound`` for an unknown id.
  public func unregister(_ id: ContractID) throws(OrdoError) {
    let gone = try withGate { () throws(OrdoError) in
      let acquired = gate.acquire()
      defer { if acquired { gate.release() } }
      guard let c = contractGraph.contract(id) else { throw OrdoError(.notFound, "no contract with id \(id) on this bus") }
      return remove(c)
    }
    // The contract (and what its callback captures) is released here,
    // outside the lock.
    withExtendedLifetime(gone) {}
  }

  /// Removes a registered contract from the graph, and from the initial
  /// calls awaiting the open transaction's pass. Returns it, to be released
  /// without the lock, or nil when the registry keeps it retired until the
  /// running pass ends. Lock held; the bus owned by the calling thread.
  func remove(_ c: ContractState) -> ContractState? {
    if !passes.initialsAwaitingPass.isEmpty { passes.initialsAwaitingPass.removeAll { $0 === c } }
    return contractGraph.remove(c, inPass: gate.inPass, deferLevels: passes.hasTransaction)
  }

  /// Unregisters the contract with this name. Throws
  /// ``OrdoError/Code/notFound`` when there is none.
  public func unregister(named name: String) throws(OrdoError) {
    guard let id = withGate({ contractGraph.contract(named: name)?.id }) else {
      throw OrdoError(.notFound, "no contract named \"\(name)\" on this bus")
    }
    try unregister(id)
  }

  /// Sets the function told about every callback that fails (a thrown
  /// error), with the contract's name and the transaction id. It runs on the
  /// committing thread, without the bus's lock. Without a handler each
  /// failure is written to standard error, at most 10
  /// lines a second (the next line written says how many were left out).
  public func onFailure(_ handler: (@Sendable (ContractFailure) -> Void)?) {
    withGate { passes.failureHandler = handler }
  }

  /// What the bus does with a callback's failure besides counting it:
  /// ``FailurePolicy/report`` (the default) or
  /// ``FailurePolicy/trapInDebug``.
  public var failurePolicy: FailurePolicy {
    get { withGate { passes.failurePolicy } }
    set { withGate { passes.failurePolicy = newValue } }
  }

  /// Sets the function told about every notification pass when it ends
  /// (devtools: `docs/devtools.md`): the contracts it scheduled in order,
  /// for each the keypaths that scheduled it, its writes, refused writes,
  /// failure and duration, and those it skipped and why. It runs on the
  /// committing thread after the pass, without the bus's lock. Without a
  /// handler a pass records nothing.
  public func onTrace(_ handler: (@Sendable (PassTrace) -> Void)?) {
    withGate { passes.traceListeners[0] = handler }
  }

  /// Adds a trace listener beside ``onTrace(_:)``'s (for bridges: a D-Bus
  /// service tracing for its peers does not displace the host's own
  /// handler). Returns its key for ``removeTraceListener(_:)``.
  package func addTraceListener(_ listener: @escaping @Sendable (PassTrace) -> Void) -> UInt64 {
    withGate {
      let key = passes.nextTraceListener
      passes.nextTraceListener += 1
      passes.traceListeners[key] = listener
      return key
    }
  }

  /// Removes a listener added with ``addTraceListener(_:)``.
  package func removeTraceListener(_ key: UInt64) {
    withGate { passes.traceListeners[key] = nil }
  }

  /// Calls the trace handler, without the lock.
  func deliver(_ trace: PassTrace) {
    let listeners = withGate { passes.traceListeners.sorted { $0.key < $1.key }.map(\.value) }
    for l in listeners { l(trace) }
  }

  /// Runs `body` with the running callback's contract checks suspended on
  /// this thread: reads see the live state without contract checks, writes
  /// fail with ``OrdoError/Code/noTransaction``, registrations during a pass
  /// are placed relative to the suspended contract. For bridges that wait
  /// inside a callback (a remote writer contract awaiting its peer's answer)
  /// and meanwhile serve other clients on the same thread.
  package func withCallbackSuspended<T>(_ body: () throws -> T) rethrows -> T {
    let was = withGate { gate.setSuspended(true) }
    defer {
      if let was { withGate { _ = gate.setSuspended(was) } }
    }
    return try body()
  }
}
