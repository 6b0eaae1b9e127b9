/// A growable buffer of values without an array's checks: the journal's
/// records and the schedule's bulk, which every write or every scheduled
/// contract appends to once and every pass step reads. An array's
/// uniqueness, capacity and exclusivity checks cost the delivery workload
/// 9 % more instructions for the journal and about 30 per change for the
/// schedule (`ordo-bench --profile delivery-handles`, callgrind).
///
/// A value that owns its memory without a class around it: the owner calls
/// ``free()`` when it goes, and copies of the value share the memory (the
/// owners keep one). Only touched with the bus's lock held.
struct Buffer<Element> {
  private var base: UnsafeMutablePointer<Element>?
  private var capacity = 0
  /// The number of elements.
  private(set) var count = 0

  /// Element `i` (`0 ..< count`).
  @inline(__always)
  subscript(i: Int) -> Element {
    get { base.unsafelyUnwrapped[i] }
    nonmutating _modify { yield &base.unsafelyUnwrapped[i] }
  }

  /// Appends `e`; returns its index.
  @inline(__always)
  @discardableResult
  mutating func append(_ e: Element) -> Int {
    if count == capacity { grow() }
    (base.unsafelyUnwrapped + count).initialize(to: e)
    count &+= 1
    return count &- 1
  }

  private mutating func grow() {
    let bigger = UnsafeMutablePointer<Element>.allocate(capacity: max(64, capacity * 2))
    if let base {
      bigger.moveInitialize(from: base, count: count)
      base.deallocate()
    }
    base = bigger
    capacity = max(64, capacity * 2)
  }

  /// Empties the buffer, keeping its capacity. (For plain data a no-op loop;
  /// debug builds' unretained references hold a weak reference to release.)
  @inline(__always)
  mutating func removeAll() {
    base?.deinitialize(count: count)
    count = 0
  }

  /// Sorts by `key` unless already in order (one scan).
  mutating func sortIfNeeded<K: Comparable>(by key: (Element) -> K) {
    guard count > 1, let base else { return }
    var previous = key(base[0])
    for i in 1..<count {
      let k = key(base[i])
      if k < previous {
        var all = UnsafeMutableBufferPointer(start: base, count: count)
        all.sort { key($0) < key($1) }
        return
      }
      previous = k
    }
  }

  /// Empties the buffer and gives its memory back.
  mutating func free() {
    removeAll()
    base?.deallocate()
    base = nil
    capacity = 0
  }
}
