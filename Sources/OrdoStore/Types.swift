import Ordo

/// One keypath's durable state (SPEC §10, §11, §15): its value (`nil` for a
/// tombstone: a keypath whose value was removed), its counter, its
/// changed-at (the id of the last transaction that changed it) and whether
/// its value is owned.
public struct StoredKeypath: Hashable, Sendable, CustomStringConvertible {
  /// The keypath (valid by the rules of `Keypath`).
  public var keypath: String
  /// Its value; `nil` when it holds none (a tombstone).
  public var value: Value?
  /// The number of committed transactions that changed it (≥ 1).
  public var counter: UInt64
  /// The id of the last committed transaction that changed it (≥ counter).
  public var changedAt: UInt64
  /// Whether its value belongs to an owner (SPEC §15). Owners do not
  /// outlive the process, so a restored owned value is removed by the first
  /// transaction after the restart (`DurableState.attach`). A tombstone is
  /// never owned.
  public var owned: Bool

  public init(keypath: String, value: Value?, counter: UInt64, changedAt: UInt64, owned: Bool = false) {
    self.keypath = keypath
    self.value = value
    self.counter = counter
    self.changedAt = changedAt
    self.owned = owned
  }

  public var description: String {
    "\(keypath) = \(value.map { "\($0)" } ?? "(none)") counter \(counter) changed-at \(changedAt)\(owned ? " owned" : "")"
  }
}

/// Everything a state file holds: the epoch, the last durable transaction id
/// and every keypath that was ever changed (tombstones included), sorted by
/// keypath.
public struct StoredState: Equatable, Sendable {
  /// The bus's epoch: a UUID string made when the state file was created.
  public var epoch: String
  /// The id of the last transaction made durable (0 for a new file).
  public var lastTransaction: UInt64
  /// Every stored keypath, sorted by keypath (byte order of the UTF-8).
  public var keypaths: [StoredKeypath]

  public init(epoch: String, lastTransaction: UInt64, keypaths: [StoredKeypath]) {
    self.epoch = epoch
    self.lastTransaction = lastTransaction
    self.keypaths = keypaths
  }
}

/// How hard `StateFile.sync()` works to make a group durable
/// (docs/storage.md).
public enum SyncMode: String, Sendable, CaseIterable {
  /// The default: SQLite `synchronous=FULL` in WAL mode. Every `sync()`
  /// that returned survives `kill -9` of the process and a power loss
  /// (one `fsync` of the WAL per `sync()`).
  case full
  /// SQLite `synchronous=NORMAL` in WAL mode. Every `sync()` that returned
  /// survives `kill -9` of the process (the data is in the kernel); a power
  /// loss or OS crash may lose the last groups synced before it (the WAL is
  /// fsynced only at checkpoints), never leaving one half there.
  case normal

  /// Parses `full` or `normal` (the `--sync` option of `ordod`).
  public init(parsing text: String) throws(StoreError) {
    guard let mode = SyncMode(rawValue: text) else {
      throw StoreError(
        .invalidArgument, path: "",
        message: "unknown sync setting \"\(text)\" (expected one of: \(SyncMode.allCases.map(\.rawValue).joined(separator: ", ")))")
    }
    self = mode
  }
}

/// Why a state file could not be opened or written. `message` names the
/// file and the problem and is meant for the user as it is.
public struct StoreError: Error, Equatable, Sendable, CustomStringConvertible {
  public enum Kind: String, Sendable {
    /// Another process (another `ordod`) holds the state file's lock.
    case locked
    /// Not a database, damaged (`PRAGMA quick_check` failed), missing
    /// tables, or rows that break the format's invariants.
    case corrupt
    /// Written by a newer format version than this build reads.
    case futureFormat
    /// A database of another application (not an Ordo state file).
    case foreign
    /// The file system refused: disk full, I/O error, read-only file or
    /// directory, permission denied.
    case storage
    /// The caller passed something invalid; nothing was changed.
    case invalidArgument
    /// The state file was closed.
    case closed
  }

  /// What kind of problem it is.
  public let kind: Kind
  /// The state file's path ("" when the problem is not about a file).
  public let path: String
  /// The whole message, naming the file and the problem.
  public let message: String

  public init(_ kind: Kind, path: String, message: String) {
    self.kind = kind
    self.path = path
    self.message = message
  }

  public var description: String { message }

  /// The error of a problem with the state file at `path`: the message is
  /// "state file PATH: PROBLEM".
  static func stateFile(_ path: String, _ kind: Kind, _ problem: String) -> StoreError {
    StoreError(kind, path: path, message: "state file \(path): \(problem)")
  }
}
