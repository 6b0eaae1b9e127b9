/// The declared shape of a model (SPEC §14): which keypaths exist, the type
/// each holds, its default, its constraints and a description. A segment
/// `*` declares the elements of a collection (`playlist.tracks.*.title`).
///
/// A bus made with a schema (``Bus/init(schema:)``) enforces it on every
/// write and registration: an undeclared keypath, a value outside its
/// constraints or a `set` of an event is refused with
/// ``OrdoError/Code/schema``, a value of another type with
/// ``OrdoError/Code/typeMismatch``, and a read of a declared keypath that
/// holds no value returns its default. The format and the rules:
/// `docs/schema.md`.
///
/// ```swift
/// let schema = try Schema(json: """
///   {"ordo-schema": 1, "keys": {
///     "doc.title": {"type": "string", "default": ""},
///     "doc.items.*.done": {"type": "bool", "default": false}}}
///   """)
/// let bus = Bus(schema: schema)
/// ```
///
/// Read a file with Foundation: `try Schema(json: Data(contentsOf: url))`.
public struct Schema: Sendable, Hashable, CustomStringConvertible {
  /// The type a declared keypath holds.
  public enum ValueType: String, Sendable, Hashable, CaseIterable {
    /// ``Value/bool(_:)``.
    case bool
    /// ``Value/int64(_:)``.
    case int64
    /// ``Value/double(_:)``.
    case double
    /// ``Value/string(_:)``.
    case string
    /// ``Value/bytes(_:)``.
    case bytes
    /// No value: the keypath is only touched (``Bus/touch(_:)-(String)``).
    case event
  }

  /// One declared keypath and its rules.
  public struct Declaration: Sendable, Hashable {
    /// The keypath as declared; a `*` segment stands for any one segment.
    public let keypath: String
    /// The type of its values.
    public let type: ValueType
    /// What a read returns while the keypath holds no value.
    public let defaultValue: Value?
    /// The smallest value allowed (int64 and double).
    public let minimum: Value?
    /// The largest value allowed (int64 and double).
    public let maximum: Value?
    /// The only values allowed, when not empty (string, int64, double).
    public let choices: [Value]
    /// The most UTF-8 bytes a string, or bytes a bytes value, may have.
    public let maxLength: Int?
    /// What the keypath means, for people.
    public let description: String?
    /// The segments of `keypath`, `*` included.
    let segments: [String]

    /// Declares `keypath` with its rules.
    ///
    /// - Throws: ``OrdoError/Code/schema`` naming the keypath and the
    ///   problem: an invalid keypath or one with `**`, a default, bound or
    ///   choice of another type than `type` or outside the constraints,
    ///   `min > max`, a constraint that `type` does not take.
    public init(
      _ keypath: String, type: ValueType, default defaultValue: Value? = nil, min minimum: Value? = nil,
      max maximum: Value? = nil, choices: [Value] = [], maxLength: Int? = nil, description: String? = nil
    ) throws(OrdoError) {
      func fail(_ why: String) -> OrdoError { Schema.entryError(keypath, why) }
      let parsed: (segments: [String], isTree: Bool)
      do { parsed = try Keypath.parse(keypath, allowWildcards: true) } catch { throw fail(error.message) }
      if parsed.isTree { throw fail("'**' may not appear in a declared keypath (declare each level, '*' for collection elements)") }
      self.keypath = keypath
      self.type = type
      self.defaultValue = defaultValue
      self.minimum = minimum
      self.maximum = maximum
      self.choices = choices
      self.maxLength = maxLength
      self.description = description
      self.segments = parsed.segments
      try validate()
    }

    private func validate() throws(OrdoError) {
      func fail(_ why: String) -> OrdoError { Schema.entryError(keypath, why) }
      let given = [("default", defaultValue != nil), ("min", minimum != nil), ("max", maximum != nil), ("choices", !choices.isEmpty), ("max-length", maxLength != nil)]
      for (field, present) in given where present {
        if let why = Declaration.refusal(of: field, for: type) { throw fail(why) }
      }
      if let maxLength, maxLength < 0 { throw fail("max-length \(maxLength) is negative") }
      for (what, v) in [("min", minimum), ("max", maximum)] {
        if let v, v.typeName != type.rawValue { throw fail("\(what) \(Schema.show(v)) is \(Schema.article(v.typeName)), not \(Schema.article(type.rawValue))") }
      }
      if let minimum, let maximum, Schema.less(maximum, minimum) {
        throw fail("min \(Schema.show(minimum)) is greater than max \(Schema.show(maximum))")
      }
      for v in [defaultValue, minimum, maximum].compactMap({ $0 }) + choices {
        if case .double(let d) = v, !d.isFinite { throw fail("\(d) is not a finite number (JSON cannot write it)") }
      }
      var seen: Set<Value> = []
      for c in choices {
        if c.typeName != type.rawValue { throw fail("choice \(Schema.show(c)) is \(Schema.article(c.typeName)), not \(Schema.article(type.rawValue))") }
        if !seen.insert(c).inserted { throw fail("choice \(Schema.show(c)) appears twice") }
        if let why = bounds(c) { throw fail("choice \(Schema.show(c)) \(why)") }
      }
      if let d = defaultValue {
        if d.typeName != type.rawValue { throw fail("default \(Schema.show(d)) is \(Schema.article(d.typeName)), not \(Schema.article(type.rawValue))") }
        if let why = violation(d) { throw fail("default \(Schema.show(d)) \(why)") }
      }
    }

    /// Why a declaration of `type` may not have `field`, or nil when it may.
    static func refusal(of field: String, for type: ValueType) -> String? {
      switch field {
      case "default" where type == .event: "an event holds no value, so it has no default"
      case "min", "max": type == .int64 || type == .double ? nil : "min and max apply to int64 and double, not \(type.rawValue)"
      case "choices": [.int64, .double, .string].contains(type) ? nil : "choices apply to string, int64 and double, not \(type.rawValue)"
      case "max-length": type == .string || type == .bytes ? nil : "max-length applies to string and bytes, not \(type.rawValue)"
      default: nil
      }
    }

    /// Why `value` (of the declared type) breaks min, max or max-length, or nil.
    private func bounds(_ value: Value) -> String? {
      if let minimum, Schema.less(value, minimum) { return "is below min \(Schema.show(minimum))" }
      if let maximum, Schema.less(maximum, value) { return "is above max \(Schema.show(maximum))" }
      if let maxLength {
        switch value {
        case .string(let s) where s.utf8.count > maxLength: return "is \(s.utf8.count) bytes long, over max-length \(maxLength)"
        case .bytes(let b) where b.count > maxLength: return "is \(b.count) bytes long, over max-length \(maxLength)"
        default: break
        }
      }
      if case .double(let d) = value, d.isNaN, minimum != nil || maximum != nil { return "is NaN, which no min or max allows" }
      return nil
    }

    /// Why `value` (of the declared type) is not allowed, or nil.
    func violation(_ value: Value) -> String? {
      if !choices.isEmpty, !choices.contains(value) {
        return "is not one of the choices [\(choices.map(Schema.show).joined(separator: ", "))]"
      }
      return bounds(value)
    }

    /// Whether two declarations give a keypath the same rules (the
    /// description aside).
    func sameRules(_ o: Declaration) -> Bool {
      type == o.type && defaultValue == o.defaultValue && minimum == o.minimum && maximum == o.maximum
        && choices == o.choices && maxLength == o.maxLength
    }
  }

  /// The declarations, ordered by keypath.
  public let declarations: [Declaration]
  /// The declarations as a tree of segments, for lookups.
  let index: SchemaIndex

  /// A schema of these declarations.
  ///
  /// - Throws: ``OrdoError/Code/schema`` when a keypath is declared twice,
  ///   or when two declarations can name the same keypath (through `*`)
  ///   with different rules; the message names both.
  public init(_ declarations: [Declaration]) throws(OrdoError) {
    let sorted = declarations.sorted { $0.keypath < $1.keypath }
    var index = SchemaIndex()
    for (i, d) in sorted.enumerated() {
      if i > 0, sorted[i - 1].keypath == d.keypath { throw Schema.entryError(d.keypath, "is declared twice") }
      if let other = index.overlapping(d.segments, in: sorted, unlike: d) {
        throw Schema.entryError(d.keypath, "names the same keypaths as \"\(other.keypath)\" with other rules (\(other.type.rawValue) against \(d.type.rawValue), or another default or constraint)")
      }
      index.insert(d.segments, declaration: i)
    }
    self.declarations = sorted
    self.index = index
  }

  /// Reads a schema from its JSON text (`docs/schema.md`):
  /// `{"ordo-schema": 1, "keys": {KEYPATH: {"type": …, …}, …}}`.
  ///
  /// - Throws: ``OrdoError/Code/schema`` naming the entry and the problem
  ///   (malformed JSON, an unknown field or type, a value of the wrong JSON
  ///   type, and every rule of ``init(_:)`` and
  ///   ``Declaration/init(_:type:default:min:max:choices:maxLength:description:)``).
  public init(json text: some Sequence<UInt8>) throws(OrdoError) {
    let doc: JSON
    do { doc = try JSON.parse(text) } catch { throw OrdoError(.schema, "schema: \(error.message)") }
    try self.init(SchemaFile.declarations(doc))
  }

  /// Reads a schema from its JSON text. See ``init(json:)-(Sequence<UInt8>)``.
  public init(json text: String) throws(OrdoError) {
    try self.init(json: Array(text.utf8))
  }

  /// The schema as JSON text in its canonical form: keys in order, one per
  /// line, fields in a fixed order. The same schema always gives the same
  /// text, and ``init(json:)-(String)`` reads it back to an equal schema.
  public var json: String { SchemaFile.text(self) }

  /// The canonical JSON text (``json``).
  public var description: String { json }

  /// Two schemas are equal when they declare the same keypaths with the
  /// same rules and descriptions.
  public static func == (a: Schema, b: Schema) -> Bool { a.declarations == b.declarations }

  /// Hashes the declarations.
  public func hash(into h: inout Hasher) { h.combine(declarations) }

  /// The declaration that names `keypath` (a concrete keypath), or nil when
  /// the schema does not declare it.
  public func declaration(for keypath: String) -> Declaration? {
    let parts = keypath.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    return index.lookup(parts).map { declarations[$0] }
  }

  /// The declarations that `pattern` matches: those naming at least one
  /// keypath the pattern also matches (`ordoctl schema PATTERN`).
  ///
  /// - Throws: ``OrdoError/Code/invalidKeypath`` for an invalid pattern.
  public func declarations(matching pattern: String) throws(OrdoError) -> [Declaration] {
    let p = try Pattern(pattern)
    return declarations.filter { Schema.overlaps(p, $0.segments) }
  }

  // MARK: - Checks (the bus calls these where it resolves a keypath)

  /// The declaration index for a keypath's segments, or the error that
  /// refuses it (unknown keypath, with the nearest declared one).
  func resolve(_ keypath: String, _ segments: [String]) throws(OrdoError) -> Int {
    if let i = index.lookup(segments) { return i }
    throw unknown(keypath, segments)
  }

  /// The refusal of an undeclared keypath, naming the nearest declared one.
  func unknown(_ keypath: String, _ segments: [String], _ why: String = "is not declared in the schema") -> OrdoError {
    var message = "keypath \"\(keypath)\" \(why)"
    if let near = nearest(segments) { message += "; did you mean \"\(near)\"?" }
    return OrdoError(.schema, message)
  }

  /// Checks a value written to a keypath of declaration `i`.
  func check(_ value: Value, at keypath: String, declaration i: Int) throws(OrdoError) {
    let d = declarations[i]
    if d.type == .event {
      throw OrdoError(.schema, "keypath \"\(keypath)\" is declared as an event in the schema: it holds no value, so it can be touched but not set")
    }
    guard value.typeName == d.type.rawValue else {
      throw OrdoError(.typeMismatch, "keypath \"\(keypath)\" is declared \(d.type.rawValue) in the schema; \(Schema.article(value.typeName)) value is refused")
    }
    if let why = d.violation(value) {
      let declared = d.keypath == keypath ? "" : " (declared as \"\(d.keypath)\")"
      throw OrdoError(.schema, "keypath \"\(keypath)\": the value \(Schema.show(value)) \(why) in the schema\(declared)")
    }
  }

  /// Checks a write of a concrete keypath against the schema: the slow
  /// path of every write a ``SchemaRule`` does not admit on its own.
  func checkWrite(_ keypath: String, _ op: WriteOp, segments: [String]? = nil) throws(OrdoError) {
    let segments = segments ?? keypath.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    if case .removeTree = op { return try checkTree(keypath, segments) }
    let i = try resolve(keypath, segments)
    if case .set(let v) = op { try check(v, at: keypath, declaration: i) }
  }

  /// Whether `removeTree(keypath)` names part of the model: the keypath is
  /// declared or a prefix of a declared keypath.
  func checkTree(_ keypath: String, _ segments: [String]) throws(OrdoError) {
    guard !index.reaches(segments) else { return }
    throw unknown(keypath, segments, "is neither declared in the schema nor a prefix of a declared keypath")
  }

  /// Checks that a contract's pattern matches at least one declared keypath.
  func checkPattern(_ p: Pattern, contract: String, role: String) throws(OrdoError) {
    guard !index.matches(p) else { return }
    var message = "contract \"\(contract)\": \(role) pattern \"\(p.string)\" matches no keypath declared in the schema"
    if let near = nearest(p.fixed.map { if case .literal(let l) = $0 { l } else { "*" } } + (p.isTree ? ["**"] : [])) {
      message += "; did you mean \"\(near)\"?"
    }
    throw OrdoError(.schema, message)
  }

  /// Whether some concrete keypath matches both the pattern and the
  /// declaration.
  static func overlaps(_ p: Pattern, _ declared: [String]) -> Bool {
    if p.isTree ? declared.count < p.fixed.count : declared.count != p.fixed.count { return false }
    for (s, d) in zip(p.fixed, declared) {
      if case .literal(let l) = s, d != "*", d != l { return false }
    }
    return true
  }

  /// The declared keypath nearest to `segments` by edit distance, `*`
  /// segments shown as the segment written in their place.
  func nearest(_ segments: [String]) -> String? {
    let wanted = segments.joined(separator: ".")
    var best: (String, Int)?
    for d in declarations {
      var parts = d.segments
      if parts.count == segments.count {
        for i in parts.indices where parts[i] == "*" && segments[i] != "**" { parts[i] = segments[i] }
      }
      let candidate = parts.joined(separator: ".")
      let distance = Schema.editDistance(Array(wanted.utf8), Array(candidate.utf8), limit: best?.1 ?? Int.max)
      if best == nil || distance < best!.1 { best = (candidate, distance) }
    }
    return best?.0
  }

  /// The Levenshtein distance between two byte strings, or any value ≥
  /// `limit` once it is known to reach it.
  static func editDistance(_ a: [UInt8], _ b: [UInt8], limit: Int) -> Int {
    if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
    var row = Array(0...b.count)
    for i in 1...a.count {
      var diagonal = row[0]
      row[0] = i
      var smallest = row[0]
      for j in 1...b.count {
        let above = row[j]
        row[j] = Swift.min(above + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1))
        diagonal = above
        smallest = Swift.min(smallest, row[j])
      }
      if smallest >= limit { return smallest }
    }
    return row[b.count]
  }

  // MARK: - Messages

  static func entryError(_ keypath: String, _ why: String) -> OrdoError {
    OrdoError(.schema, "schema entry \"\(Keypath.printable(keypath))\": \(why)")
  }

  /// A type name with its article: `an int64`, `a string`.
  static func article(_ typeName: String) -> String {
    (typeName.first.map { "aeio".contains($0) } ?? false ? "an " : "a ") + typeName
  }

  /// A value as messages show it: `"tile"`, `7`, `1.5`, `true`, `<3 bytes>`.
  static func show(_ v: Value) -> String {
    switch v {
    case .string(let s): JSON.quote(s)
    case .int64(let i): String(i)
    case .double(let d): String(d)
    case .bool(let b): String(b)
    case .bytes(let b): "<\(b.count) bytes>"
    }
  }

  /// `a < b` for two numbers of one type.
  static func less(_ a: Value, _ b: Value) -> Bool {
    switch (a, b) {
    case (.int64(let x), .int64(let y)): x < y
    case (.double(let x), .double(let y)): x < y
    default: false
    }
  }
}

/// The declarations of a schema as a tree of segments: each node's children
/// by segment, its `*` child apart, and the declaration that ends there.
/// Every node lies on the way to at least one declaration.
struct SchemaIndex: Sendable {
  struct Node: Sendable {
    var children: [String: Int32] = [:]
    var star: Int32 = -1
    var declaration: Int32 = -1
  }
  var nodes: [Node] = [Node()]

  mutating func insert(_ segments: [String], declaration: Int) {
    var at = 0
    for s in segments {
      let next = s == "*" ? nodes[at].star : nodes[at].children[s, default: -1]
      if next >= 0 {
        at = Int(next)
        continue
      }
      nodes.append(Node())
      let made = Int32(nodes.count - 1)
      if s == "*" { nodes[at].star = made } else { nodes[at].children[s] = made }
      at = Int(made)
    }
    nodes[at].declaration = Int32(declaration)
  }

  /// The declaration naming a concrete keypath: literal segments first,
  /// then `*`.
  func lookup(_ segments: [String]) -> Int? {
    func walk(_ at: Int, _ i: Int) -> Int? {
      if i == segments.count { return nodes[at].declaration >= 0 ? Int(nodes[at].declaration) : nil }
      if let c = nodes[at].children[segments[i]], let found = walk(Int(c), i + 1) { return found }
      if nodes[at].star >= 0 { return walk(Int(nodes[at].star), i + 1) }
      return nil
    }
    return walk(0, 0)
  }

  /// Whether a concrete keypath is declared or a prefix of a declared one.
  func reaches(_ segments: [String]) -> Bool {
    func walk(_ at: Int, _ i: Int) -> Bool {
      if i == segments.count { return true }
      if let c = nodes[at].children[segments[i]], walk(Int(c), i + 1) { return true }
      return nodes[at].star >= 0 && walk(Int(nodes[at].star), i + 1)
    }
    return walk(0, 0)
  }

  /// Whether some concrete keypath matches both the pattern and a
  /// declaration: a walk that follows a literal segment to its child and to
  /// `*`, and `*` to every child. Every node lies on the way to a
  /// declaration, so a `**` pattern matches once its prefix is reached.
  func matches(_ p: Pattern) -> Bool {
    func walk(_ at: Int, _ i: Int) -> Bool {
      if i == p.fixed.count { return p.isTree || nodes[at].declaration >= 0 }
      let node = nodes[at]
      if node.star >= 0, walk(Int(node.star), i + 1) { return true }
      switch p.fixed[i] {
      case .literal(let l): return node.children[l].map { walk(Int($0), i + 1) } ?? false
      case .any: return node.children.values.contains { walk(Int($0), i + 1) }
      }
    }
    return walk(0, 0)
  }

  /// A declaration already in the index that can name a keypath `segments`
  /// names, with other rules than `d`.
  func overlapping(_ segments: [String], in declarations: [Schema.Declaration], unlike d: Schema.Declaration) -> Schema.Declaration? {
    func walk(_ at: Int, _ i: Int) -> Schema.Declaration? {
      if i == segments.count {
        let e = nodes[at].declaration
        return e >= 0 && !declarations[Int(e)].sameRules(d) ? declarations[Int(e)] : nil
      }
      var next: [Int32] = []
      if segments[i] == "*" { next.append(contentsOf: nodes[at].children.sorted { $0.key < $1.key }.map(\.value)) } else if let c = nodes[at].children[segments[i]] { next.append(c) }
      if nodes[at].star >= 0 { next.append(nodes[at].star) }
      for n in next { if let found = walk(Int(n), i + 1) { return found } }
      return nil
    }
    return walk(0, 0)
  }
}

/// What a bus's schema asks of a write to one keypath, in one byte: nothing
/// (no schema), an undeclared keypath, or its declared type and whether the
/// declaration constrains values further. A node keeps it
/// (``KeyNode/schemaRule``), and so do the handles and properties made for
/// it (a C handle in the low bits of its address, ``HandleAddress``): a
/// write decides from the byte alone when it can (a set of the declared
/// type to an unconstrained keypath, a touch or removal of a declared
/// one), and asks the schema otherwise (``Schema/checkWrite(_:_:segments:)``).
@usableFromInline
struct SchemaRule: Equatable, Sendable {
  let bits: UInt8

  /// No schema: nothing to check.
  static let none = SchemaRule(bits: 0)
  /// Under a schema that does not declare the keypath.
  static let undeclared = SchemaRule(bits: 7)
  private static let constrained: UInt8 = 8

  private init(bits: UInt8) { self.bits = bits }

  /// What is left to check of writes made only with values of type
  /// `typeName` (a typed property's): nothing when the keypath is declared
  /// of that type without further constraints.
  func left(byType typeName: String) -> SchemaRule {
    guard let type = Schema.ValueType(rawValue: typeName), let i = Schema.ValueType.allCases.firstIndex(of: type) else { return self }
    return bits == UInt8(i + 1) ? .none : self
  }

  /// The rule kept in the low bits of an address aligned to 64 bytes.
  init(tag address: UnsafeRawPointer) { bits = UInt8(truncatingIfNeeded: UInt(bitPattern: address) & 15) }

  /// The rule of a keypath's segments under `schema`.
  init(_ schema: Schema, _ segments: [String]) {
    guard let i = schema.index.lookup(segments) else {
      self = .undeclared
      return
    }
    let d = schema.declarations[i]
    let type = UInt8(Schema.ValueType.allCases.firstIndex(of: d.type)! + 1)
    let constrained = d.minimum != nil || d.maximum != nil || !d.choices.isEmpty || d.maxLength != nil
    bits = type | (constrained ? SchemaRule.constrained : 0)
  }

  /// Whether a write needs no look at the schema: no schema, a set of a
  /// value of the declared type to an unconstrained keypath, a touch or a
  /// removal of a declared one.
  @inline(__always)
  func admits(_ op: WriteOp) -> Bool {
    if bits == 0 { return true }
    if case .set(let v) = op { return bits == SchemaRule.code(v) }
    return bits & 7 != SchemaRule.undeclared.bits
  }

  /// The rule bits a value of `value`'s type meets when unconstrained.
  @inline(__always)
  static func code(_ value: Value) -> UInt8 {
    switch value {
    case .bool: 1
    case .int64: 2
    case .double: 3
    case .string: 4
    case .bytes: 5
    }
  }
}
