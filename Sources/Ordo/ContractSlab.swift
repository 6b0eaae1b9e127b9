import Synchronization

/// What a pass touches of a contract, in one cache line: what scheduling
/// reads and writes (its order key, whether it is registered, the pass
/// stamps, its first trigger) and what a call needs (its id, its callback,
/// the statistics it bumps). The rest of the contract (its name, patterns
/// and cold statistics) is in the ``ContractState`` object, which owns
/// this state and releases it in its deinit.
///
/// The states of a graph's contracts lie in a dense table (``ContractSlab``),
/// in registration order, each in a 64-byte line of its own: a commit that
/// reaches 10 contracts among 100 000 fetches 10 lines, one each, where a
/// state allocated on its own (at whatever alignment malloc gives) can
/// straddle two (`ordo-bench --only scale`, scale-100000-handles;
/// docs/performance.md).
/// Only touched with the bus's lock held (the deinit of an unregistered
/// contract releases it without the lock, once nothing names it).
struct ContractPassState: ~Copyable {
  /// Also the registration order (ids only grow).
  let id: ContractID
  /// The priority of a priority contract, the level of a data contract.
  var rank: Int32
  let kind: ContractKind
  var registered = true
  var initialPending = false
  /// Its callback runs now (a contract's calls never nest).
  var running = false
  /// The written keypaths that scheduled it in this pass.
  var triggers = TriggerWord()
  /// The serial of the last pass that scheduled it, and of the last that
  /// called it (see ``PassRunner/serial``).
  var scheduledSerial: UInt32 = 0
  var calledSerial: UInt32 = 0
  var calls: UInt64 = 0
  var lastTransaction: UInt64 = 0
  /// A constant, called in place by ``invoke(_:)``, without a retain and a
  /// release per call. It goes with the contract: the
  /// registry lets an unregistered contract go at once, or when the pass or
  /// its own call that names it ends (see ``Registry``); nothing else
  /// retains a contract.
  /// Unretained: docs/reliability.md, "Unretained references", row "a contract's callback, called borrowed".
  let callback: ContractCallback

  /// Calls the callback in place. The state is noncopyable and the call
  /// borrows it, so the callback is called without a retain and a release
  /// (a copyable state, read through its pointer, is copied for the call:
  /// 40 instructions per delivered change, `ordo-bench --profile
  /// delivery-handles`).
  @inline(__always)
  borrowing func invoke(_ note: ContractNotification) throws {
    try callback(note)
  }

  init(id: ContractID, kind: ContractKind, rank: Int32, callback: @escaping ContractCallback) {
    self.id = id
    self.kind = kind
    self.rank = rank
    self.callback = callback
  }
}

/// The written keypaths that scheduled a contract in a pass, in one word:
/// the first one's node state (64-byte aligned, so its low bit is free),
/// and in that bit whether there are more. The others, rare, are in the
/// slab (``ContractSlab/moreTriggers``). Not retained: the
/// store keeps its nodes through the pass, and a contract's triggers are
/// cleared before it is scheduled again, unread.
/// Unretained: docs/reliability.md, "Unretained references", row "a contract's first trigger".
struct TriggerWord {
  private var bits: UInt = 0

  /// No trigger.
  @inline(__always) var isEmpty: Bool { bits == 0 }
  /// More than the first (they are in ``ContractSlab/moreTriggers``).
  @inline(__always) var hasMore: Bool { bits & 1 != 0 }

  /// The first trigger.
  @inline(__always)
  var first: NodeRef? {
    guard let p = UnsafeMutablePointer<NodeState>(bitPattern: bits & ~1) else { return nil }
    return NodeRef(p)
  }

  @inline(__always) mutating func setFirst(_ n: NodeRef) { bits = UInt(bitPattern: n.state) }
  @inline(__always) mutating func markMore() { bits |= 1 }
  @inline(__always) mutating func clear() { bits = 0 }
}

/// What a contract's call reads first, outside the core: a contract's
/// prefetch hint. The registering side names the bytes
/// (``Bus/register(_:prefetching:)``; the C shim names the fields of its
/// contract object that a call reads, out of cache at 100 000 contracts),
/// and the pass starts fetching them before it schedules the readers of a
/// commit's writes (``PassRunner``'s `fetchHints`): the fetches of a
/// commit's contracts then overlap, where each call would otherwise wait
/// for its own, one after the other (docs/performance.md, "Prefetches").
/// Every-transaction contracts and initial calls, not readers of a write,
/// are not fetched ahead. A hint names up to 64 bytes, so one line or two,
/// and is one word: the first line's address, and in its low bit whether
/// the bytes run onto the next; 0, no hint. Never dereferenced: a prefetch
/// of memory since freed is harmless.
struct PrefetchHint: Equatable {
  private let bits: UInt

  /// No hint.
  static let none = PrefetchHint(bits: 0)

  private init(bits: UInt) { self.bits = bits }

  /// The lines of `bytes` (1 to 64 of them).
  init(_ bytes: UnsafeRawBufferPointer) {
    precondition((1...StatePages.lineSize).contains(bytes.count), "a prefetch hint names 1 to 64 bytes")
    let start = UInt(bitPattern: bytes.baseAddress)
    let line = ~UInt(StatePages.lineSize - 1)
    let first = start & line
    bits = first | (((start + UInt(bytes.count) - 1) & line) == first ? 0 : 1)
  }

  /// Starts fetching its lines (nothing without a hint). Both prefetches
  /// are issued, the second of the first line again when the bytes lie on
  /// one (a line asked for twice costs nothing more): no branch on where
  /// they lie.
  @inline(__always)
  func fetch() {
    guard bits != 0 else { return }
    let first = bits & ~1
    fetchEarly(UnsafeRawPointer(bitPattern: first).unsafelyUnwrapped)
    fetchEarly(UnsafeRawPointer(bitPattern: first &+ (bits & 1) &* UInt(StatePages.lineSize)).unsafelyUnwrapped)
  }
}

/// A contract named by its pass state: the one way the hot paths (a node's
/// reader cache, the pass's schedule, the running call's frame) name a
/// contract, so that they touch its state's cache line and not its
/// object's. Not retained, like ``Unretained``: every use states that the
/// contract outlives the reference (`docs/reliability.md`). In debug builds
/// every use checks that the state still belongs to a live contract (a
/// released state's owner entry is cleared), so a broken invariant traps at
/// the use.
struct ContractRef: Equatable {
  let state: UnsafeMutablePointer<ContractPassState>

  @inline(__always)
  init(_ state: UnsafeMutablePointer<ContractPassState>) { self.state = state }

  /// The state, checked in debug builds.
  var pointee: ContractPassState {
    // Addressors, not a getter: a field is read in place, without copying
    // the state (and retaining its callback).
    @inline(__always) unsafeAddress {
      check()
      return UnsafePointer(state)
    }
    @inline(__always) nonmutating unsafeMutableAddress {
      check()
      return state
    }
  }

  /// The position in the pass: phase, then priority or level, then
  /// registration order. (Read field by field: a getter of the state
  /// called on it in place would copy the whole state, callback included,
  /// where it is not inlined.)
  var key: OrderKey {
    @inline(__always) get {
      let kind = pointee.kind
      let phase: UInt64 = kind == .priority ? 0 : (kind == .data ? 1 : 2)
      return OrderKey(high: phase << 32 | UInt64(UInt32(bitPattern: pointee.rank) ^ 0x8000_0000), seq: pointee.id)
    }
  }

  /// Starts fetching the lines of the contract's prefetch hint, when it
  /// has one (see ``PrefetchHint``): a load of its page's header, then
  /// prefetches.
  @inline(__always)
  func fetchPrefetchHint() {
    ContractSlab.prefetchHint(of: state).fetch()
  }

  /// The contract object whose state this is (from its page's owner table:
  /// only the cold paths ask).
  @inline(__always)
  var contract: ContractState {
    ContractSlab.owner(of: state).takeUnretainedValue()
  }

  /// Calls `body` with the contract object borrowed (no retain or release).
  @inline(__always)
  func withContract<R>(_ body: (ContractState) throws -> R) rethrows -> R {
    try ContractSlab.owner(of: state)._withUnsafeGuaranteedRef(body)
  }

  /// Calls `body` with the slab that holds the state, borrowed.
  @inline(__always)
  func withSlab<R>(_ body: (ContractSlab) throws -> R) rethrows -> R {
    try ContractSlab.slab(of: state)._withUnsafeGuaranteedRef(body)
  }

  /// Forgets the pass's triggers (the slab's list only when there is one).
  @inline(__always)
  func clearTriggers() {
    if pointee.triggers.hasMore { withSlab { $0.moreTriggers[UInt(bitPattern: state)] = nil } }
    pointee.triggers.clear()
  }

  /// Adds a written keypath that scheduled the contract.
  @inline(__always)
  func addTrigger(_ n: NodeRef) {
    if pointee.triggers.isEmpty {
      pointee.triggers.setFirst(n)
      return
    }
    addAnotherTrigger(n)
  }

  /// The triggers after the first (``TriggerWord/hasMore``), unique in a
  /// row: out of line, rare.
  @inline(never)
  private func addAnotherTrigger(_ r: NodeRef) {
    let first = pointee.triggers.first!
    let key = UInt(bitPattern: state)
    if !pointee.triggers.hasMore {
      guard first != r else { return }
      withSlab { $0.moreTriggers[key] = [r.node] }
      pointee.triggers.markMore()
      return
    }
    let n = r.node
    withSlab { slab in
      guard slab.moreTriggers[key]?.last !== n else { return }
      slab.moreTriggers[key, default: []].append(n)
    }
  }

  /// Every trigger, in the order they scheduled (first included).
  var allTriggers: [KeyNode] {
    guard let first = pointee.triggers.first else { return [] }
    guard pointee.triggers.hasMore else { return [first.node] }
    return [first.node] + withSlab { $0.moreTriggers[UInt(bitPattern: state)] ?? [] }
  }

  @inline(__always)
  private func check() {
    #if DEBUG
    _ = ContractSlab.owner(of: state)
    #endif
  }
}

/// A ``ContractRef`` in a word with spare bits (a class reference's, which
/// the address of a 64-byte aligned state also leaves unused), so that an
/// enum of it and an array (``Readers``) takes one word, as a node's state
/// needs. Never retained, released or dereferenced as an object: only its
/// bits are used.
struct PackedContractRef {
  private let bits: Unmanaged<ContractSlab>

  @inline(__always)
  init(_ r: ContractRef) { bits = Unmanaged.fromOpaque(UnsafeRawPointer(r.state)) }

  @inline(__always)
  var ref: ContractRef { ContractRef(bits.toOpaque().assumingMemoryBound(to: ContractPassState.self)) }
}

/// The dense table of a graph's contract states (``StatePages`` with a
/// 1 024-byte header per page): the header holds the slab (unretained),
/// then the owner of each of the page's 48 states, then their prefetch
/// hints (``PrefetchHint``), a slot for each of the page's 64 lines (a
/// state's slot is its line: found in two instructions, where its place
/// among the states depends on where the header lies). A state finds its
/// owner, its slab and its hint from its own address. States are handed
/// out in the order contracts register, a released state reused by the
/// next. Every state in use retains the slab, so the slab goes with its
/// last contract (a contract can be released without the bus's lock,
/// after its graph); hence also the mutex.
/// Unretained: docs/reliability.md, "Unretained references", row "the table of contract states".
final class ContractSlab: @unchecked Sendable {
  static let headerSize = 1_024
  /// States per page.
  static let perPage = (StatePages.pageSize - headerSize) / StatePages.lineSize

  private let table = Mutex(StatePages(headerSize: ContractSlab.headerSize))

  /// The triggers after the first of the contracts a running pass has
  /// more than one for, by state address (see ``TriggerWord``). Touched
  /// only with the bus's lock held.
  var moreTriggers: [UInt: [KeyNode]] = [:]

  /// Whether a state has held a prefetch hint: the pass asks for hints
  /// only then (a bus of Swift contracts has none). Touched only with the
  /// bus's lock held.
  private(set) var hasPrefetchHints = false

  /// The states made so far, in use or free (for tests of the reuse).
  var rooms: Int { table.withLock { $0.made } }

  init() {
    precondition(MemoryLayout<ContractPassState>.stride == StatePages.lineSize, "a contract's pass state takes one cache line")
    precondition(ContractSlab.hintsStart + 8 * ContractSlab.hintSlots <= ContractSlab.headerSize, "a page's header names its slab, and every state's owner and prefetch hint")
  }

  deinit {
    // No state is in use (each retains the slab), so none holds a reference.
    table.withLock { $0.deallocate() }
  }

  /// The byte offset of a state's owner entry in its page's header
  /// (unretained: docs/reliability.md, "Unretained references", row "a
  /// contract state's owner").
  @inline(__always)
  private static func ownerOffset(of s: UnsafeRawPointer) -> Int {
    8 + 8 * StatePages.index(of: s, headerSize: headerSize)
  }

  /// Where a page's header holds the prefetch hints, after the owners.
  private static let hintsStart = 8 + 8 * perPage
  /// Hint slots per page: one per line.
  private static let hintSlots = StatePages.pageSize / StatePages.lineSize

  /// The byte offset of a state's prefetch hint in its page's header.
  @inline(__always)
  private static func hintOffset(of s: UnsafeRawPointer) -> Int {
    hintsStart + 8 * Int(UInt(bitPattern: s) % UInt(StatePages.pageSize) / UInt(StatePages.lineSize))
  }

  /// A state's prefetch hint.
  @inline(__always)
  static func prefetchHint(of s: UnsafeMutablePointer<ContractPassState>) -> PrefetchHint {
    UnsafeRawPointer(StatePages.header(of: s, headerSize: headerSize)).load(fromByteOffset: hintOffset(of: s), as: PrefetchHint.self)
  }

  /// Gives a state its prefetch hint. Lock held.
  func setPrefetchHint(_ hint: PrefetchHint, of r: ContractRef) {
    StatePages.header(of: r.state, headerSize: ContractSlab.headerSize)
      .storeBytes(of: hint, toByteOffset: ContractSlab.hintOffset(of: r.state), as: PrefetchHint.self)
    hasPrefetchHints = true
  }

  /// The slab that holds a state.
  @inline(__always)
  static func slab(of s: UnsafeMutablePointer<ContractPassState>) -> Unmanaged<ContractSlab> {
    UnsafeRawPointer(StatePages.header(of: s, headerSize: headerSize)).load(as: Unmanaged<ContractSlab>.self)
  }

  /// The contract that owns a state in use (trapping, in debug builds, on
  /// a released one).
  @inline(__always)
  static func owner(of s: UnsafeMutablePointer<ContractPassState>) -> Unmanaged<ContractState> {
    let owner = UnsafeRawPointer(StatePages.header(of: s, headerSize: headerSize)).load(fromByteOffset: ownerOffset(of: s), as: Unmanaged<ContractState>?.self)
    #if DEBUG
    precondition(owner != nil, "Ordo: a contract's pass state was used after its contract was released")
    #endif
    return owner.unsafelyUnwrapped
  }

  /// A state, initialized to `state`, without a prefetch hint (a new
  /// page's hints are cleared, and a released state's); its owner is set
  /// by ``adopt(_:owner:)`` before any use.
  func allocate(_ state: consuming ContractPassState) -> UnsafeMutablePointer<ContractPassState> {
    let me = Unmanaged.passUnretained(self)
    let raw = table.withLock {
      $0.take { header in
        header.storeBytes(of: me, as: Unmanaged<ContractSlab>.self)
        (header + ContractSlab.hintsStart).initializeMemory(as: PrefetchHint.self, repeating: .none, count: ContractSlab.hintSlots)
      }
    }
    _ = Unmanaged.passRetained(self)
    let s = raw.bindMemory(to: ContractPassState.self, capacity: 1)
    s.initialize(to: state)
    return s
  }

  /// Records the contract that owns a state (not retained: it owns the state).
  func adopt(_ r: ContractRef, owner: Unmanaged<ContractState>) {
    StatePages.header(of: r.state, headerSize: ContractSlab.headerSize)
      .storeBytes(of: owner, toByteOffset: ContractSlab.ownerOffset(of: r.state), as: Unmanaged<ContractState>?.self)
  }

  /// Releases a contract's state (its callback goes with it) for reuse, and
  /// the slab's retain by it. Called by the contract's deinit.
  static func release(_ s: UnsafeMutablePointer<ContractPassState>) {
    let slab = ContractSlab.slab(of: s)
    // Every pass clears the triggers of what it scheduled, and an
    // unregistration those of its contract: the slab's list of further
    // triggers names no released state (it is not touched here, where the
    // bus's lock may not be held).
    assert(s.pointee.triggers.isEmpty, "a contract was released with the triggers of a pass")
    s.deinitialize(count: 1)
    let header = StatePages.header(of: s, headerSize: headerSize)
    header.storeBytes(of: nil, toByteOffset: ownerOffset(of: s), as: Unmanaged<ContractState>?.self)
    header.storeBytes(of: .none, toByteOffset: hintOffset(of: s), as: PrefetchHint.self)
    let room = UInt(bitPattern: s)
    slab._withUnsafeGuaranteedRef { $0.table.withLock { $0.give(room) } }
    slab.release()
  }
}
