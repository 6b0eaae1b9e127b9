/// A contract's identifier, unique on its bus and never reused.
public typealias ContractID = UInt64

/// One write of a batch (see `Bus/write(_:)`).
public enum Write: Sendable, Hashable {
  /// Set the value of a keypath.
  case set(String, Value)
  /// Mark a keypath changed without a value.
  case touch(String)
  /// Remove a keypath's value.
  case remove(String)
  /// Remove the values of a keypath and all its descendants.
  case removeTree(String)
}

/// Options of a contract.
public struct ContractFlags: OptionSet, Hashable, Sendable {
  /// The raw bits, the same as the C `ORDO_*` flag values.
  public let rawValue: UInt32
  /// Makes flags from their raw bits.
  public init(rawValue: UInt32) { self.rawValue = rawValue }
  /// Call the contract once with an empty `changed` list (SPEC §5): during
  /// registration outside any transaction, at its position in the running
  /// pass, or once for the transaction this thread has open (see
  /// ``Bus/register(_:)``).
  public static let notifyInitial = ContractFlags(rawValue: 1 << 0)
}

/// What a contract's callback receives.
public struct ContractNotification: Sendable, Hashable {
  /// The transaction id (the last committed id for an initial call outside
  /// a pass).
  public private(set) var transaction: UInt64
  /// The contract being called.
  public private(set) var contract: ContractID
  /// The keypaths written in this transaction, as written, that affect the
  /// contract's read set and still count as changed; every changed keypath for
  /// an every-transaction contract; empty for an initial call.
  public private(set) var changed: ChangedKeypaths

  init(transaction: UInt64, contract: ContractID, changed: ChangedKeypaths) {
    self.transaction = transaction
    self.contract = contract
    self.changed = changed
  }

  /// The notification a pass reuses for its calls: it holds `keeper`, the
  /// store's root, once for the whole pass (see ``ChangedKeypaths``).
  init(pass transaction: UInt64, keeper: KeyNode) {
    self.transaction = transaction
    self.contract = 0
    self.changed = ChangedKeypaths(keeper: keeper)
  }

  /// Readies a pass's reused notification for a call of `contract` told of
  /// the one keypath of `node`: no reference count changes.
  @inline(__always)
  mutating func prepare(_ contract: ContractID, node: NodeRef) {
    self.contract = contract
    changed.setNode(node)
  }

  /// Readies a pass's reused notification for a call of `contract` told of
  /// `keypaths` (none, or several).
  mutating func prepare(_ contract: ContractID, keypaths: ChangedKeypaths) {
    self.contract = contract
    changed.setKeypaths(keypaths)
  }
}

/// The changed keypaths of a ``ContractNotification``: a collection of strings that
/// holds the common single keypath without allocating. Compares equal to an
/// array literal (`note.changed == ["a.b"]`); `Array(note.changed)` copies it.
public struct ChangedKeypaths: RandomAccessCollection, Hashable, @unchecked Sendable, ExpressibleByArrayLiteral, CustomStringConvertible {
  // The common single keypath is held as its key node, whose key never
  // changes (hence Sendable), without a reference count: `keeper`, the
  // store's root, owns every node, and a node named in a notification is
  // never pruned from the tree (`NodeState.named`), so the node lives as
  // long as this collection. A pass holds the keeper once in the
  // notification it reuses for every call (``ContractNotification/prepare(_:node:)``);
  // a copy that escapes the callback retains it then. Holding the node
  // instead cost every call a retain and a release, 7-10 % of a delivered
  // change (`ordo-bench --only delivery`, delivery-handles).
  // Two fields rather than an enum: naming a node then writes one field
  // and tests the other, where replacing an enum case calls its outlined
  // destroy (8 instructions more per call). At most one is set.
  /// The single keypath's node, or nil.
  /// Unretained: docs/reliability.md, "Unretained references", row "a notification's single changed keypath".
  private var node: NodeRef?
  /// Several keypaths (or a single one not named by its node), or nil.
  private var list: [String]?
  /// The store's root when ``node`` may be set; nil otherwise.
  private let keeper: KeyNode?

  /// Makes the collection from keypaths.
  public init(_ keypaths: [String]) {
    list = keypaths.isEmpty ? nil : keypaths
    keeper = nil
  }

  /// An empty collection that can name nodes of the store `keeper` is the
  /// root of.
  init(keeper: KeyNode) {
    self.keeper = keeper
  }

  /// Names one keypath by its node, which `keeper` owns; marks the node
  /// named, so that the store never prunes it. Lock held.
  @inline(__always)
  mutating func setNode(_ node: NodeRef) {
    assert(keeper != nil, "a node named without the store's root")
    node.state.pointee.named = true
    if list != nil { list = nil }
    self.node = node
  }

  /// Holds the keypaths of `other`, which names no node.
  mutating func setKeypaths(_ other: ChangedKeypaths) {
    precondition(other.node == nil, "setKeypaths takes strings, not a node")
    node = nil
    list = other.list
  }

  /// Makes the collection from keypaths.
  public init(arrayLiteral keypaths: String...) { self.init(keypaths) }

  /// 0.
  public var startIndex: Int { 0 }
  /// The number of keypaths.
  public var endIndex: Int { node != nil ? 1 : list?.count ?? 0 }
  /// Printed as an array: `["a.b"]`.
  public var description: String { Array(self).description }

  /// The keypath at `i`.
  public subscript(i: Int) -> String {
    if let node {
      precondition(i == 0, "index out of range")
      return node.with { $0.key }
    }
    guard let list else { preconditionFailure("index out of range") }
    return list[i]
  }

  /// For bridges that hand keypaths to C: the only keypath, as
  /// NUL-terminated UTF-8 that stays valid while this collection (or a copy
  /// of it) lives; nil when it holds none or several. No copy per call: the
  /// key node makes the C string once, the first time it is asked.
  /// Only on the thread that runs the pass (the one that calls contracts).
  package var onlyKeypathCString: UnsafePointer<CChar>? {
    node?.cKey
  }

  /// Equal when they hold the same keypaths in the same order.
  public static func == (a: ChangedKeypaths, b: ChangedKeypaths) -> Bool { a.elementsEqual(b) }

  /// Hashes the keypaths in order.
  public func hash(into h: inout Hasher) {
    h.combine(count)
    for k in self { h.combine(k) }
  }
}

/// A contract's callback. It runs synchronously on the committing thread and
/// may call back into the bus (read, write within its contract, register,
/// unregister). A thrown error is reported to the bus's failure handler and
/// does not stop the pass.
public typealias ContractCallback = @Sendable (ContractNotification) throws -> Void

/// The declaration of a contract (SPEC §4).
public struct ContractSpec: Sendable {
  /// Unique on the bus; used in diagnostics.
  public var name: String
  /// Read patterns. Empty: an every-transaction contract.
  public var reads: [String]
  /// Write patterns (permissions).
  public var writes: [String]
  /// `nil` for a data contract; otherwise the priority (normalization -3,
  /// coordination -2, computed data -1, view hierarchy 1, 2, 3 …).
  public var priority: Int32?
  /// Options.
  public var flags: ContractFlags
  /// Called once per pass in which the contract's reads changed.
  public var callback: ContractCallback

  /// Makes a contract declaration.
  public init(
    name: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], callback: @escaping ContractCallback
  ) {
    self.name = name
    self.reads = reads
    self.writes = writes
    self.priority = priority
    self.flags = flags
    self.callback = callback
  }
}

/// A registered contract: keeps its id and name and can unregister it.
/// The handle keeps its bus alive.
public struct ContractHandle: Sendable, Hashable {
  /// The contract's id.
  public let id: ContractID
  /// The contract's name.
  public let name: String
  /// The bus it is registered on.
  public let bus: Bus

  /// Unregisters the contract. Throws ``OrdoError/Code/notFound`` when it is
  /// already gone.
  public func unregister() throws(OrdoError) { try bus.unregister(id) }

  /// Handles are equal when they name the same contract on the same bus.
  public static func == (a: ContractHandle, b: ContractHandle) -> Bool { a.id == b.id && a.bus === b.bus }
  /// Hashes the id and the bus's identity.
  public func hash(into h: inout Hasher) {
    h.combine(id)
    h.combine(ObjectIdentifier(bus))
  }
}

/// The kind of a contract, which decides its phase in the pass.
public enum ContractKind: String, Sendable, Hashable {
  /// Has a priority: runs first, by ascending priority.
  case priority
  /// No priority: runs after the priority contracts, by level.
  case data
  /// Empty read set: runs at the end of every pass that changed something.
  case everyTransaction = "every-transaction"
}

/// A description of a registered contract, for introspection.
public struct ContractInfo: Sendable, Hashable {
  /// The contract's id.
  public let id: ContractID
  /// Its name.
  public let name: String
  /// Its kind.
  public let kind: ContractKind
  /// Read patterns as declared.
  public let reads: [String]
  /// Write patterns as declared.
  public let writes: [String]
  /// Its priority (`nil` for data and every-transaction contracts).
  public let priority: Int32?
  /// Its dependency level (0 for priority and every-transaction contracts).
  public let level: Int
  /// Its 0-based position in the pass order among all contracts.
  public let position: Int
  /// Calls made so far.
  public let calls: UInt64
  /// The transaction of its last call (0 if never called).
  public let lastTransaction: UInt64
  /// Calls whose callback failed.
  public let failures: UInt64
  /// Declared read patterns its callbacks never read through the bus: a
  /// read of a keypath counts for the first read pattern matching it; a
  /// query by patterns (a snapshot, a scope's values, changes since a
  /// transaction) for every read pattern it covers or falls under.
  public let unusedReads: [String]
  /// Declared write patterns its callbacks never wrote through.
  public let unusedWrites: [String]
}

/// A callback's failure, reported to the bus's failure handler.
public struct ContractFailure: Error, Sendable {
  /// The failing contract's id.
  public let contract: ContractID
  /// Its name.
  public let name: String
  /// The transaction in which it failed.
  public let transaction: UInt64
  /// What the callback threw, described.
  public let message: String
}

/// Counts kept by a bus since it was made.
public struct BusStatistics: Sendable, Hashable {
  /// Contracts registered now.
  public var contracts: Int
  /// Committed transactions that changed something (the last id).
  public var transactions: UInt64
  /// Contract calls made.
  public var notifications: UInt64
  /// Callbacks that failed.
  public var failures: UInt64
  /// Transactions rolled back.
  public var rollbacks: UInt64
  /// Transactions refused because a condition did not hold (SPEC §15).
  public var conflicts: UInt64
  /// Keypaths holding a value.
  public var values: Int
  /// Values that belong to an owner (SPEC §15).
  public var ownedValues: Int
}
