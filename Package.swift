// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "Ordo",
  products: [
    .library(name: "Ordo", targets: ["Ordo"]),
  ],
  targets: [
    .target(name: "Ordo"),
    .target(name: "OrdoConformance", dependencies: ["Ordo"]),
    .executableTarget(name: "ordo-conformance", dependencies: ["OrdoConformance"]),
    .executableTarget(name: "ordo-demo", dependencies: ["Ordo"]),
    .executableTarget(name: "ordo-bench", dependencies: ["Ordo"], path: "Benchmarks/ordo-bench"),
    .testTarget(name: "OrdoTests", dependencies: ["Ordo", "OrdoConformance"]),
  ]
)
