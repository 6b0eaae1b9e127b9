// The schema as the tree that accessors are generated from: groups (a
// subtree whose segments are all literal), leaves (declared keypaths) and
// collections (a `*` segment, whose elements are records).
import Ordo

/// One declared keypath under a group: a typed property, or an event.
struct Leaf {
  /// Its last segment.
  let segment: String
  let declaration: Schema.Declaration
}

/// One field of a collection's records: a declared keypath under the
/// element, named by its segments below the `*`.
struct Field {
  let relative: [String]
  let declaration: Schema.Declaration
}

/// A subtree whose segments are literal: its leaves, its groups and its
/// collections, each ordered by segment.
struct Group {
  /// The segments from the root (empty for the root).
  let path: [String]
  var leaves: [Leaf] = []
  var groups: [Group] = []
  var collections: [Collection] = []

  /// The last segment (empty for the root).
  var segment: String { path.last ?? "" }
  /// The keypath of the group (empty for the root).
  var keypath: String { path.joined(separator: ".") }
}

/// The elements under `path.*`: records of `fields`, or, when the element
/// itself is declared, values of `value`.
struct Collection {
  let path: [String]
  let fields: [Field]
  let value: Schema.Declaration?

  var segment: String { path.last! }
  var keypath: String { path.joined(separator: ".") }
}

/// A schema's shape that the generators do not cover.
struct Unsupported: Error {
  let message: String
}

extension Group {
  /// The tree of `schema`'s declarations.
  ///
  /// - Throws: ``Unsupported`` naming the keypath for a shape without
  ///   accessors: a keypath declared with keypaths under it, a `*` that is
  ///   not the only child of its parent, a collection of events, a
  ///   collection inside an element, an event inside an element.
  static func of(_ schema: Schema) throws(Unsupported) -> Group {
    let trie = Trie()
    for d in schema.declarations { trie.insert(d.keypath.split(separator: ".").map(String.init), d) }
    return try trie.group([])
  }
}

/// The declared keypaths by segment.
private final class Trie {
  var declaration: Schema.Declaration?
  var children: [String: Trie] = [:]

  func insert(_ segments: [String], _ d: Schema.Declaration) {
    guard let first = segments.first else {
      declaration = d
      return
    }
    let child = children[first] ?? Trie()
    children[first] = child
    child.insert(Array(segments.dropFirst()), d)
  }

  func group(_ path: [String]) throws(Unsupported) -> Group {
    var g = Group(path: path)
    for segment in children.keys.sorted() {
      let child = children[segment]!
      let childPath = path + [segment]
      let keypath = childPath.joined(separator: ".")
      if segment == "*" { throw Unsupported(message: "\"\(keypath)\": a collection needs a literal parent (accessors start at a named segment)") }
      if let d = child.declaration {
        guard child.children.isEmpty else { throw Unsupported(message: "\"\(keypath)\" is declared and has keypaths declared under it") }
        g.leaves.append(Leaf(segment: segment, declaration: d))
      } else if let element = child.children["*"] {
        guard child.children.count == 1 else {
          throw Unsupported(message: "\"\(keypath)\" has both '*' and literal segments under it")
        }
        if let d = element.declaration {
          guard element.children.isEmpty else { throw Unsupported(message: "\"\(keypath).*\" is declared and has keypaths declared under it") }
          if d.type == .event { throw Unsupported(message: "\"\(keypath).*\": a collection of events") }
          g.collections.append(Collection(path: childPath, fields: [], value: d))
          continue
        }
        var fields: [Field] = []
        try element.fields([], under: keypath + ".*", into: &fields)
        g.collections.append(Collection(path: childPath, fields: fields, value: nil))
      } else {
        g.groups.append(try child.group(childPath))
      }
    }
    return g
  }

  /// The declarations under an element, depth first by segment.
  func fields(_ relative: [String], under element: String, into out: inout [Field]) throws(Unsupported) {
    let keypath = ([element] + relative).joined(separator: ".")
    if let d = declaration {
      guard children.isEmpty else { throw Unsupported(message: "\"\(keypath)\" is declared and has keypaths declared under it") }
      if d.type == .event { throw Unsupported(message: "\"\(keypath)\": an event cannot be a field of a record") }
      out.append(Field(relative: relative, declaration: d))
      return
    }
    for segment in children.keys.sorted() {
      if segment == "*" { throw Unsupported(message: "\"\(keypath).*\": a collection inside a collection's element") }
      try children[segment]!.fields(relative + [segment], under: element, into: &out)
    }
  }
}

/// Identifiers made from segments ([A-Za-z0-9_-]): words split at `_`, `-`.
enum Names {
  static func words(_ parts: [String]) -> [String] {
    parts.flatMap { $0.split(whereSeparator: { $0 == "_" || $0 == "-" }).map(String.init) }
  }

  /// `lowerCamel` of the segments' words.
  static func lowerCamel(_ parts: [String]) -> String {
    let w = words(parts)
    let s = w.enumerated().map { i, word in i == 0 ? word.prefix(1).lowercased() + word.dropFirst() : capitalized(word) }.joined()
    return guardDigit(s.isEmpty ? "_" : s)
  }

  /// `UpperCamel` of the segments' words.
  static func upperCamel(_ parts: [String]) -> String {
    let s = words(parts).map(capitalized).joined()
    return guardDigit(s.isEmpty ? "_" : s)
  }

  /// `snake_case` of the segments' words (as written, lowercased).
  static func snake(_ parts: [String]) -> String {
    let s = words(parts).map { $0.lowercased() }.joined(separator: "_")
    return guardDigit(s.isEmpty ? "_" : s)
  }

  /// `name`, or `name_` when it is one of `taken` (a keyword, or a name the
  /// generated code needs for something else).
  static func avoiding(_ taken: Set<String>, _ name: String) -> String { taken.contains(name) ? name + "_" : name }

  static func capitalized(_ word: String) -> String { word.prefix(1).uppercased() + word.dropFirst() }

  static func guardDigit(_ s: String) -> String { s.first!.isNumber ? "_" + s : s }

  /// Fails when two members of one scope get the same identifier.
  static func checkDistinct(_ names: [(name: String, keypath: String)], reserved: Set<String>, in scope: String) throws(Unsupported) {
    var seen: [String: String] = [:]
    for (name, keypath) in names {
      if reserved.contains(name) { throw Unsupported(message: "\"\(keypath)\" would be named \"\(name)\", a name \(scope) already uses") }
      if let other = seen[name] { throw Unsupported(message: "\"\(keypath)\" and \"\(other)\" would both be named \"\(name)\" in \(scope)") }
      seen[name] = keypath
    }
  }
}
