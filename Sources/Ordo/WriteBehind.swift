/// Scalar sets held back: the writes of the owner's open transaction
/// (outside callbacks) that set a bool, an int64 or a double on a keypath
/// the store already has, kept in order and applied together by the next
/// other use of the bus (``Store/settle()``: any read, other write, commit,
/// rollback, registration, from any thread) or when ``capacity`` are held.
///
/// Why: a write has to read its keypath's state (the old value, for the
/// net change, and the journal stamp) before it can return, and at 100 000
/// keypaths that line is a miss to memory. Applied one by one, a commit of
/// ten writes waits for ten misses one after another; held back, each write
/// only asks for its line (``fetchEarlyForWrite``) and returns, and the ten
/// fetches overlap before the first is applied (docs/performance.md,
/// "Writes held back"). Nothing observable changes: such a write cannot
/// fail once the phase allows it (``WriteAccess/free``: no contract rules),
/// and every other use of the bus settles what is held first, under the
/// same lock, so every read, notification, commit hook and journal order is
/// the one of writes applied at once.
///
/// Storage: one block, the count then the entries, so using it is one word
/// and no exclusivity check (as ``MonitorLock``). Guarded by the bus's
/// lock. The nodes are not retained: a held write names a node the store
/// already has, and the store releases nodes only when a transaction ends
/// (``Store/reset()``), which settles first.
struct WriteBehind {
  /// A held write: the node, by its state, and the value.
  struct Entry {
    /// Unretained: docs/reliability.md, "Unretained references", row "a held-back write's node".
    var node: NodeRef
    var value: PackedValue
  }

  /// Writes held at most: more than a usual transaction's burst, few
  /// enough that settling them stays in the first-level cache.
  static let capacity = 16

  /// The value to hold for `op` when it may be held back at all — a set
  /// of a bool, an int64 or a double — else nil. (Whether the phase allows
  /// it is the caller's question.)
  @inline(__always)
  static func heldValue(_ op: WriteOp) -> PackedValue? {
    guard case .set(let v) = op else { return nil }
    let p = PackedValue(v)
    return p.kind != .boxed ? p : nil
  }

  private let base: UnsafeMutableRawPointer
  private static let entriesOffset = 64

  private init() {
    base = .allocate(
      byteCount: WriteBehind.entriesOffset + WriteBehind.capacity * MemoryLayout<Entry>.stride, alignment: 64)
    base.bindMemory(to: Int.self, capacity: 1).initialize(to: 0)
  }

  /// An empty buffer.
  static func make() -> WriteBehind { WriteBehind() }

  /// Frees the buffer (what it holds is dropped).
  func destroy() { base.deallocate() }

  @inline(__always) private var count: UnsafeMutablePointer<Int> { base.assumingMemoryBound(to: Int.self) }
  @inline(__always) private var entries: UnsafeMutablePointer<Entry> {
    (base + WriteBehind.entriesOffset).assumingMemoryBound(to: Entry.self)
  }

  /// Whether nothing is held.
  @inline(__always) var isEmpty: Bool { count.pointee == 0 }
  /// Whether ``capacity`` writes are held.
  @inline(__always) var isFull: Bool { count.pointee == WriteBehind.capacity }

  /// Holds a write; the buffer must not be full.
  @inline(__always)
  func append(_ node: NodeRef, _ value: PackedValue) {
    let n = count.pointee
    assert(n < WriteBehind.capacity, "WriteBehind: full")
    (entries + n).initialize(to: Entry(node: node, value: value))
    count.pointee = n + 1
  }

  /// Hands the held writes to `apply`, oldest first, and empties the
  /// buffer. (`apply` must not hold back new writes.)
  @inline(__always)
  func drain(_ apply: (NodeRef, PackedValue) -> Void) {
    let n = count.pointee
    count.pointee = 0
    for i in 0..<n {
      let e = entries[i]
      apply(e.node, e.value)
    }
  }

  /// Drops what is held (the store was reset).
  func discard() { count.pointee = 0 }
}
