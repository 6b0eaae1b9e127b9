import Synchronization

/// What a write to a keypath and a pass touch of its node, in one cache
/// line: the value's bits and kind, the journal stamp, the counter and
/// changed-at, the reader cache and the C string. The rest of the node (its
/// key, segment ids, children, a string or bytes value) is cold and stays
/// in the ``KeyNode`` object.
///
/// The states of a store's nodes lie in a dense table (``NodeSlab``), in
/// the order the nodes were made, where each node's object lies among its
/// key, its segment ids and its parent's children: a commit that writes
/// keypaths made one after another reads consecutive lines, which the
/// hardware prefetcher streams, instead of lines 688 bytes apart (measured:
/// `ordo-bench --only scale`, scale-100000-handles; docs/performance.md).
/// Only touched with the bus's lock held.
struct NodeState {
  /// Its value packed: a scalar inline, a string or bytes in the node's
  /// ``KeyNode/boxed``. 9 bytes: the flags and the generation fit in the
  /// rest of the first 16.
  var packed = PackedValue.absent
  /// A notification has named it (see ``ChangedKeypaths``).
  var named = false
  /// A ``Handle`` or ``Property`` names it.
  var pinned = false
  /// The contract graph's generation ``readers`` was made in
  /// (``ContractGraph/readers(_:)``); ``NodeState/noGeneration`` for none.
  var readersGeneration = NodeState.noGeneration
  /// The journal's serial << 32 | the index of this node's record.
  var journalStamp: UInt64 = 0
  /// Committed transactions that changed this keypath (SPEC §2).
  var counter: UInt64 = 0
  /// The last committed transaction that changed it (SPEC §10).
  var changedAt: UInt64 = 0
  /// Cache of affected readers (see ``ContractGraph/readers(_:)``).
  var readers = Readers.none
  /// The node whose state this is (not retained: the node owns its state
  /// and releases it in its deinit).
  /// Unretained: docs/reliability.md, "Unretained references", row "a node state's node".
  let node: Unmanaged<KeyNode>
  /// The key as NUL-terminated UTF-8, for bridges to C (see
  /// ``NodeRef/cKey``), beside the fields the write fetched.
  /// Unretained: docs/reliability.md, "Unretained references", row "a single changed keypath's C string".
  var cKey: UnsafeMutablePointer<CChar>?

  /// A generation no graph has.
  static let noGeneration = UInt32.max

  init(node: Unmanaged<KeyNode>) { self.node = node }
}

/// A key node named by its state: the one way the hot paths (a handle's or
/// a property's write, the journal's records, a pass's triggers and
/// notifications) name a node, so that they touch its state's cache line
/// and not its object's. Not retained, like ``Unretained``: every use
/// states that the node outlives the reference (`docs/reliability.md`).
/// In debug builds every use checks that the state still belongs to a live
/// node (a released state is marked), so a broken invariant traps at the
/// use.
struct NodeRef: Equatable {
  let state: UnsafeMutablePointer<NodeState>

  @inline(__always)
  init(_ state: UnsafeMutablePointer<NodeState>) { self.state = state }

  /// The node a ``Property`` names by its state's address.
  @inline(__always)
  init(property address: UnsafeRawPointer) {
    state = UnsafeMutablePointer(mutating: address.assumingMemoryBound(to: NodeState.self))
  }

  /// The node, as a strong reference for the caller's scope.
  @inline(__always)
  var node: KeyNode {
    check()
    return state.pointee.node.takeUnretainedValue()
  }

  /// Calls `body` with the node borrowed (no retain or release).
  @inline(__always)
  func with<R>(_ body: (KeyNode) throws -> R) rethrows -> R {
    check()
    return try state.pointee.node._withUnsafeGuaranteedRef(body)
  }

  /// The key as NUL-terminated UTF-8, made the first time it is asked and
  /// valid while the node lives. Asked only while a pass calls contracts,
  /// on the thread that runs it (one at a time per bus).
  var cKey: UnsafePointer<CChar> {
    check()
    if let p = state.pointee.cKey { return UnsafePointer(p) }
    let utf8 = Array(with { $0.key }.utf8CString)
    let p = UnsafeMutablePointer<CChar>.allocate(capacity: utf8.count)
    p.initialize(from: utf8, count: utf8.count)
    state.pointee.cKey = p
    return UnsafePointer(p)
  }

  @inline(__always)
  private func check() {
    #if DEBUG
    precondition(state.pointee.readersGeneration != NodeSlab.released, "Ordo: a key node's state was used after its node was released")
    #endif
  }
}

extension Readers {
  /// Starts fetching the state of a single cached reader. The journal calls
  /// it when a transaction first writes the keypath, so that the fetch
  /// overlaps the transaction's other writes instead of the pass's
  /// scheduling. A list of several is fetched when the pass starts (its
  /// `fetchReaders`): reaching the list is a load, which a write should not
  /// wait for. A cache not yet refreshed may name a contract that is gone:
  /// a prefetch of its line is harmless.
  @inline(__always)
  func fetchSingleEarly() {
    if case .one(let r) = self { fetchEarly(UnsafeRawPointer(r.ref.state)) }
  }
}

/// The contracts a write to a keypath affects, named by their pass states
/// (``ContractRef``, so that scheduling touches a contract's one line, not
/// its object): most keypaths have one reader or none, held without an
/// array. Readers are not retained: every
/// unregistration makes every reader cache stale (see
/// ``ContractGraph/readers(_:)``) before the contract can go, and a stale
/// cache is rebuilt before it is read. (Retained, a stale cache would keep
/// an unregistered contract, and what its callback captures, alive.)
/// One word, so that a node's state fits a cache line.
/// Unretained: docs/reliability.md, "Unretained references", row "a keypath's readers".
enum Readers {
  case none
  /// Exactly one reader.
  case one(PackedContractRef)
  /// Two or more.
  case many([ContractRef])

  init(_ list: [ContractState]) {
    switch list.count {
    case 0: self = .none
    case 1: self = .one(PackedContractRef(list[0].passState))
    default: self = .many(list.map(\.passState))
    }
  }

  @inline(__always)
  func forEach(_ body: (ContractRef) -> Void) {
    switch self {
    case .none: return
    case .one(let r): body(r.ref)
    case .many(let list): for r in list { body(r) }
    }
  }
}

/// The dense table of a store's node states (``StatePages`` in anchored
/// blocks, whose anchor names the table): states handed out in the order
/// nodes are made (so consecutive keypaths have consecutive states), a
/// released state reused by the next
/// node. Retained by every node: a node can outlive its store (a handle's
/// node is kept by the bus's link, a notification's by the copies of its
/// changed keypaths), and nodes can then be released on any thread, hence
/// the mutex. The pages go when the last node does.
/// Unretained: docs/reliability.md, "Unretained references", row "the table of node states".
final class NodeSlab: @unchecked Sendable {
  /// Each block's anchor is one line that names the slab, what
  /// ``slab(of:)`` reads, so that a state leads to its bus
  /// (``HandleAddress``) through a line that 4 095 states share.
  static let headerSize = StatePages.lineSize
  private let table = Mutex(StatePages(headerSize: NodeSlab.headerSize, anchored: true))
  /// The link of the bus whose store made the slab, not retained: set once,
  /// by the bus's init, before the bus can make a handle; used only through
  /// a ``HandleAddress``, which is valid while the bus (and so its link)
  /// lives.
  /// Unretained: docs/reliability.md, "Unretained references", row "a node state's table".
  private(set) var link: Unmanaged<BusLink>?

  /// Names the bus of the slab's states (the bus's init, once).
  func attach(_ link: BusLink) {
    precondition(self.link == nil, "a node slab belongs to one bus")
    self.link = .passUnretained(link)
  }

  /// The slab a state lies in, from its block's anchor (a header that
  /// 4 095 states share, see ``StatePages``).
  @inline(__always)
  static func slab(of state: UnsafeRawPointer) -> Unmanaged<NodeSlab> {
    UnsafeRawPointer(StatePages.anchor(of: state, headerSize: headerSize)).load(as: Unmanaged<NodeSlab>.self)
  }

  /// The rooms made so far, in use or free (for tests of the reuse).
  var rooms: Int { table.withLock { $0.made } }

  /// Marks a released state in debug builds (its generation; a live
  /// state's is a graph generation, or ``NodeState/noGeneration``).
  static let released = UInt32.max - 1

  init() {
    precondition(MemoryLayout<NodeState>.stride == StatePages.lineSize, "a key node's state takes one cache line")
  }

  deinit {
    // No node is left, so every state is released and holds no reference.
    table.withLock { $0.deallocate() }
  }

  /// Room for one state, uninitialized.
  func allocate() -> UnsafeMutablePointer<NodeState> {
    let me = Unmanaged.passUnretained(self)
    return table.withLock { $0.take { header in header.storeBytes(of: me, as: Unmanaged<NodeSlab>.self) } }
      .bindMemory(to: NodeState.self, capacity: 1)
  }

  /// Releases a node's state: its reader cache and C string go, and the
  /// room is reused. Called by the node's deinit.
  func release(_ p: UnsafeMutablePointer<NodeState>) {
    p.pointee.cKey?.deallocate()
    #if DEBUG
    // Kept initialized (holding no reference) and marked, so that a use
    // after release traps (see ``NodeRef``).
    let node = p.pointee.node
    p.deinitialize(count: 1)
    p.initialize(to: NodeState(node: node))
    p.pointee.readersGeneration = NodeSlab.released
    #else
    p.deinitialize(count: 1)
    #endif
    // The room holds no reference now; it is kept by its address.
    let room = UInt(bitPattern: p)
    table.withLock { $0.give(room) }
  }
}
