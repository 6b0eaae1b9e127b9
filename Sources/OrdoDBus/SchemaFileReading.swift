// Reading a schema file (docs/schema.md) for the programs that take one by
// path: ordod --schema, ordoctl schema --check and codegen, and the C
// library's ordo_bus_new_with_schema_file. The core reads schema text and
// does no I/O; this is the one place that opens the file, as
// `Policy(contentsOf:)` does for a policy.
import Ordo

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension Schema {
  /// Reads the schema in the file at `path`.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` naming the path and the
  ///   reason when the file cannot be read; ``OrdoError/Code/schema`` with
  ///   the path when it does not validate.
  package init(contentsOfFile path: String) throws(OrdoError) {
    guard let f = fopen(path, "rb") else {
      throw OrdoError(.invalidArgument, "cannot read the schema file \(path): \(String(cString: strerror(errno)))")
    }
    defer { fclose(f) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
      let n = fread(&chunk, 1, chunk.count, f)
      bytes += chunk[0..<n]
      if n < chunk.count { break }
    }
    if ferror(f) != 0 { throw OrdoError(.invalidArgument, "cannot read the schema file \(path): read error") }
    do throws(OrdoError) { try self.init(json: bytes) } catch { throw OrdoError(error.code, "\(path): \(error.message)") }
  }
}
