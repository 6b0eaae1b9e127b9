// swift-tools-version:6.0
// An app that uses Ordo as a package dependency, by path, through accessors
// generated from its schema (songs.json; `ordoctl codegen --swift`, see
// docs/schema.md): `swift run songs songs.json` from this directory. ORDO_PATH
// points it at another checkout (the test in mk/docs.mk copies this
// directory away and sets it); by default it is the checkout this directory
// belongs to.
import PackageDescription

let ordo = Context.environment["ORDO_PATH"] ?? "../.."

let package = Package(
  name: "songs",
  dependencies: [.package(name: "Ordo", path: ordo)],
  targets: [
    .executableTarget(name: "songs", dependencies: [.product(name: "Ordo", package: "Ordo")])
  ]
)
