/// How the Swift API's values that must not keep a bus alive — typed
/// properties (``Property``), callback contexts (``ContractContext``),
/// scopes (``KeypathScope``), observer streams (``ChangeStream``) — name
/// their bus: a small object the bus makes and detaches in its `deinit`.
/// A use after the bus is gone finds the link empty and throws
/// ``OrdoError/Code/invalidArgument`` instead of touching freed memory.
///
/// The bus is named without a reference count (no atomic operation per
/// use, see `docs/swift.md`), so the rule is the one of any object used
/// through an unowned reference: releasing the last reference to a bus on
/// one thread while another thread uses one of its properties is a data
/// race in the program. From the bus's own thread (or after every other
/// thread is done with it) a property of a released bus throws.
///
/// The link also keeps the bus's end-of-pass hooks and the owners of its
/// owner-bound contracts (guarded by the bus's lock).
@usableFromInline
final class BusLink: @unchecked Sendable {
  // Set in the bus's init, cleared in its deinit; read without a lock
  // (see above).
  private var ref: Unmanaged<Bus>?
  /// Hooks that run once when the next pass ends. Bus lock held.
  var endOfPass: [@Sendable () -> Void] = []
  /// The contracts bound to an owner, with a weak reference to it. Bus
  /// lock held.
  var owned: [ContractID: WeakOwner] = [:]

  init() {}

  func attach(_ bus: Bus) { ref = .passUnretained(bus) }
  func detach() { ref = nil }

  /// The bus as a strong reference, nil when it was deallocated.
  var bus: Bus? { ref?.takeUnretainedValue() }

  /// Runs `body` with the bus borrowed (no retain, no release); throws
  /// ``OrdoError/Code/invalidArgument`` naming `what` when the bus is gone.
  @inline(__always)
  func with<R>(_ what: @autoclosure () -> String, _ body: (Bus) throws(OrdoError) -> R) throws(OrdoError) -> R {
    guard let ref else { throw BusLink.gone(what()) }
    let result: Result<R, OrdoError> = ref._withUnsafeGuaranteedRef { bus in
      Result { () throws(OrdoError) -> R in try body(bus) }
    }
    return try result.get()
  }

  /// The write of ``Property/set(_:)``: one borrow of the bus, no closure
  /// context, no intermediate result (the typed path's cost over the handle
  /// path is measured by `ordo-bench`, `delivery-typed`).
  @usableFromInline
  func set(_ h: Handle, _ v: Value) throws(OrdoError) {
    guard let ref else { throw BusLink.gone("property \"\(h.keypath)\"") }
    var failure: OrdoError?
    ref._withUnsafeGuaranteedRef { bus in
      do throws(OrdoError) { try bus.set(h, v) } catch { failure = error }
    }
    if let failure { throw failure }
  }

  static func gone(_ what: String) -> OrdoError {
    OrdoError(.invalidArgument, "\(what): its bus was deallocated (a property, context, scope or stream does not keep its bus alive)")
  }

  /// Takes the end-of-pass hooks. Bus lock held.
  func takeEndOfPassHooks() -> [@Sendable () -> Void] {
    guard !endOfPass.isEmpty else { return [] }
    defer { endOfPass = [] }
    return endOfPass
  }
}

/// A weak reference to a contract's owner.
struct WeakOwner {
  weak var object: AnyObject?
}

extension Bus {
  /// Runs `hook` once, on the committing thread, when the pass running on
  /// this thread ends — after its last contract, after the transaction was
  /// committed (or refused by a persistence layer), without the bus's lock,
  /// before `commit` returns. Outside a pass (or from a thread that does not
  /// run the pass) it runs when the next pass of this bus ends, on that
  /// pass's thread. A transaction that changes nothing has no pass and does
  /// not run hooks.
  ///
  /// The hook may use the bus freely: the pass is over, so its reads see
  /// the committed state and a write needs a transaction of its own (which
  /// runs its own pass and its own hooks). Quantwm's "once at the end of the
  /// refresh", for work that must see every contract's result: a layout
  /// pass, a redraw request, an undo-group boundary.
  public func atEndOfPass(_ hook: @escaping @Sendable () -> Void) {
    gate.lock.lock()
    link.endOfPass.append(hook)
    gate.lock.unlock()
  }
}
