#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutex with a condition variable, used to serialize transactions and to
/// guard the bus's state for short, non-blocking sections.
final class MonitorLock: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

  init() {
    pthread_mutex_init(mutex, nil)
    pthread_cond_init(cond, nil)
  }

  deinit {
    pthread_cond_destroy(cond)
    pthread_mutex_destroy(mutex)
    cond.deallocate()
    mutex.deallocate()
  }

  func lock() { pthread_mutex_lock(mutex) }
  func unlock() { pthread_mutex_unlock(mutex) }
  /// Waits for a broadcast; the mutex must be held.
  func wait() { pthread_cond_wait(cond, mutex) }
  func broadcast() { pthread_cond_broadcast(cond) }
}

/// Identifies the calling thread.
@inline(__always) func currentThread() -> pthread_t { pthread_self() }

/// The names of every keypath that holds a value or has a non-zero counter,
/// as a tree, so that `removeTree` and pattern snapshots visit only the keys
/// under a node.
struct KeyTree {
  final class Node {
    var children: [String: Node] = [:]
    /// The full keypath when this node is a stored key.
    var key: String?
  }

  let root = Node()

  func insert(_ key: String, _ segments: [Substring]) {
    var node = root
    for s in segments {
      let name = String(s)
      if let next = node.children[name] { node = next } else {
        let next = Node()
        node.children[name] = next
        node = next
      }
    }
    node.key = key
  }

  /// Forgets `key`, pruning nodes that hold nothing any more.
  func remove(_ segments: [Substring]) {
    func walk(_ node: Node, _ i: Int) -> Bool {
      if i == segments.count {
        node.key = nil
      } else {
        let name = String(segments[i])
        guard let next = node.children[name] else { return false }
        if walk(next, i + 1) { node.children[name] = nil }
      }
      return node.key == nil && node.children.isEmpty
    }
    _ = walk(root, 0)
  }

  func node(_ segments: [Substring]) -> Node? {
    var node = root
    for s in segments {
      guard let next = node.children[String(s)] else { return nil }
      node = next
    }
    return node
  }

  /// Every key at or under the node.
  func keys(under node: Node, into out: inout [String]) {
    if let k = node.key { out.append(k) }
    for child in node.children.values { keys(under: child, into: &out) }
  }

  /// Every key the pattern matches.
  func keys(matching p: Pattern) -> [String] {
    var out: [String] = []
    func walk(_ node: Node, _ i: Int) {
      if i == p.fixed.count {
        if p.isTree { keys(under: node, into: &out) } else if let k = node.key { out.append(k) }
        return
      }
      switch p.fixed[i] {
      case .any: for child in node.children.values { walk(child, i + 1) }
      case .literal(let l): if let child = node.children[l] { walk(child, i + 1) }
      }
    }
    walk(root, 0)
    return out
  }
}

/// One keypath as written in the running transaction.
struct WriteRecord {
  let segments: [Substring]
  /// Whether a `set`/`remove` wrote the keypath's own value.
  var ownValue = false
  /// Descendants (and itself) whose values a `removeTree` removed.
  var removed: [String] = []
  /// Whether it was touched.
  var touched = false
  /// Contracts whose initial calls wrote it (they are not scheduled by it).
  var writtenBy: [ContractID] = []
  /// Whether a write came from outside any contract callback.
  var external = false
}

/// The undo log and change record of the running transaction.
struct Journal {
  /// The value of each keypath written, as at the start of the transaction.
  var original: [String: Value?] = [:]
  /// Keypaths as written, in first-write order.
  var order: [String] = []
  var records: [String: WriteRecord] = [:]
  /// Run, last first, when the transaction is rolled back.
  var undo: [@Sendable () -> Void] = []

  var isEmpty: Bool { order.isEmpty && undo.isEmpty }

  mutating func reset() {
    original.removeAll(keepingCapacity: true)
    order.removeAll(keepingCapacity: true)
    records.removeAll(keepingCapacity: true)
    undo.removeAll()
  }
}
