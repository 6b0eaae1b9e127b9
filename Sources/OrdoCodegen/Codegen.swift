// Typed accessors generated from a schema (SPEC §14, docs/schema.md,
// "Generated accessors"): Swift, C and Python source text, the same text
// for the same schema and name.
import Ordo

/// The generators of typed accessors.
public enum Codegen {
  /// A language accessors are generated in.
  public enum Language: String, Sendable, CaseIterable {
    /// A `.swift` file of structs made of ``Ordo/Property`` values.
    case swift
    /// A C11 and C++ header of static inline functions over `ordo.h`.
    case c
    /// A Python module over `ordo.Bus` or `ordo.Client`.
    case python
  }

  /// One generated file: its name and its text.
  public struct File: Sendable, Equatable {
    /// The file's name, e.g. `PlaylistModel.swift`.
    public let name: String
    /// The file's text.
    public let text: String
  }

  /// The files of the accessors of `schema` in `language`, for a model
  /// named `name` (segments of [A-Za-z0-9_-], e.g. `playlist`: the Swift
  /// type `PlaylistModel`, the C prefix `playlist_model`, the Python module
  /// `playlist_model.py`).
  ///
  /// - Throws: ``OrdoError/Code/schema`` for a schema shape that has no
  ///   accessors (the message names the keypath);
  ///   ``OrdoError/Code/invalidArgument`` for an invalid name.
  public static func generate(_ schema: Schema, language: Language, name: String) throws(OrdoError) -> [File] {
    let parts = name.split(whereSeparator: { $0 == "_" || $0 == "-" }).map(String.init)
    guard !parts.isEmpty, name.utf8.allSatisfy({ $0 == 0x5f || $0 == 0x2d || (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) }),
      !(0x30...0x39).contains(name.utf8.first!)
    else { throw OrdoError(.invalidArgument, "codegen: the model name \"\(name)\" must be made of [A-Za-z0-9_-] and start with a letter") }
    do throws(Unsupported) {
      let root = try Group.of(schema)
      let model = parts + ["model"]
      switch language {
      case .swift: return [File(name: Names.upperCamel(model) + ".swift", text: try SwiftGenerator(model: model).file(root))]
      case .c: return [File(name: Names.snake(model) + ".h", text: try CGenerator(model: model).header(root))]
      case .python: return [File(name: Names.snake(model) + ".py", text: try PythonGenerator(model: model).module(root))]
      }
    } catch {
      throw OrdoError(.schema, "codegen: \(error.message)")
    }
  }
}

/// Text made of lines at an indentation.
struct Lines {
  private(set) var text = ""
  var indent = 0
  let unit: String

  init(unit: String = "  ") { self.unit = unit }

  mutating func add(_ line: String) {
    text += line.isEmpty ? "\n" : String(repeating: unit, count: indent) + line + "\n"
  }

  mutating func nested(_ body: (inout Lines) throws(Unsupported) -> Void) throws(Unsupported) {
    indent += 1
    try body(&self)
    indent -= 1
  }
}

extension Schema.Declaration {
  /// One line describing the declaration for a comment: keypath, type,
  /// default, and description (line breaks made spaces).
  var summary: String {
    var s = "`\(keypath)` (\(type.rawValue)"
    if let d = defaultValue { s += ", default \(Literal.json(d))" }
    s += ")"
    if let text = description { s += ": " + text.split(whereSeparator: \.isNewline).joined(separator: " ") }
    return s
  }
}

/// Values written as literals.
enum Literal {
  /// A value as the schema file writes it.
  static func json(_ v: Value) -> String {
    switch v {
    case .string(let s): quoted(s, unicode: { "\\u" + hex4($0) })
    case .bytes(let b): "\"" + hex(b) + "\""
    case .bool(let b): String(b)
    case .int64(let i): String(i)
    case .double(let x): String(x)
    }
  }

  static func hex(_ b: [UInt8]) -> String { b.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }

  static func hex4(_ v: UInt32) -> String {
    let h = String(v, radix: 16)
    return String(repeating: "0", count: max(0, 4 - h.count)) + h
  }

  /// The escapes that Swift, Python and JSON string literals share.
  static let escapes: [Unicode.Scalar: String] = ["\"": "\\\"", "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"]

  /// `s` in double quotes: `"`, `\` and the usual controls escaped, other
  /// controls and non-ASCII written by `unicode`.
  static func quoted(_ s: String, unicode: (UInt32) -> String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
      out += escapes[scalar] ?? (scalar.value >= 0x20 && scalar.value < 0x7f ? String(scalar) : unicode(scalar.value))
    }
    return out + "\""
  }
}
