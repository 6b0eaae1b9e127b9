// ordoctl codegen: typed accessors generated from a schema file, offline
// (docs/schema.md, "Generated accessors").
import Ordo
import OrdoDBus
import OrdoCodegen

#if canImport(Glibc)
import Glibc
#endif

enum CodegenCommand {
  /// `codegen --swift|--c|--python [--output DIR] [--name NAME] FILE` (run
  /// at once, without a bus: it exits). Without `--output` the file is
  /// printed; the name defaults to the schema file's, up to its first `.`.
  static func make(_ args: [String]) -> (OrdoClient) -> Void {
    let languages = Codegen.Language.allCases
    let (o, operands) = parseArguments(args, command: "codegen", flags: Set(languages.map { "--" + $0.rawValue }), valued: ["--output", "--name"])
    let chosen = languages.filter { o["--" + $0.rawValue] != nil }
    guard chosen.count == 1, operands.count == 1 else {
      fail("codegen needs one of --swift, --c, --python and one schema file: codegen --swift|--c|--python [--output DIR] [--name NAME] FILE", code: 2)
    }
    let file = operands[0]
    let base = file.split(separator: "/").last.map(String.init) ?? file
    let name = o["--name"] ?? String(base.prefix { $0 != "." })
    let schema = SchemaCommand.read(file)
    let files: [Codegen.File]
    do throws(OrdoError) {
      files = try Codegen.generate(schema, language: chosen[0], name: name)
    } catch {
      fail("\(file): \(error.message)")
    }
    for f in files {
      guard let dir = o["--output"] else {
        print(f.text, terminator: "")
        continue
      }
      let path = dir + "/" + f.name
      guard let h = fopen(path, "wb") else { fail("\(path): \(String(cString: strerror(errno)))") }
      let bytes = Array(f.text.utf8)
      let written = fwrite(bytes, 1, bytes.count, h)
      guard fclose(h) == 0, written == bytes.count else { fail("\(path): \(String(cString: strerror(errno)))") }
      out(path)
    }
    exit(0)
  }
}
