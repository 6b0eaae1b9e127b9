import Foundation
import Ordo

// Top-level code runs on the main actor.
// The model's shape is its schema, songs.json (docs/schema.md): the bus
// refuses a keypath, a value or a contract pattern outside it, and reads
// return declared defaults. SongsModel.swift holds the typed accessors
// `ordoctl codegen --swift songs.json` generates from it: a property per
// keypath, the items as a collection, patterns for contracts. The model
// keeps no reference to the bus, so contracts may capture it without a
// retain cycle.
let schemaFile = CommandLine.arguments.dropFirst().first ?? "songs.json"
let bus = Bus(schema: try Schema(json: Data(contentsOf: URL(fileURLWithPath: schemaFile))))
let doc = try SongsModel(bus: bus).doc
let header = Header()
print("before any write: title = \(try doc.titleValue)")

// A typo in a pattern written by hand is refused at registration, with a
// suggestion (the generated patterns below cannot be misspelt).
do {
  try bus.register(name: "typo", reads: ["doc.titel"]) { _ in }
} catch {
  print("typo: \(error.code.name): \(error.message)")
}

// Computed data: the count follows the items. The callback writes through
// its context and captures only the model (no bus, no cycle).
try bus.register(name: "count", reads: [doc.items.tree], writes: [doc.count.pattern], priority: -1) { ctx in
  try ctx.set(doc.count, Int64(try doc.items.values().count))
}

// View content on the main actor: plain main-actor code, no unsafe opt-outs.
try bus.registerOnMainActor(name: "header", reads: [doc.title.pattern, doc.count.pattern]) { ctx in
  header.text = "\(try doc.titleValue) (\(try doc.countValue) items)"
  header.redraws += 1
  try ctx.atEndOfPass { print("end of pass \(ctx.transaction)") }
}

// A view bound to its owner: released, it stops being called.
var view: ItemsView? = ItemsView("items")
try bus.register(owner: view!, name: "items-view", reads: [doc.items.anyElement]) { view, ctx in
  print("\(view.name) saw \(ctx.changed.count) changed item(s) in transaction \(ctx.transaction)")
}

// An observer that works asynchronously.
let titles = try bus.observe(name: "title-log", reads: [doc.title.pattern])

let first = try bus.transaction {
  try doc.title.set("Songs")
  for (i, name) in ["Intro", "Verse", "Chorus"].enumerated() { try doc.items.set("\(i)", name) }
}
print("transaction \(first): header = \(header.text), redraws = \(header.redraws)")

view = nil
let second = try bus.transaction {
  try doc.items.set("3", "Outro")
  try doc.title.set("More songs")
}
print("transaction \(second): header = \(header.text), redraws = \(header.redraws)")
print("contracts = \(bus.contracts().map(\.name).sorted().joined(separator: ","))")

var seen: [String] = []
for await change in titles {
  seen.append("\(change.transaction):\(change.values[doc.title.keypath].map(\.description) ?? "-")")
  if seen.count == 2 { break }
}
print("title log = \(seen.joined(separator: " "))")

do {
  try doc.count.set(99)
} catch {
  print("outside a transaction: \(error.code.name)")
}
