/// Which stored values belong to an owner (SPEC §15): values written inside
/// a `begin(owner:)` belong to that owner until a plain write of their
/// keypath, the removal of their value, or the owner's release, which
/// removes them all in one transaction.
///
/// A part of the ``Store``, guarded by the bus's lock. Ownership changes
/// only when a transaction ends, and the last write of a keypath in the
/// transaction decides it: the transaction notes, in order, its owned sets
/// (``wrote(_:_:)``), and — once it has noted one — its plain sets too
/// (``isNoting``), so that a plain set made after an owned one (a
/// callback's in the pass, or a set after the owned scope's commit) ends
/// the ownership; a release notes its values as pending removal. The end
/// of a transaction that stays (committed, or changing nothing) settles
/// who owns what from the journal and the notes (``settle(_:)``); a
/// rolled-back or refused transaction forgets its notes
/// (``forget()``), and the values of an owner released in it, which it
/// did not remove, go to ``restoredOwner``.
///
/// What a plain transaction pays: one test per write that reaches the
/// store (``isNoting``), and one at its end (``isEmpty``).
///
/// Guarded by the bus's lock, so exclusivity is unchecked: every commit
/// reads its fields (as it reads ``Journal/conflict`` and the gate's owned
/// scopes), and a commit that owns nothing does not pay the dynamic check.
final class Ownership {
  /// The owner of each owned value, by node.
  @exclusivity(unchecked) private var ownerOf: [ObjectIdentifier: UInt64] = [:]
  /// Each owner's values in the order it took them, retained (a node
  /// holding a value stays in the store anyway). A value it no longer owns
  /// leaves a nil behind, so that taking and giving up stay O(1) and a
  /// release removes its values in a stable order without sorting them
  /// (sorting 10 000 keypaths takes longer than removing them).
  private var values: [UInt64: OwnedList] = [:]

  struct OwnedList {
    var nodes: [KeyNode?] = []
    var index: [ObjectIdentifier: Int] = [:]

    mutating func add(_ n: KeyNode) {
      index[ObjectIdentifier(n)] = nodes.count
      nodes.append(n)
    }

    mutating func remove(_ n: KeyNode) {
      if let i = index.removeValue(forKey: ObjectIdentifier(n)) { nodes[i] = nil }
    }

    var isEmpty: Bool { index.isEmpty }
    var live: [KeyNode] { nodes.compactMap { $0 } }
  }
  /// The live owners' names, by id.
  private var names: [UInt64: String] = [:]
  private var lastID: UInt64 = 0
  /// The running transaction's notes, in the order made: its owned sets
  /// (the owner's id), plain sets made after the first note (``plain``),
  /// and the values of the owners it released (``pendingRemoval``).
  @exclusivity(unchecked) private var noted: [(node: KeyNode, owner: UInt64)] = []

  /// The owner of a noted plain set: none (owner ids start at 1).
  static let plain: UInt64 = 0
  /// The owner of a noted value whose owner the transaction released: none
  /// once the transaction stays (it removed the value); ``restoredOwner``
  /// when it does not (``forget()``).
  private static let pendingRemoval: UInt64 = .max

  /// Whether no value is owned and the running transaction noted nothing:
  /// then the end of a transaction has nothing to settle.
  var isEmpty: Bool { ownerOf.isEmpty && noted.isEmpty }

  /// Whether the running transaction notes its plain sets: it has noted an
  /// owned set or a release, which a later plain set of the same keypath
  /// must undo.
  @inline(__always)
  var isNoting: Bool { !noted.isEmpty }

  /// The number of owned values (statistics).
  var count: Int { ownerOf.count }

  /// A new owner's id.
  func add(name: String) -> UInt64 {
    lastID += 1
    names[lastID] = name
    return lastID
  }

  /// Whether `owner` is live (added, not released).
  func isLive(_ owner: UInt64) -> Bool { names[owner] != nil }

  /// Notes a set of `node`: by `owner`, inside a `begin(owner:)`, or
  /// ``plain`` (while ``isNoting``).
  func wrote(_ node: KeyNode, _ owner: UInt64) { noted.append((node, owner)) }

  /// Settles the end of a transaction that stays. A value set or removed
  /// in it, or removed by a `removeTree`, is no longer owned, unless its
  /// keypath's last set in the transaction is an owned one by a live owner
  /// and the value is still held: then it belongs to that owner. (A
  /// `touch` changes no ownership.)
  func settle(_ journal: Journal) {
    if !ownerOf.isEmpty {
      for i in 0..<journal.count {
        let r = journal[i]
        r.node.with { n in if r.ownValue || !n.hasValue { drop(n) } }
      }
    }
    // In order: each note undoes the ones before it for its keypath.
    for (n, owner) in noted {
      guard n.hasValue && names[owner] != nil else {
        drop(n)
        continue
      }
      if ownerOf[ObjectIdentifier(n)] == owner { continue }
      drop(n)
      ownerOf[ObjectIdentifier(n)] = owner
      values[owner, default: OwnedList()].add(n)
    }
    noted.removeAll()
  }

  /// Forgets the notes of a transaction that does not stay. The values of
  /// owners it released are not removed, and their owners are gone: they
  /// go to ``restoredOwner``.
  func forget() {
    guard !noted.isEmpty else { return }
    let kept = noted.compactMap { $0.owner == Ownership.pendingRemoval && $0.node.hasValue ? $0.node : nil }
    noted.removeAll()
    if !kept.isEmpty { adopt(kept) }
  }

  private func drop(_ n: KeyNode) {
    guard let owner = ownerOf.removeValue(forKey: ObjectIdentifier(n)) else { return }
    values[owner]?.remove(n)
    if values[owner]?.isEmpty == true { values[owner] = nil }
  }

  /// Releases `owner`: it owns nothing more, and its values — those it
  /// took in the running transaction included, those a plain write of it
  /// took away left out — are returned, in the order it took them, for the
  /// running transaction to remove them. They are noted as pending removal
  /// (see ``forget()``).
  func release(_ owner: UInt64, _ journal: Journal) -> [KeyNode] {
    names[owner] = nil
    var live: [KeyNode] = []
    let last = lastNotes()
    if let held = values.removeValue(forKey: owner) {
      for id in held.index.keys { ownerOf[id] = nil }
      // Not those a plain write of the running transaction took from it
      // (as settle would): its value written, and its last note not its own.
      live = held.live.filter { n in
        guard let i = journal.index(n.ref), journal[i].ownValue else { return true }
        return last[ObjectIdentifier(n)] == owner
      }
    }
    if !noted.isEmpty {
      // Its sets in the running transaction, not settled yet, that no
      // later set of the same keypath undid: its values too.
      var taken = Set(live.map(ObjectIdentifier.init))
      for (n, o) in noted where o == owner && last[ObjectIdentifier(n)] == owner && n.hasValue {
        if taken.insert(ObjectIdentifier(n)).inserted { live.append(n) }
      }
    }
    for n in live { noted.append((n, Ownership.pendingRemoval)) }
    return live
  }

  /// The owner of each node's last note in the running transaction, by node.
  private func lastNotes() -> [ObjectIdentifier: UInt64] {
    var last: [ObjectIdentifier: UInt64] = [:]
    for (n, owner) in noted { last[ObjectIdentifier(n)] = owner }
    return last
  }

  /// The owned values whose keypaths `matches` accepts, with their owners'
  /// names, by keypath.
  func list(_ matches: (String) -> Bool) -> [(keypath: String, owner: String)] {
    var out: [(keypath: String, owner: String)] = []
    for (owner, held) in values {
      let name = names[owner] ?? ""
      for case let n? in held.nodes where matches(n.key) { out.append((n.key, name)) }
    }
    return out.sorted { $0.keypath < $1.keypath }
  }

  /// Whether the value at `node` is owned (for persistence).
  func owns(_ node: KeyNode) -> Bool { ownerOf[ObjectIdentifier(node)] != nil }

  /// Whether each journal record's value is owned once the running
  /// transaction settles (``settle(_:)``), by record index: for a
  /// persistence layer, before the commit.
  func after(_ journal: Journal) -> (Int) -> Bool {
    // The last note of each keypath decides, as in settle.
    let lastNote = lastNotes()
    return { [ownerOf, names] i in
      let r = journal[i]
      return r.node.with { n in
        guard n.hasValue else { return false }
        if let owner = lastNote[ObjectIdentifier(n)] { return names[owner] != nil }
        return !r.ownValue && ownerOf[ObjectIdentifier(n)] != nil
      }
    }
  }

  /// The id of the owner that holds the values a persistence layer
  /// restored as owned whose owners are not live, and the values of owners
  /// released in a transaction that did not stay (0: none).
  private(set) var restoredOwner: UInt64 = 0
  /// ``restoredOwner``'s name.
  static let restoredOwnerName = "(no live owner)"

  /// Takes the ownership a restore brought back: values no longer held are
  /// no longer owned, and restored owned values that no live owner holds
  /// belong to one owner, ``restoredOwner``, whose release removes them.
  func restored(_ owned: [KeyNode]) {
    for n in values.values.flatMap(\.live) where !n.hasValue { drop(n) }
    adopt(owned)
  }

  /// Gives the values of `owned` (held values) that no owner holds to
  /// ``restoredOwner``, made when there is none.
  private func adopt(_ owned: [KeyNode]) {
    let orphans = owned.filter { ownerOf[ObjectIdentifier($0)] == nil }
    guard !orphans.isEmpty else { return }
    if restoredOwner == 0 || names[restoredOwner] == nil { restoredOwner = add(name: Ownership.restoredOwnerName) }
    for n in orphans {
      ownerOf[ObjectIdentifier(n)] = restoredOwner
      values[restoredOwner, default: OwnedList()].add(n)
    }
  }
}
