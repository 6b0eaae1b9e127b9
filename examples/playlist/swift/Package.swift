// swift-tools-version:6.0
// The playlist model used through accessors generated from its schema
// (examples/schema/playlist.json, `ordoctl codegen --swift`), in an app
// that depends on the Ordo checkout this directory belongs to, by path.
import PackageDescription

let package = Package(
  name: "playlist",
  dependencies: [.package(name: "Ordo", path: "../../..")],
  targets: [
    .executableTarget(name: "playlist", dependencies: [.product(name: "Ordo", package: "Ordo")])
  ]
)
