import Synchronization

/// How the Swift API's values that must not keep a bus alive — typed
/// properties (``Property``), callback contexts (``ContractContext``),
/// scopes (``KeypathScope``), observer streams (``ChangeStream``) — name
/// their bus: a small object the bus makes and detaches in its `deinit`.
/// A use after the bus is gone finds the link empty and throws
/// ``OrdoError/Code/invalidArgument`` instead of touching freed memory.
///
/// The bus is named without a reference count (no read-modify-write per
/// use, see `docs/swift.md`), by an atomic word the bus's `deinit` clears
/// with a release store and every use reads with an acquire load: a use
/// that reads the cleared word throws, on any thread. A use that is under
/// way while the last reference goes keeps the rule of any object used
/// through an unowned reference: the program must not release a bus
/// while another thread is inside one of its properties' calls.
///
/// The link also keeps the bus's end-of-pass hooks and the owners of its
/// owner-bound contracts (guarded by the bus's lock).
@usableFromInline
final class BusLink: @unchecked Sendable {
  /// The bus's address, 0 once it is gone: set in the bus's init, cleared
  /// in its deinit, read without a lock (see above).
  /// Unretained: docs/reliability.md, "Unretained references", row "the bus a link names".
  private let address = Atomic<UInt>(0)
  /// Hooks that run once when the next pass ends. Bus lock held (so
  /// exclusivity is unchecked: every commit reads it).
  @exclusivity(unchecked) var endOfPass: [@Sendable () -> Void] = []
  /// The contracts bound to an owner, with a weak reference to it. Bus
  /// lock held (so exclusivity is unchecked: every commit reads it).
  @exclusivity(unchecked) var owned: [ContractID: WeakOwner] = [:]
  /// The instance number of each owner a contract name was derived from
  /// (``Bus/register(owner:role:reads:writes:priority:flags:_:)-(_,_,[String],_,_,_,_)``),
  /// by object, and the last number given for each type. Bus lock held.
  var ownerNumbers: [ObjectIdentifier: (owner: WeakOwner, number: Int)] = [:]
  var lastOwnerNumber: [String: Int] = [:]
  /// Whether the bus made a handle or a typed property: then the link
  /// keeps their nodes once the bus is gone (bus lock held to set it).
  var keepsPinned = false
  /// The nodes named by the bus's handles and typed properties, kept from
  /// the bus's deinit on (see ``Handle``, ``Property``).
  private var keptNodes: [KeyNode] = []

  init() {}

  func attach(_ bus: Bus) {
    address.store(UInt(bitPattern: Unmanaged.passUnretained(bus).toOpaque()), ordering: .releasing)
  }

  /// Called first in the bus's deinit, while its store still holds its
  /// nodes. A ``Handle`` or a ``Property`` names its node without a
  /// reference count: while the bus lives its store keeps the node (their
  /// nodes are pinned, and pinned nodes are never pruned); from here on the
  /// link does, so one that outlives its bus can still name its keypath.
  func detach() {
    if keepsPinned, let ref {
      ref._withUnsafeGuaranteedRef { bus in
        bus.store.root.forEachInSubtree { n in if n.ref.state.pointee.pinned { keptNodes.append(n) } }
      }
    }
    address.store(0, ordering: .releasing)
    // Hooks of a bus that is gone never run; they may capture properties
    // (which hold the link): release them now rather than with the link.
    endOfPass = []
  }

  /// The bus as a strong reference, nil when it was deallocated.
  var bus: Bus? { ref?.takeUnretainedValue() }

  /// The bus, unretained, nil once it is gone.
  @inline(__always)
  private var ref: Unmanaged<Bus>? {
    UnsafeRawPointer(bitPattern: address.load(ordering: .acquiring)).map { Unmanaged<Bus>.fromOpaque($0) }
  }

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

  /// The write of ``Property/set(_:)``, the one call it makes: the bus
  /// borrowed, its lock, the bus's one write path with the node already
  /// found — what ``Bus/set(_:_:)-(Handle,_)`` does, without its check that
  /// the handle belongs to the bus (a property's node always does). See
  /// `docs/swift.md` for what the typed path costs over the handle path.
  @usableFromInline
  func set(_ node: UnsafeRawPointer, _ value: Value, _ rule: SchemaRule) throws(OrdoError) {
    try write(node, .set(value), rule)
  }

  /// A write to a property's node (see ``set(_:_:_:)``); `rule` is what the
  /// bus's schema asks of it (``SchemaRule``).
  @inline(__always)
  func write(_ node: UnsafeRawPointer, _ op: WriteOp, _ rule: SchemaRule) throws(OrdoError) {
    let n = NodeRef(property: node)
    // The state's line is asked for first (see ``HandleAddress/set(_:)``).
    fetchEarlyForWrite(node)
    guard let ref else { throw BusLink.gone(property: n) }
    var failure: OrdoError?
    ref._withUnsafeGuaranteedRef { bus in
      do throws(OrdoError) { try bus.writeProperty(n, op, rule) } catch { failure = error }
    }
    if let failure { throw failure }
  }

  /// ``gone(_:)`` for the property of `node`.
  @inline(never)
  static func gone(property node: NodeRef) -> OrdoError {
    gone("property \"\(node.node.key)\"")
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
    withGate { link.endOfPass.append(hook) }
  }
}
