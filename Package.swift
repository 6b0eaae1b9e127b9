// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "Ordo",
  products: [
    .library(name: "Ordo", targets: ["Ordo"]),
    .library(name: "OrdoDBus", targets: ["OrdoDBus"]),
    .executable(name: "ordod", targets: ["ordod"]),
    .executable(name: "ordoctl", targets: ["ordoctl"]),
    .library(name: "ordo", type: .dynamic, targets: ["OrdoC"]),
  ],
  targets: [
    .target(name: "Ordo"),
    .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
    .target(name: "OrdoDBus", dependencies: ["Ordo", "CDBus"]),
    .executableTarget(name: "ordod", dependencies: ["OrdoDBus", "Ordo"]),
    .executableTarget(name: "ordoctl", dependencies: ["OrdoDBus", "Ordo"]),
    .target(name: "COrdo", path: "include", publicHeadersPath: "."),
    .target(name: "OrdoC", dependencies: ["Ordo", "COrdo", "OrdoDBus"]),
    .target(name: "OrdoConformance", dependencies: ["Ordo"]),
    .executableTarget(name: "ordo-conformance", dependencies: ["OrdoConformance"]),
    .executableTarget(name: "ordo-demo", dependencies: ["Ordo"]),
    .executableTarget(name: "ordo-bench", dependencies: ["Ordo"], path: "Benchmarks/ordo-bench"),
    .testTarget(name: "OrdoTests", dependencies: ["Ordo", "OrdoConformance"]),
    .testTarget(name: "OrdoDBusTests", dependencies: ["OrdoDBus", "Ordo"]),
    .testTarget(name: "OrdoDifferentialTests", dependencies: ["Ordo", "OrdoConformance"]),
  ]
)
