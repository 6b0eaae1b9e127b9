/// A trie of patterns keyed by interned segment ids (`*` is id 0), each
/// pattern carrying the contract that declared it. It answers the two
/// questions the scheduler and the registration checks ask, in time
/// proportional to the matching entries and the query's length, not to the
/// number of patterns stored:
///
/// - ``forEachReader(affectedBy:_:)``: the read patterns affected by a write
///   to a keypath, or by any write a write pattern allows;
/// - ``forEachWriter(affecting:_:)``: the write patterns that may write
///   something affecting a read pattern.
///
/// A node that would hold a single exact pattern and nothing else is stored
/// as a leaf in its parent's child map (most patterns end in such a node),
/// which keeps the index small.
struct PatternIndex {
  enum Child {
    case node(Node)
    /// A node with exactly one exact pattern and no children.
    case leaf(ContractState)
  }

  final class Node {
    // Walked by every registration, unregistration and reader-cache
    // rebuild. Without @exclusivity(unchecked) registering 100 000
    // contracts (`ordo-bench --profile register:100000`, callgrind) runs
    // 13 % more instructions; the index is only touched with the bus's
    // lock held.
    @exclusivity(unchecked) var children = ChildMap()
    /// Patterns that end at this node without `**`.
    @exclusivity(unchecked) var exact: [ContractState] = []
    /// Patterns `<path to this node>.**`.
    @exclusivity(unchecked) var tree: [ContractState] = []

    init() {}
    init(exact: ContractState) { self.exact = [exact] }

    var isEmpty: Bool { children.isEmpty && exact.isEmpty && tree.isEmpty }
  }

  private(set) var root = Node()
  private(set) var count = 0

  mutating func insert(_ p: CPattern, _ c: ContractState) {
    var node = root
    let n = p.count
    for i in 0..<n {
      let id = p[i]
      if i == n - 1 && !p.isTree {
        switch node.children[id] {
        case nil: node.children[id] = .leaf(c)
        case .leaf(let x):
          let promoted = Node(exact: x)
          promoted.exact.append(c)
          node.children[id] = .node(promoted)
        case .node(let m): m.exact.append(c)
        }
        count += 1
        return
      }
      switch node.children[id] {
      case .node(let m): node = m
      case .leaf(let x):
        let promoted = Node(exact: x)
        node.children[id] = .node(promoted)
        node = promoted
      case nil:
        let m = Node()
        node.children[id] = .node(m)
        node = m
      }
    }
    if p.isTree { node.tree.append(c) } else { node.exact.append(c) }
    count += 1
  }

  mutating func remove(_ p: CPattern, _ c: ContractState) {
    var removed = false
    let n = p.count
    func walk(_ node: Node, _ i: Int) {
      if i == n {
        if p.isTree {
          if let j = node.tree.firstIndex(where: { $0 === c }) { node.tree.remove(at: j); removed = true }
        } else if let j = node.exact.firstIndex(where: { $0 === c }) {
          node.exact.remove(at: j)
          removed = true
        }
        return
      }
      let id = p[i]
      switch node.children[id] {
      case .leaf(let x):
        if i == n - 1 && !p.isTree && x === c {
          node.children[id] = nil
          removed = true
        }
      case .node(let m):
        walk(m, i + 1)
        if m.isEmpty {
          node.children[id] = nil
        } else if m.children.isEmpty && m.tree.isEmpty && m.exact.count == 1 {
          node.children[id] = .leaf(m.exact[0])
        }
      case nil:
        break
      }
    }
    walk(root, 0)
    if removed { count -= 1 }
  }

  private static func forEachInSubtree(_ child: Child, _ body: (ContractState) -> Void) {
    switch child {
    case .leaf(let x): body(x)
    case .node(let m): forEachInSubtree(m, body)
    }
  }

  private static func forEachInSubtree(_ node: Node, _ body: (ContractState) -> Void) {
    for c in node.exact { body(c) }
    for c in node.tree { body(c) }
    node.children.forEach { forEachInSubtree($0, body) }
  }

  /// Walks the children the query segment `id` reaches: a literal reaches
  /// the same literal and `*`; `*` (0) reaches every child.
  @inline(__always)
  private static func forEachStep(_ node: Node, _ id: UInt32, _ body: (Child) -> Void) {
    if id == SegmentTable.any {
      node.children.forEach(body)
    } else {
      if let child = node.children[id] { body(child) }
      if let child = node.children[SegmentTable.any] { body(child) }
    }
  }

  /// Calls `body` for every stored read pattern affected by a write to the
  /// keypath `query` (or by some write the pattern `query` allows). A contract
  /// with several affected patterns is visited several times.
  func forEachReader(affectedBy query: [UInt32], _ body: (ContractState) -> Void) {
    let n = query.count
    func walk(_ node: Node, _ depth: Int) {
      if depth == n {
        PatternIndex.forEachInSubtree(node, body)
        return
      }
      for c in node.tree { body(c) }
      PatternIndex.forEachStep(node, query[depth]) { child in
        switch child {
        case .node(let m): walk(m, depth + 1)
        // A leaf holds one exact pattern of length depth + 1: affected when
        // the query ends there (a match) or the leaf is deeper (ancestor).
        case .leaf(let x): if depth + 1 == n { body(x) }
        }
      }
    }
    walk(root, 0)
  }

  /// Calls `body` for every stored read pattern that matches the keypath
  /// `query` itself (a tree pattern at or above it, or an exact pattern of
  /// its length): the readers of a value that changed, without the readers
  /// of its descendants. A contract may be visited several times.
  func forEachReader(matching query: [UInt32], _ body: (ContractState) -> Void) {
    let n = query.count
    func walk(_ node: Node, _ depth: Int) {
      for c in node.tree { body(c) }
      if depth == n {
        for c in node.exact { body(c) }
        return
      }
      PatternIndex.forEachStep(node, query[depth]) { child in
        switch child {
        case .node(let m): walk(m, depth + 1)
        case .leaf(let x): if depth + 1 == n { body(x) }
        }
      }
    }
    walk(root, 0)
  }

  /// Calls `body` for every stored write pattern that may write a keypath
  /// affecting the read pattern.
  func forEachWriter(affecting reader: CPattern, _ body: (ContractState) -> Void) {
    let n = reader.count
    func walk(_ node: Node, _ depth: Int) {
      if depth == n && reader.isTree {
        PatternIndex.forEachInSubtree(node, body)
        return
      }
      for c in node.exact { body(c) }
      for c in node.tree { body(c) }
      if depth == n { return }
      PatternIndex.forEachStep(node, reader[depth]) { child in
        switch child {
        case .node(let m): walk(m, depth + 1)
        case .leaf(let x): body(x)  // a writer of length depth + 1 <= n
        }
      }
    }
    walk(root, 0)
  }
}

/// The children of a ``PatternIndex/Node``: up to eight in a small array
/// searched linearly (most nodes have one to a few: an 80-byte block for
/// three, where a `Dictionary` takes about 130), more in a dictionary.
struct ChildMap {
  private enum Storage {
    case small([(UInt32, PatternIndex.Child)])
    case large([UInt32: PatternIndex.Child])
  }
  private static let smallLimit = 8
  private var storage = Storage.small([])

  var isEmpty: Bool {
    switch storage {
    case .small(let a): a.isEmpty
    case .large(let d): d.isEmpty
    }
  }

  subscript(id: UInt32) -> PatternIndex.Child? {
    @inline(__always) get {
      switch storage {
      case .small(let a):
        for e in a where e.0 == id { return e.1 }
        return nil
      case .large(let d):
        return d[id]
      }
    }
    set {
      switch storage {
      case .small(var a):
        storage = .small([])  // keep `a` unique while it changes
        if let i = a.firstIndex(where: { $0.0 == id }) {
          if let newValue { a[i].1 = newValue } else { a.remove(at: i) }
        } else if let newValue {
          if a.count == ChildMap.smallLimit {
            var d = [UInt32: PatternIndex.Child](minimumCapacity: a.count + 1)
            for e in a { d[e.0] = e.1 }
            d[id] = newValue
            storage = .large(d)
            return
          }
          // Grown by one, not doubled: most maps stay at 2 or 3 children
          // (a contract's `x.a`, `x.b`, `x.c`), and a doubled array of 3
          // holds room for 4: 16 bytes a contract of the memory scenario.
          if a.count == a.capacity {
            var grown: [(UInt32, PatternIndex.Child)] = []
            grown.reserveCapacity(a.count + 1)
            grown.append(contentsOf: a)
            a = grown
          }
          a.append((id, newValue))
        }
        storage = .small(a)
      case .large(var d):
        storage = .small([])
        d[id] = newValue
        if d.count <= ChildMap.smallLimit / 2 {
          storage = .small(d.map { ($0.key, $0.value) })
        } else {
          storage = .large(d)
        }
      }
    }
  }

  /// Calls `body` for each child.
  @inline(__always)
  func forEach(_ body: (PatternIndex.Child) -> Void) {
    switch storage {
    case .small(let a): for e in a { body(e.1) }
    case .large(let d): for v in d.values { body(v) }
    }
  }
}
