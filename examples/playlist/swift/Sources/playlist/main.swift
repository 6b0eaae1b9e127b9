// The playlist model (examples/schema/playlist.json) through its generated
// accessors (PlaylistModel.swift, made by `ordoctl codegen --swift`): no
// keypath strings, records for the tracks, patterns for the contracts.
import Foundation
import Ordo

let schemaFile = CommandLine.arguments.dropFirst().first ?? "../../schema/playlist.json"
let bus = Bus(schema: try Schema(json: Data(contentsOf: URL(fileURLWithPath: schemaFile))))
let model = try PlaylistModel(bus: bus)
let playlist = model.playlist

// Computed data: the total follows the tracks' durations.
try bus.register(name: "total", reads: [playlist.tracks.tree], writes: [playlist.total.pattern]) { ctx in
  try ctx.set(playlist.total, try playlist.tracks.records().values.reduce(0) { $0 + $1.duration })
}

// A view of the titles: called only when a title changes.
let titleViews = Counter()
try bus.register(name: "titles", reads: [playlist.tracks.anyElement.title]) { _ in titleViews.add() }

print("before any write: total = \(try playlist.totalValue), mode = \(try playlist.modeValue)")

// One record write per track, all in one transaction.
try bus.transaction {
  try playlist.title.set("Road trip")
  try playlist.tracks.set("t1", .init(duration: 200, title: "Intro"))
  try playlist.tracks.set("t2", .init(duration: 340, title: "Drive"))
  try playlist.tracks.set("t3", .init(duration: 95, title: "Outro"))
  try playlist.selection.set("t2")
}
print("after adding 3 tracks: total = \(try playlist.totalValue), title views = \(titleViews.count)")

// Rewriting a record with a new duration only: the title is unchanged, so
// the titles view is not called.
var drive = try playlist.tracks["t2"]!
drive.duration = 300
try bus.transaction { try playlist.tracks.set("t2", drive) }
print("after shortening t2: total = \(try playlist.totalValue), title views = \(titleViews.count)")

// Removing an element removes its subtree.
try bus.transaction { try playlist.tracks.remove("t3") }
let ids = try playlist.tracks.records().keys.sorted()
print("after removing t3: tracks = \(ids.joined(separator: ",")), total = \(try playlist.totalValue)")
print("selected: \(try playlist.tracks[try playlist.selectionValue]?.title ?? "-")")

try bus.transaction { try model.ui.refresh.touch() }
print("refresh counter = \(try model.ui.refresh.counter)")

/// A count shared with a callback.
final class Counter: @unchecked Sendable {
  private let lock = NSLock()
  private var value = 0
  var count: Int { lock.withLock { value } }
  func add() { lock.withLock { value += 1 } }
}
