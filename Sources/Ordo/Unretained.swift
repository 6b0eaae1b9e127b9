/// A reference that does not keep its object alive: how the core names an
/// object it does not own where it names the object itself (the debug
/// check of an ``UnretainedTable``'s entries); the hot paths name key nodes
/// and contracts by their states instead (``NodeRef``, ``ContractRef``).
/// Every use states an invariant of the owner — "the object outlives this
/// reference" — which `docs/reliability.md` lists, owner by owner.
///
/// In debug builds the reference also keeps a weak reference and checks on
/// every use that the object is still alive, so a broken invariant traps at
/// the use rather than corrupting memory (the tests run in debug builds, and
/// `make asan` adds AddressSanitizer on top). Release builds keep only the
/// address.
struct Unretained<T: AnyObject> {
  private let ref: Unmanaged<T>
  #if DEBUG
  private weak var alive: T?
  #endif

  @inline(__always)
  init(_ object: T) {
    ref = .passUnretained(object)
    #if DEBUG
    alive = object
    #endif
  }

  /// The object, as a strong reference for the caller's scope.
  @inline(__always)
  var object: T {
    check()
    return ref.takeUnretainedValue()
  }

  @inline(__always)
  private func check() {
    #if DEBUG
    precondition(alive != nil, "Ordo: an unretained \(T.self) was used after its owner released it")
    #endif
  }
}
