// The peers table: the peers the service knows and the remote contracts
// they registered, indexed by id and by peer.
import Ordo
import Synchronization

/// One peer (a unique name) the service knows: its contracts, who it is
/// (with a policy), and the liveness state of its writers.
///
/// The registry (``RemoteContracts``) is changed on the service thread only;
/// the fields the committing thread reads during a pass are atomic
/// (`suspended`, `maxTimeoutMs`) or belong to the pass (`budget…`: passes
/// are serialized by the bus).
final class RemotePeer: @unchecked Sendable {
  let name: String
  /// Its contracts (service thread).
  var contracts: Set<ContractID> = []
  /// The uid and gids the bus daemon reported, fetched once (with a policy).
  var identity: PeerIdentity?
  /// Set when one of its writers did not answer in time (or the pass's
  /// budget for this peer ran out): its writers are not awaited, nor sent
  /// `Notify`, until the peer calls any method of the service.
  let suspended = Atomic<Bool>(false)
  /// The largest `timeout-ms` among its writer contracts: the most its
  /// writers together may make one pass wait.
  let maxTimeoutMs = Atomic<UInt32>(0)
  /// Its writer contracts still to be called again as initial calls since
  /// it was resumed, by id (service thread).
  var recallDue: [ContractID] = []
  /// The pass (transaction id) whose budget `budgetDeadline` is.
  var budgetTransaction: UInt64 = 0
  var budgetDeadline: Int64 = 0

  init(name: String) { self.name = name }
}

/// One contract a peer registered over D-Bus.
final class RemoteContract: @unchecked Sendable {
  let id: ContractID
  let name: String
  let peer: RemotePeer
  /// A writer's timeout; nil for an observer (empty write set).
  let timeoutMs: UInt32?
  /// An every-transaction observer (empty read set): its `Notify` carries
  /// every changed keypath, filtered to what the peer may read.
  let everyTransaction: Bool
  /// Registered with the option `cache`: its `Notify` carries what a
  /// client-side cache of its read set needs (``Bus/readSetValues(of:under:)``).
  let cache: Bool

  init(id: ContractID, name: String, peer: RemotePeer, timeoutMs: UInt32?, everyTransaction: Bool, cache: Bool = false) {
    self.id = id
    self.name = name
    self.peer = peer
    self.timeoutMs = timeoutMs
    self.everyTransaction = everyTransaction
    self.cache = cache
  }

  var owner: String { peer.name }
  var isWriter: Bool { timeoutMs != nil }
  /// Whether the pass skips this writer for now.
  var isSuspended: Bool { isWriter && peer.suspended.load(ordering: .relaxed) }
}

/// The remote contracts and the peers that hold them: one record per
/// contract, indexed by id and by peer (service thread only).
struct RemoteContracts {
  private(set) var byID: [ContractID: RemoteContract] = [:]
  private(set) var peers: [String: RemotePeer] = [:]

  /// The record of `name`, made if it has none.
  mutating func peer(_ name: String) -> RemotePeer {
    if let p = peers[name] { return p }
    let p = RemotePeer(name: name)
    peers[name] = p
    return p
  }

  /// Peers that hold at least one contract.
  var peersWithContracts: Int { peers.values.reduce(0) { $0 + ($1.contracts.isEmpty ? 0 : 1) } }

  mutating func add(_ c: RemoteContract) {
    byID[c.id] = c
    c.peer.contracts.insert(c.id)
    if let t = c.timeoutMs, t > c.peer.maxTimeoutMs.load(ordering: .relaxed) { c.peer.maxTimeoutMs.store(t, ordering: .relaxed) }
  }

  /// Forgets one contract (its peer record stays, with its identity).
  @discardableResult
  mutating func remove(_ id: ContractID) -> RemoteContract? {
    guard let c = byID.removeValue(forKey: id) else { return nil }
    c.peer.contracts.remove(id)
    let largest = c.peer.contracts.compactMap { byID[$0]?.timeoutMs }.max() ?? 0
    c.peer.maxTimeoutMs.store(largest, ordering: .relaxed)
    return c
  }

  /// Forgets a peer that left and returns the ids of its contracts.
  mutating func removePeer(_ name: String) -> [ContractID] {
    guard let p = peers.removeValue(forKey: name) else { return [] }
    let ids = p.contracts.sorted()
    for id in ids { byID[id] = nil }
    p.contracts.removeAll()
    return ids
  }

  mutating func removeAll() {
    byID.removeAll()
    peers.removeAll()
  }
}
