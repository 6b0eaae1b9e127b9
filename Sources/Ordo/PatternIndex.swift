/// A trie of patterns keyed by interned segment ids, each pattern carrying
/// the contract that declared it. It answers the two questions the scheduler
/// and the registration checks ask, in time proportional to the matching
/// entries and the query's length, not to the number of patterns stored:
///
/// - ``forEachReader(affectedBy:_:)``: the read patterns affected by a write
///   to a keypath, or by any write a write pattern allows;
/// - ``forEachWriter(affecting:_:)``: the write patterns that may write
///   something affecting a read pattern.
struct PatternIndex {
  final class Node {
    @exclusivity(unchecked) var literal: [UInt32: Node] = [:]
    @exclusivity(unchecked) var any: Node?
    /// Patterns that end at this node without `**`.
    @exclusivity(unchecked) var exact: [ContractState] = []
    /// Patterns `<path to this node>.**`.
    @exclusivity(unchecked) var tree: [ContractState] = []

    var isEmpty: Bool { literal.isEmpty && any == nil && exact.isEmpty && tree.isEmpty }

    func forEachInSubtree(_ body: (ContractState) -> Void) {
      for c in exact { body(c) }
      for c in tree { body(c) }
      for child in literal.values { child.forEachInSubtree(body) }
      any?.forEachInSubtree(body)
    }
  }

  private(set) var root = Node()
  private(set) var count = 0

  mutating func insert(_ p: CPattern, _ c: ContractState) {
    var node = root
    for id in p.ids {
      if id == SegmentTable.any {
        if node.any == nil { node.any = Node() }
        node = node.any!
      } else if let next = node.literal[id] {
        node = next
      } else {
        let next = Node()
        node.literal[id] = next
        node = next
      }
    }
    if p.isTree { node.tree.append(c) } else { node.exact.append(c) }
    count += 1
  }

  mutating func remove(_ p: CPattern, _ c: ContractState) {
    var removed = false
    func walk(_ node: Node, _ i: Int) {
      if i == p.ids.count {
        if p.isTree {
          if let j = node.tree.firstIndex(where: { $0 === c }) { node.tree.remove(at: j); removed = true }
        } else if let j = node.exact.firstIndex(where: { $0 === c }) {
          node.exact.remove(at: j)
          removed = true
        }
        return
      }
      let id = p.ids[i]
      if id == SegmentTable.any {
        if let next = node.any { walk(next, i + 1); if next.isEmpty { node.any = nil } }
      } else if let next = node.literal[id] {
        walk(next, i + 1)
        if next.isEmpty { node.literal[id] = nil }
      }
    }
    walk(root, 0)
    if removed { count -= 1 }
  }

  /// Visits every node reached by the query's segments, with its depth. A
  /// literal query segment follows the same literal and `*`; a `*` query
  /// segment follows every child.
  private func visit(_ query: [UInt32], _ body: (Node, Int) -> Void) {
    func walk(_ node: Node, _ i: Int) {
      body(node, i)
      if i == query.count { return }
      let id = query[i]
      if id == SegmentTable.any {
        for next in node.literal.values { walk(next, i + 1) }
      } else if let next = node.literal[id] {
        walk(next, i + 1)
      }
      if let a = node.any { walk(a, i + 1) }
    }
    walk(root, 0)
  }

  /// Calls `body` for every stored read pattern affected by a write to the
  /// keypath `query` (or by some write the pattern `query` allows). A contract
  /// with several affected patterns is visited several times.
  func forEachReader(affectedBy query: [UInt32], _ body: (ContractState) -> Void) {
    let n = query.count
    visit(query) { node, depth in
      if depth < n {
        for c in node.tree { body(c) }
      } else {
        node.forEachInSubtree(body)
      }
    }
  }

  /// Calls `body` for every stored write pattern that may write a keypath
  /// affecting the read pattern.
  func forEachWriter(affecting reader: CPattern, _ body: (ContractState) -> Void) {
    let n = reader.ids.count
    visit(reader.ids) { node, depth in
      if depth == n && reader.isTree {
        node.forEachInSubtree(body)
      } else {
        for c in node.exact { body(c) }
        for c in node.tree { body(c) }
      }
    }
  }
}
