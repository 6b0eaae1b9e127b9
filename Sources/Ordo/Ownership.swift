/// Which stored values belong to an owner (SPEC §15): values written inside
/// a `begin(owner:)` belong to that owner until a plain write of their
/// keypath, the removal of their value, or the owner's release, which
/// removes them all in one transaction.
///
/// A part of the ``Store``, guarded by the bus's lock. It costs a plain
/// transaction one test at its end (``isEmpty``): the writes of an owned
/// transaction are noted as they are made (``wrote(_:_:)``), and the end of
/// a transaction that stays (committed, or changing nothing) settles who
/// owns what from the journal (``settle(_:)``); a rolled-back or refused
/// transaction only forgets what it noted.
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
  /// The owned sets of the running transaction, in the order made.
  @exclusivity(unchecked) private var noted: [(node: KeyNode, owner: UInt64)] = []

  /// Whether no value is owned and the running transaction noted no owned
  /// write: then the end of a transaction has nothing to settle.
  var isEmpty: Bool { ownerOf.isEmpty && noted.isEmpty }

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

  /// Notes a set made inside a `begin(owner:)`.
  func wrote(_ node: KeyNode, _ owner: UInt64) { noted.append((node, owner)) }

  /// Settles the end of a transaction that stays: a value removed, or set
  /// or removed by a plain write, is no longer owned; a value set by an
  /// owned write and still held belongs to its owner. (A keypath set owned
  /// and then written by a callback of the same pass stays owned: the
  /// journal does not tell who wrote it last.)
  func settle(_ journal: Journal) {
    if !ownerOf.isEmpty {
      for i in 0..<journal.count {
        let r = journal[i]
        r.node.with { n in if r.ownValue || !n.hasValue { drop(n) } }
      }
    }
    for (n, owner) in noted where n.hasValue && names[owner] != nil && ownerOf[ObjectIdentifier(n)] != owner {
      drop(n)
      ownerOf[ObjectIdentifier(n)] = owner
      values[owner, default: OwnedList()].add(n)
    }
    noted.removeAll()
  }

  /// Forgets the owned writes of a transaction that does not stay.
  func forget() {
    if !noted.isEmpty { noted.removeAll() }
  }

  private func drop(_ n: KeyNode) {
    guard let owner = ownerOf.removeValue(forKey: ObjectIdentifier(n)) else { return }
    values[owner]?.remove(n)
    if values[owner]?.isEmpty == true { values[owner] = nil }
  }

  /// Releases `owner`: it owns nothing more, and its values are returned,
  /// in the order it took them, for the transaction that removes them.
  func release(_ owner: UInt64) -> [KeyNode] {
    names[owner] = nil
    guard let held = values.removeValue(forKey: owner) else { return [] }
    for id in held.index.keys { ownerOf[id] = nil }
    return held.live
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
    var byNoted: Set<ObjectIdentifier> = []
    for (n, owner) in noted where names[owner] != nil { byNoted.insert(ObjectIdentifier(n)) }
    return { [ownerOf] i in
      let r = journal[i]
      return r.node.with { n in
        guard n.hasValue else { return false }
        if byNoted.contains(ObjectIdentifier(n)) { return true }
        return !r.ownValue && ownerOf[ObjectIdentifier(n)] != nil
      }
    }
  }

  /// The id of the owner that holds the values a persistence layer
  /// restored as owned whose owners are not live (0: none).
  private(set) var restoredOwner: UInt64 = 0

  /// Takes the ownership a restore brought back: values no longer held are
  /// no longer owned, and restored owned values that no live owner holds
  /// belong to one owner, ``restoredOwner``, whose release removes them.
  func restored(_ owned: [KeyNode]) {
    for n in values.values.flatMap(\.live) where !n.hasValue { drop(n) }
    let orphans = owned.filter { ownerOf[ObjectIdentifier($0)] == nil }
    guard !orphans.isEmpty else { return }
    if restoredOwner == 0 || names[restoredOwner] == nil { restoredOwner = add(name: "(before the restart)") }
    for n in orphans {
      ownerOf[ObjectIdentifier(n)] = restoredOwner
      values[restoredOwner, default: OwnedList()].add(n)
    }
  }
}
