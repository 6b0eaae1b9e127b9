/// A bus that knows its model's shape (SPEC §14): made with a ``Schema``,
/// it checks every write and registration where the keypath is resolved,
/// and reads of declared keypaths without a stored value return their
/// default. `docs/schema.md` has the rules.
extension Bus {
  /// Makes an empty bus with a new epoch that enforces `schema`.
  public convenience init(schema: Schema) {
    self.init()
    store.schema = schema
  }

  /// The schema this bus enforces, nil for a bus made without one.
  public var schema: Schema? {
    withGate { store.schema }
  }

  /// Whether `keypath` holds a stored value, as opposed to none or its
  /// schema default: ``value(_:)-(String)`` returns either. Read like
  /// ``value(_:)-(String)``.
  public func isStored(_ keypath: String) throws(OrdoError) -> Bool {
    try withGate { () throws(OrdoError) in
      guard let n = try readable(keypath) else { return false }
      return store.value(n, own: gate.isOwner) != nil
    }
  }

  /// Whether the handle's keypath holds a stored value. See
  /// ``isStored(_:)-(String)``.
  public func isStored(_ handle: Handle) throws(OrdoError) -> Bool {
    try isStored(handle.keypath)
  }

  /// Checks a write against the schema: the slow path of a write its
  /// keypath's ``SchemaRule`` does not admit. Out of line: only a bus with
  /// a schema reaches it.
  @inline(never)
  func checkSchema(_ keypath: String, _ op: WriteOp) throws(OrdoError) {
    try store.schema?.checkWrite(keypath, op)
  }

  /// Checks a write through a handle or a property of a bus with a
  /// schema: what its rule does not decide asks the schema. Out of line,
  /// so that a write on a bus without a schema pays one test.
  @inline(never)
  func checkSchema(_ node: NodeRef, _ op: WriteOp, _ rule: SchemaRule) throws(OrdoError) {
    if !rule.admits(op) { try checkSchema(node.node.key, op) }
  }

  /// Checks a set through a handle of a bus with a schema that its rule
  /// does not decide (the caller decides a value of the declared type to
  /// an unconstrained keypath inline).
  @inline(never)
  func checkSchema(_ handle: Handle, _ value: borrowing Value) throws(OrdoError) {
    try checkSchema(handle.keypath, .set(copy value))
  }

  /// Checks a contract's patterns against the schema: each must match a
  /// declared keypath (a typo matches none).
  func checkSchema(_ spec: ContractSpec, reads: [Pattern], writes: [Pattern]) throws(OrdoError) {
    guard let schema else { return }
    for p in reads { try schema.checkPattern(p, contract: spec.name, role: "read") }
    for p in writes { try schema.checkPattern(p, contract: spec.name, role: "write") }
  }

  /// Refuses to resolve a keypath outside the schema: a handle names a
  /// declared keypath or a prefix of one (a collection element, for
  /// `removeTree`), a property a declared keypath of its type.
  func checkSchemaResolve(_ keypath: String, as typeName: String?) throws(OrdoError) {
    guard let schema = store.schema else { return }
    let segments = keypath.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    guard let typeName else { return try schema.checkTree(keypath, segments) }
    let d = schema.declarations[try schema.resolve(keypath, segments)]
    if typeName != d.type.rawValue {
      throw OrdoError(.typeMismatch, "keypath \"\(keypath)\" is declared \(d.type.rawValue) in the schema, not \(typeName)")
    }
  }

  /// `value`, or the schema's default for `keypath` when it is nil. Lock
  /// held.
  @inline(__always)
  func orDefault(_ value: Value?, _ keypath: @autoclosure () -> String) -> Value? {
    guard value == nil, let schema = store.schema else { return value }
    return schema.declaration(for: keypath())?.defaultValue
  }

  // MARK: - Bridges: reloading a schema

  /// The stored values `schema` does not allow (an undeclared keypath, a
  /// value of another type or outside its constraints), by keypath, each
  /// with the refusal's message: what a bridge lists before it refuses a
  /// state or a reload, or removes on purpose.
  package func schemaViolations(_ schema: Schema) -> [(keypath: String, problem: String)] {
    withGate { violations(of: schema) }
  }

  /// ``schemaViolations(_:)``. Lock held.
  private func violations(of schema: Schema) -> [(keypath: String, problem: String)] {
    var out: [(keypath: String, problem: String)] = []
    store.root.forEachInSubtree { n in
      guard n !== store.root, let v = store.journal.committedValue(n) else { return }
      let segments = n.key.split(separator: ".").map(String.init)
      do throws(OrdoError) {
        try schema.check(v, at: n.key, declaration: try schema.resolve(n.key, segments))
      } catch {
        out.append((n.key, error.message))
      }
    }
    return out.sorted { $0.keypath < $1.keypath }
  }

  /// Replaces the schema (a bridge's reload: `ordod`'s `SIGHUP`). Refused
  /// with ``OrdoError/Code/schema`` listing every registered contract
  /// pattern and stored value that `schema` would not allow; then nothing
  /// changes. Called with no transaction open and no other thread using the
  /// bus; refused with ``OrdoError/Code/invalidArgument`` while a
  /// transaction is open or once a handle or a property was made (they keep
  /// the rule their keypath had when they were made).
  package func replaceSchema(_ schema: Schema?) throws(OrdoError) {
    try withGate { () throws(OrdoError) in
      let acquired = gate.acquire()
      defer { if acquired { gate.release() } }
      guard acquired, case .idle = gate.phase else {
        throw OrdoError(.invalidArgument, "a schema is replaced only with no transaction open")
      }
      guard !link.keepsPinned else {
        throw OrdoError(.invalidArgument, "a schema is not replaced once handles or properties of the bus were made (they keep the rules of the schema they were made with)")
      }
      var problems: [String] = []
      if let schema {
        problems = violations(of: schema).map(\.problem)
        for c in contractGraph.registry.live.sorted(by: { $0.key < $1.key }) {
          for (role, list) in [("read", c.reads), ("write", c.writes)] {
            for p in list {
              do throws(OrdoError) { try schema.checkPattern(try Pattern(store.text(p)), contract: c.name, role: role) } catch {
                problems.append(error.message)
              }
            }
          }
        }
      }
      guard problems.isEmpty else {
        throw OrdoError(.schema, "the new schema would leave \(problems.count) thing(s) invalid: " + problems.joined(separator: "; "))
      }
      store.schema = schema
      store.root.forEachInSubtree { n in
        guard n !== store.root else { return }
        let segments = n.key.split(separator: ".").map(String.init)
        n.schemaRule = schema.map { SchemaRule($0, segments) } ?? .none
      }
    }
  }
}
