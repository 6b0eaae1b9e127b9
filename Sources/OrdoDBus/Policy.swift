// The access policy (SPEC §12): rights per uid and group on keypath
// patterns, the file they are read from, and the read filter they give.
import Ordo

#if canImport(Glibc)
import Glibc
#endif

/// A right a peer may hold on keypaths (SPEC §12).
public enum Right: String, Sendable, CaseIterable, Hashable {
  /// `Get`, `Snapshot`, `Changes`, the reads of a contract, the values and
  /// keypaths of a `Notify`.
  case read
  /// `Commit`, the writes of a `Complete`, the write set of a writer contract.
  case write
  /// May register writer contracts (non-empty write set) over these patterns.
  case writer
}

/// Who a peer is, as the bus daemon reports it for its connection.
public struct PeerIdentity: Sendable, Hashable, CustomStringConvertible {
  /// The connection's Unix user id.
  public let uid: UInt32
  /// Its Unix group ids (primary and supplementary).
  public let gids: [UInt32]

  public init(uid: UInt32, gids: [UInt32]) {
    self.uid = uid
    self.gids = gids
  }

  public var description: String { "uid \(uid) gids [\(gids.map(String.init).joined(separator: ","))]" }
}

/// An access policy: rules that allow or deny rights on keypath patterns to
/// subjects. A deny rule wins over an allow rule; nothing is allowed that no
/// rule allows. The file format is in docs/policy.md.
public struct Policy: Sendable {
  /// Whom a rule names.
  public enum Subject: Sendable, Hashable, CustomStringConvertible {
    case everyone
    case uid(UInt32)
    case gid(UInt32)

    func covers(_ p: PeerIdentity) -> Bool {
      switch self {
      case .everyone: true
      case .uid(let u): p.uid == u
      case .gid(let g): p.gids.contains(g)
      }
    }

    public var description: String {
      switch self {
      case .everyone: "everyone"
      case .uid(let u): "uid:\(u)"
      case .gid(let g): "gid:\(g)"
      }
    }
  }

  /// One line of the file.
  public struct Rule: Sendable {
    public let allow: Bool
    public let subjects: [Subject]
    public let rights: Set<Right>
    public let patterns: [PolicyPattern]
    /// The line as written, and its number, for explanations.
    public let text: String
    public let line: Int
  }

  /// The rules, in file order.
  public let rules: [Rule]
  /// Where the rules came from (a path, for messages).
  public let source: String

  /// A syntax or name error in a policy file.
  public struct ParseError: Error, CustomStringConvertible, Sendable {
    public let line: Int
    public let message: String
    public let source: String
    public var description: String { "\(source):\(line): \(message)" }
  }

  /// Looks up a user or group name (nil: unknown).
  public typealias Resolver = @Sendable (String) -> UInt32?

  /// Parses a policy. `user`/`group` resolve names (default: the system's
  /// password and group databases).
  public init(
    parsing text: String, source: String = "policy", user: Resolver = Policy.systemUser, group: Resolver = Policy.systemGroup
  ) throws(ParseError) {
    var rules: [Rule] = []
    var n = 0
    for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
      n += 1
      var line = Substring(raw)
      if let hash = line.firstIndex(of: "#") { line = line[..<hash] }
      let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" }).map(String.init)
      if words.isEmpty { continue }
      func fail(_ m: String) -> ParseError { ParseError(line: n, message: m, source: source) }
      guard words[0] == "allow" || words[0] == "deny" else {
        throw fail("a rule starts with allow or deny, not \"\(words[0])\"")
      }
      guard words.count >= 4 else {
        throw fail("a rule is: allow|deny SUBJECT[,SUBJECT…] RIGHT[,RIGHT…] PATTERN…")
      }
      var subjects: [Subject] = []
      for s in words[1].split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
        if s == "everyone" {
          subjects.append(.everyone)
          continue
        }
        guard let colon = s.firstIndex(of: ":") else {
          throw fail("subject \"\(s)\" is not everyone, user:NAME, uid:N, group:NAME or gid:N")
        }
        let kind = String(s[..<colon])
        let arg = String(s[s.index(after: colon)...])
        guard !arg.isEmpty else { throw fail("subject \"\(s)\" names nobody") }
        switch kind {
        case "uid":
          guard let u = UInt32(arg) else { throw fail("uid \"\(arg)\" is not a number") }
          subjects.append(.uid(u))
        case "gid":
          guard let g = UInt32(arg) else { throw fail("gid \"\(arg)\" is not a number") }
          subjects.append(.gid(g))
        case "user":
          guard let u = user(arg) else { throw fail("no user named \"\(arg)\"") }
          subjects.append(.uid(u))
        case "group":
          guard let g = group(arg) else { throw fail("no group named \"\(arg)\"") }
          subjects.append(.gid(g))
        default:
          throw fail("subject \"\(s)\" is not everyone, user:NAME, uid:N, group:NAME or gid:N")
        }
      }
      var rights: Set<Right> = []
      for r in words[2].split(separator: ",", omittingEmptySubsequences: false) {
        guard let right = Right(rawValue: String(r)) else {
          throw fail("unknown right \"\(r)\": the rights are read, write, writer")
        }
        rights.insert(right)
      }
      var patterns: [PolicyPattern] = []
      for p in words[3...] {
        do { patterns.append(try PolicyPattern(p)) } catch { throw fail(error.message) }
      }
      rules.append(Rule(allow: words[0] == "allow", subjects: subjects, rights: rights, patterns: patterns, text: words.joined(separator: " "), line: n))
    }
    self.rules = rules
    self.source = source
  }

  /// Reads and parses the file at `path`.
  public init(contentsOf path: String, user: Resolver = Policy.systemUser, group: Resolver = Policy.systemGroup) throws(ParseError) {
    guard let f = fopen(path, "r") else {
      throw ParseError(line: 0, message: "cannot open: \(String(cString: strerror(errno)))", source: path)
    }
    defer { fclose(f) }
    var bytes: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 65536)
    while true {
      let n = fread(&buf, 1, buf.count, f)
      if n <= 0 { break }
      bytes += buf[0..<n]
      if bytes.count > 16 << 20 { throw ParseError(line: 0, message: "larger than 16 MiB", source: path) }
    }
    // A read error (a directory: EISDIR) is not the end of the file: an
    // empty or cut-off policy must never take the place of the real one.
    if ferror(f) != 0 {
      throw ParseError(line: 0, message: "cannot read: \(String(cString: strerror(errno)))", source: path)
    }
    guard let text = String(validating: bytes, as: UTF8.self) else {
      throw ParseError(line: 0, message: "not valid UTF-8", source: path)
    }
    try self.init(parsing: text, source: path, user: user, group: group)
  }

  /// `getpwnam`.
  public static let systemUser: Resolver = { name in
    guard let pw = getpwnam(name) else { return nil }
    return pw.pointee.pw_uid
  }

  /// `getgrnam`.
  public static let systemGroup: Resolver = { name in
    guard let gr = getgrnam(name) else { return nil }
    return gr.pointee.gr_gid
  }

  /// The answer to "may this peer use this right on this keypath/pattern",
  /// with the rule that decided it.
  public struct Decision: Sendable {
    public let allowed: Bool
    /// The deny rule that matched, or the allow rule that covered it; nil
    /// when no rule allows it.
    public let rule: Rule?

    /// Why, in words: "denied by line 7 (deny …)" / "no rule allows it".
    public var reason: String {
      guard let rule else { return "no rule allows it" }
      return "\(rule.allow ? "allowed" : "denied") by line \(rule.line) (\(rule.text))"
    }
  }

  /// Whether `peer` holds `right` on every keypath `pattern` matches (a
  /// concrete keypath is a pattern that matches itself): some allow rule
  /// covers the whole pattern and no deny rule overlaps it.
  public func check(_ peer: PeerIdentity, _ right: Right, _ pattern: PolicyPattern) -> Decision {
    var allowedBy: Rule?
    for rule in rules where rule.rights.contains(right) && rule.subjects.contains(where: { $0.covers(peer) }) {
      if rule.allow {
        if allowedBy == nil && rule.patterns.contains(where: { pattern.isWithin($0) }) { allowedBy = rule }
      } else if rule.patterns.contains(where: { pattern.overlaps($0) }) {
        return Decision(allowed: false, rule: rule)
      }
    }
    return Decision(allowed: allowedBy != nil, rule: allowedBy)
  }

  /// `check` for a keypath or pattern string (invalid ones are not allowed).
  public func check(_ peer: PeerIdentity, _ right: Right, _ keypath: String) -> Decision {
    guard let p = try? PolicyPattern(keypath) else { return Decision(allowed: false, rule: nil) }
    return check(peer, right, p)
  }

  /// What `peer` may read, as one predicate over concrete keypaths: the
  /// filter of `Snapshot`, `Changes` and `Notify`.
  public func readable(by peer: PeerIdentity) -> ReadFilter {
    let mine = rules.filter { $0.rights.contains(.read) && $0.subjects.contains(where: { $0.covers(peer) }) }
    return ReadFilter(
      allow: mine.filter(\.allow).flatMap(\.patterns),
      deny: mine.filter { !$0.allow }.flatMap(\.patterns))
  }
}

/// What one peer may read under a policy (nil policy: everything).
public struct ReadFilter: Sendable {
  let allow: [PolicyPattern]
  let deny: [PolicyPattern]
  /// Whether the keypath `k` may be read.
  public func allows(_ k: String) -> Bool {
    let segs = k.split(separator: ".", omittingEmptySubsequences: false)
    if deny.contains(where: { $0.matches(segs) }) { return false }
    return allow.contains(where: { $0.matches(segs) })
  }
}

/// A keypath pattern as policy rules use them: validated as a contract
/// pattern (`*` one segment, a final `**` the node and every descendant).
public struct PolicyPattern: Sendable, Hashable, CustomStringConvertible {
  public let string: String
  let fixed: [String]  // "*" for any one segment
  let isTree: Bool

  public init(_ s: String) throws(OrdoError) {
    _ = try Pattern(s)
    string = s
    var parts = s.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    if parts.last == "**" {
      parts.removeLast()
      isTree = true
    } else {
      isTree = false
    }
    fixed = parts
  }

  public var description: String { string }

  func matches(_ k: [Substring]) -> Bool {
    if isTree { if k.count < fixed.count { return false } } else if k.count != fixed.count { return false }
    for i in 0..<fixed.count where fixed[i] != "*" && fixed[i] != k[i] { return false }
    return true
  }

  /// Whether every keypath this pattern matches is matched by `a`.
  public func isWithin(_ a: PolicyPattern) -> Bool {
    if a.isTree {
      guard fixed.count >= a.fixed.count else { return false }
    } else {
      guard !isTree, fixed.count == a.fixed.count else { return false }
    }
    for i in 0..<a.fixed.count {
      if a.fixed[i] == "*" { continue }
      if fixed[i] == "*" || fixed[i] != a.fixed[i] { return false }
    }
    return true
  }

  /// Whether some keypath is matched by both patterns.
  public func overlaps(_ d: PolicyPattern) -> Bool {
    switch (isTree, d.isTree) {
    case (false, false): guard fixed.count == d.fixed.count else { return false }
    case (true, false): guard d.fixed.count >= fixed.count else { return false }
    case (false, true): guard fixed.count >= d.fixed.count else { return false }
    case (true, true): break
    }
    for i in 0..<min(fixed.count, d.fixed.count) where fixed[i] != "*" && d.fixed[i] != "*" && fixed[i] != d.fixed[i] {
      return false
    }
    return true
  }
}
