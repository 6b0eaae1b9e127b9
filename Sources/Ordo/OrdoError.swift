/// An error from the bus: a code that names the rule that was broken (the
/// same names as the C `ORDO_E_*` statuses and the D-Bus
/// `dev.ordo.Error.*` names) and a message that says precisely what was wrong.
///
/// A call that throws leaves the bus as it was.
public struct OrdoError: Error, Hashable, Sendable, CustomStringConvertible {
  /// What kind of failure this is. The raw values are the C `ordo_status`
  /// values.
  public enum Code: Int32, Hashable, Sendable, CaseIterable {
    /// An argument was out of range or a call was made in a state that does
    /// not allow it (`ORDO_E_INVALID_ARGUMENT`).
    case invalidArgument = 1
    /// A keypath or pattern is malformed (`ORDO_E_INVALID_KEYPATH`).
    case invalidKeypath = 2
    /// A value has another type than the one asked for (`ORDO_E_TYPE_MISMATCH`).
    case typeMismatch = 3
    /// No such value or contract (`ORDO_E_NOT_FOUND`).
    case notFound = 4
    /// A write, commit or rollback outside a transaction (`ORDO_E_NO_TRANSACTION`).
    case noTransaction = 5
    /// A callback read or wrote outside its contract (`ORDO_E_CONTRACT_VIOLATION`).
    case contractViolation = 6
    /// A callback wrote something an earlier contract reads (`ORDO_E_STABILITY`).
    case stability = 7
    /// Data contracts would depend on each other in a cycle (`ORDO_E_CYCLE`).
    case cycle = 8
    /// A contract's position contradicts its dependencies (`ORDO_E_ORDER_CONFLICT`).
    case orderConflict = 9
    /// A contract name is already used on this bus (`ORDO_E_DUPLICATE_NAME`).
    case duplicateName = 10
    /// A configured limit was reached (`ORDO_E_LIMIT`).
    case limit = 11
    /// A D-Bus failure (`ORDO_E_DBUS`).
    case dbus = 12
    /// A transaction could not be stored by a persistence layer; nothing of
    /// it was applied (`ORDO_E_STORAGE`).
    case storage = 13
    /// A write, value or contract the bus's schema does not allow, or a
    /// schema that does not validate (`ORDO_E_SCHEMA`).
    case schema = 14
    /// A conditional commit found a keypath's counter other than expected;
    /// nothing was applied (`ORDO_E_CONFLICT`).
    case conflict = 15
    /// A bug in Ordo (`ORDO_E_INTERNAL`).
    case `internal` = 99

    /// The status name without prefix, as in the conformance format and the
    /// C header: `INVALID_KEYPATH`, `CYCLE`, …
    public var name: String {
      switch self {
      case .invalidArgument: "INVALID_ARGUMENT"
      case .invalidKeypath: "INVALID_KEYPATH"
      case .typeMismatch: "TYPE_MISMATCH"
      case .notFound: "NOT_FOUND"
      case .noTransaction: "NO_TRANSACTION"
      case .contractViolation: "CONTRACT_VIOLATION"
      case .stability: "STABILITY"
      case .cycle: "CYCLE"
      case .orderConflict: "ORDER_CONFLICT"
      case .duplicateName: "DUPLICATE_NAME"
      case .limit: "LIMIT"
      case .dbus: "DBUS"
      case .storage: "STORAGE"
      case .schema: "SCHEMA"
      case .conflict: "CONFLICT"
      case .internal: "INTERNAL"
      }
    }

    /// The name in D-Bus style: `InvalidKeypath`, `Cycle`, …
    public var camelName: String {
      name.split(separator: "_").map { $0.prefix(1) + $0.dropFirst().lowercased() }.joined()
    }

    /// Looks a code up by its status name (`"CYCLE"`).
    public init?(name: String) {
      guard let code = Code.allCases.first(where: { $0.name == name }) else { return nil }
      self = code
    }
  }

  /// The rule that was broken.
  public let code: Code
  /// What was wrong, naming the keypath, contract or value involved.
  public let message: String

  /// Makes an error.
  public init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
  }

  /// `CODE: message`.
  public var description: String { "\(code.name): \(message)" }
}
