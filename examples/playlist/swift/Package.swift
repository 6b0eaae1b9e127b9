// swift-tools-version:6.0
// The playlist model used through accessors generated from its schema
// (examples/schema/playlist.json, `ordoctl codegen --swift`). Ordo is a
// dependency by path: ORDO_PATH points it at another checkout (check.py
// copies this directory away and sets it); by default it is the checkout
// this directory belongs to.
import PackageDescription

let ordo = Context.environment["ORDO_PATH"] ?? "../../.."

let package = Package(
  name: "playlist",
  dependencies: [.package(name: "Ordo", path: ordo)],
  targets: [
    .executableTarget(name: "playlist", dependencies: [.product(name: "Ordo", package: "Ordo")])
  ]
)
