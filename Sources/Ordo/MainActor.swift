import Dispatch

/// Tells whether the calling code runs on the main actor without trapping
/// (`MainActor.assumeIsolated` traps when it does not). The main actor's
/// executor is the main dispatch queue (the default main executor), whose
/// jobs do not always run on the main thread (after `dispatchMain()` a worker
/// thread drains the main queue), so the test is "running a block of the
/// main queue", through a queue-specific value set on it once.
enum MainActorCheck {
  private static let key: DispatchSpecificKey<UInt8> = {
    let key = DispatchSpecificKey<UInt8>()
    DispatchQueue.main.setSpecific(key: key, value: 1)
    return key
  }()

  /// Sets the queue-specific value; call from the main actor first.
  static func prepare() { _ = key }

  static var onMainActor: Bool { DispatchQueue.getSpecific(key: key) != nil }

  /// Runs `body` on the main actor: now when the calling code runs there,
  /// else in a main-actor task, later.
  static func run(_ body: @escaping @MainActor () -> Void) {
    if onMainActor { MainActor.assumeIsolated(body) } else { Task { @MainActor in body() } }
  }
}

/// The bus's handlers and hooks for main-actor code: each runs its closure
/// at once when it is called on the main actor (an app that commits on the
/// main actor), and otherwise in a main-actor task, later (the pass does not
/// wait for the main actor).
extension Bus {
  /// ``onFailure(_:)`` with a handler isolated to the main actor.
  @MainActor
  public func onFailureOnMainActor(_ handler: (@MainActor (ContractFailure) -> Void)?) {
    MainActorCheck.prepare()
    guard let handler else { return onFailure(nil) }
    onFailure { failure in MainActorCheck.run { handler(failure) } }
  }

  /// ``onTrace(_:)`` with a handler isolated to the main actor.
  @MainActor
  public func onTraceOnMainActor(_ handler: (@MainActor (PassTrace) -> Void)?) {
    MainActorCheck.prepare()
    guard let handler else { return onTrace(nil) }
    onTrace { trace in MainActorCheck.run { handler(trace) } }
  }

  /// ``atEndOfPass(_:)`` with a hook isolated to the main actor.
  @MainActor
  public func atEndOfPassOnMainActor(_ hook: @escaping @MainActor () -> Void) {
    MainActorCheck.prepare()
    atEndOfPass { MainActorCheck.run(hook) }
  }

  /// ``onRollback(_:)`` with an action isolated to the main actor.
  ///
  /// - Throws: like ``onRollback(_:)``.
  @MainActor
  public func onRollbackOnMainActor(_ action: @escaping @MainActor () -> Void) throws(OrdoError) {
    MainActorCheck.prepare()
    try onRollback { MainActorCheck.run(action) }
  }
}

extension ContractContext {
  /// ``atEndOfPass(_:)`` with a hook isolated to the main actor (see
  /// ``Bus/atEndOfPassOnMainActor(_:)``).
  @MainActor
  public func atEndOfPassOnMainActor(_ hook: @escaping @MainActor () -> Void) throws(OrdoError) {
    MainActorCheck.prepare()
    try atEndOfPass { MainActorCheck.run(hook) }
  }
}

extension Bus {
  /// Registers a contract whose callback is isolated to the main actor, for
  /// contracts that update `@MainActor` state (views, view models) in an
  /// app that commits its transactions on the main actor. The callback
  /// runs synchronously inside the pass, like every contract, so it sees
  /// the stable state of SPEC §5 and may write through its context.
  ///
  /// ```swift
  /// @MainActor final class TitleLabel { var text = "" }
  ///
  /// @MainActor func bind(_ label: TitleLabel, _ bus: Bus) throws {
  ///   try bus.registerOnMainActor(name: "label", reads: ["doc.title"]) { ctx in
  ///     label.text = try ctx.value("doc.title").map(\.description) ?? ""
  ///   }
  /// }
  /// ```
  ///
  /// **A commit from another thread.** The pass runs on the committing
  /// thread, and a main-actor callback cannot run there. Ordo does not hop
  /// to the main actor (the call would then happen after the pass, with no
  /// stable state to read and no way to write into the transaction);
  /// instead the callback is not called and the bus reports a failure to
  /// its failure handler (``onFailure(_:)``), as for a callback that threw:
  /// an ``OrdoError/Code/invalidArgument`` message that names the contract
  /// and the transaction. The pass goes on. To react to changes committed
  /// on other threads from the main actor, iterate a ``ChangeStream`` in a
  /// main-actor task instead.
  ///
  /// With ``ContractFlags/notifyInitial`` outside a pass the initial call
  /// happens during this call, on the main actor. "On the main actor" means
  /// running on the main dispatch queue, the default main executor's (a
  /// custom main executor is not supported).
  ///
  /// - Throws: like ``register(_:)``.
  @MainActor
  @discardableResult
  public func registerOnMainActor(
    name: String, reads: [String], writes: [String] = [], priority: Int32? = nil, flags: ContractFlags = [],
    _ body: @escaping @MainActor (ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    let link = self.link
    MainActorCheck.prepare()
    return try register(name: name, reads: reads, writes: writes, priority: priority, flags: flags, callback: { note in
      guard MainActorCheck.onMainActor else {
        throw OrdoError(.invalidArgument, "contract \"\(name)\" runs on the main actor, but transaction \(note.transaction) was committed on another thread: it was not called (commit on the main actor, or observe with a ChangeStream)")
      }
      try MainActor.assumeIsolated { () throws -> Void in try body(ContractContext(note, link)) }
    })
  }

  /// ``registerOnMainActor(owner:name:reads:writes:priority:flags:_:)``
  /// under a name derived from the owner's type, the contract's role and
  /// the owner's instance number (see
  /// ``register(owner:role:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``).
  ///
  /// - Throws: like ``register(_:)``.
  @MainActor
  @discardableResult
  public func registerOnMainActor<Object: AnyObject & Sendable>(
    owner: Object, role: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping @MainActor (Object, ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    try registerOnMainActor(
      owner: owner, name: contractName(owner: owner, role: role), reads: reads, writes: writes, priority: priority, flags: flags, body)
  }

  /// Registers an owner-bound contract (see
  /// ``register(owner:name:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``) whose callback
  /// is isolated to the main actor (see
  /// ``registerOnMainActor(name:reads:writes:priority:flags:_:)-(_,[String],_,_,_,_)``): a view
  /// controller's contract that goes away with it.
  ///
  /// - Throws: like ``register(_:)``.
  @MainActor
  @discardableResult
  public func registerOnMainActor<Object: AnyObject & Sendable>(
    owner: Object, name: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping @MainActor (Object, ContractContext) throws -> Void
  ) throws(OrdoError) -> ContractHandle {
    MainActorCheck.prepare()
    return try register(owner: owner, name: name, reads: reads, writes: writes, priority: priority, flags: flags) { owner, ctx in
      guard MainActorCheck.onMainActor else {
        throw OrdoError(.invalidArgument, "contract \"\(name)\" runs on the main actor, but transaction \(ctx.transaction) was committed on another thread: it was not called (commit on the main actor, or observe with a ChangeStream)")
      }
      try MainActor.assumeIsolated { () throws -> Void in try body(owner, ctx) }
    }
  }
}
