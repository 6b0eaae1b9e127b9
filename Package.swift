// swift-tools-version:6.0
import Foundation
import PackageDescription

let package = Package(
  name: "Ordo",
  products: [
    .library(name: "Ordo", targets: ["Ordo"]),
    .library(name: "OrdoDBus", targets: ["OrdoDBus"]),
    .library(name: "OrdoStore", targets: ["OrdoStore"]),
    .executable(name: "ordod", targets: ["ordod"]),
    .executable(name: "ordoctl", targets: ["ordoctl"]),
    .library(name: "ordo", type: .dynamic, targets: ["OrdoC"]),
  ],
  targets: [
    // One processor hint (prefetch) the core needs and Swift cannot spell:
    // a header, no types, nothing to link (docs/architecture.md).
    .systemLibrary(name: "CCacheHint"),
    .target(name: "Ordo", dependencies: ["CCacheHint"]),
    .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
    .target(name: "OrdoDBus", dependencies: ["Ordo", "CDBus"]),
    .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
    .target(name: "OrdoStore", dependencies: ["Ordo", "CSQLite"]),
    // The child process of the OrdoStore tests (crash, file-size limit, lock
    // holder) and the group-commit benchmark.
    .executableTarget(name: "ordo-store-tool", dependencies: ["OrdoStore", "Ordo"]),
    .executableTarget(name: "ordod", dependencies: ["OrdoDBus", "OrdoStore", "Ordo"]),
    // The generators of typed accessors from a schema (`ordoctl codegen`).
    .target(name: "OrdoCodegen", dependencies: ["Ordo"]),
    .executableTarget(name: "ordoctl", dependencies: ["OrdoDBus", "Ordo", "OrdoCodegen"]),
    .target(name: "COrdo", path: "include", publicHeadersPath: "."),
    .target(name: "OrdoC", dependencies: ["Ordo", "COrdo", "OrdoDBus"]),
    .target(name: "OrdoConformance", dependencies: ["Ordo"]),
    .executableTarget(name: "ordo-conformance", dependencies: ["OrdoConformance"]),
    .executableTarget(name: "ordo-demo", dependencies: ["Ordo"]),
    .executableTarget(name: "ordo-bench", dependencies: ["Ordo"], path: "Benchmarks/ordo-bench"),
    .testTarget(name: "OrdoTests", dependencies: ["Ordo", "OrdoConformance"]),
    .testTarget(name: "OrdoDBusTests", dependencies: ["OrdoDBus", "Ordo"]),
    .testTarget(name: "OrdoDifferentialTests", dependencies: ["Ordo", "OrdoConformance"]),
    .testTarget(name: "OrdoCodegenTests", dependencies: ["OrdoCodegen", "Ordo"]),
    .testTarget(name: "OrdoStoreTests", dependencies: ["OrdoStore", "Ordo", "CSQLite", "ordo-store-tool"]),
  ]
)

// The libFuzzer targets (Fuzz/), declared only when ORDO_FUZZ is set:
// `make fuzz-build` builds them with -sanitize=fuzzer,address in a scratch
// path of their own. Each one's `main` hands its input function to
// libFuzzer's driver (Fuzz/CLibFuzzer), which an ordinary build does not
// link. The D-Bus target reaches the service's decoder with
// `@testable import` (the fuzz build passes -enable-testing).
if ProcessInfo.processInfo.environment["ORDO_FUZZ"] != nil {
  package.targets += [
    .systemLibrary(name: "CLibFuzzer", path: "Fuzz/CLibFuzzer"),
    .executableTarget(name: "fuzz-keypath", dependencies: ["Ordo", "CLibFuzzer"], path: "Fuzz/keypath"),
    .executableTarget(name: "fuzz-scenario", dependencies: ["OrdoConformance", "CLibFuzzer"], path: "Fuzz/scenario"),
    .executableTarget(name: "fuzz-dbus", dependencies: ["OrdoDBus", "Ordo", "CDBus", "CLibFuzzer"], path: "Fuzz/dbus"),
    .executableTarget(name: "fuzz-schema", dependencies: ["Ordo", "CLibFuzzer"], path: "Fuzz/schema"),
  ]
}
