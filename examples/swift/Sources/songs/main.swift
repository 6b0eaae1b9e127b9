import Ordo

// Top-level code runs on the main actor.
// The model's shape (docs/schema.md): the bus refuses a keypath, a value or
// a contract pattern outside it, and reads return declared defaults.
let schema = try Schema([
  Schema.Declaration("doc.title", type: .string, default: .string("untitled")),
  Schema.Declaration("doc.count", type: .int64, default: .int64(0), min: .int64(0)),
  Schema.Declaration("doc.items.*", type: .string, description: "an item's title"),
])
let bus = Bus(schema: schema)
let doc = try Document(bus)
let header = Header()
print("before any write: title = \(try doc.title.value ?? "-")")

// A typo in a contract's reads is refused at registration, with a suggestion.
do {
  try bus.register(name: "typo", reads: ["doc.titel"]) { _ in }
} catch {
  print("typo: \(error.code.name): \(error.message)")
}

// Computed data: the count follows the items. The callback writes through
// its context and captures only the model (no bus, no cycle).
try bus.register(name: "count", reads: [doc.items.tree], writes: [doc.count.keypath], priority: -1) { ctx in
  try ctx.set(doc.count, doc.items.values().count)
}

// View content on the main actor: plain main-actor code, no unsafe opt-outs.
try bus.registerOnMainActor(name: "header", reads: [doc.title.keypath, doc.count.keypath]) { ctx in
  header.text = "\(try doc.title.value ?? "untitled") (\(try doc.count.value(or: 0)) items)"
  header.redraws += 1
  try ctx.atEndOfPass { print("end of pass \(ctx.transaction)") }
}

// A view bound to its owner: released, it stops being called.
var view: ItemsView? = ItemsView("items")
try bus.register(owner: view!, name: "items-view", reads: [doc.items.children]) { view, ctx in
  print("\(view.name) saw \(ctx.changed.count) changed item(s) in transaction \(ctx.transaction)")
}

// An observer that works asynchronously.
let titles = try bus.observe(name: "title-log", reads: [doc.title.keypath])

let first = try bus.transaction {
  try doc.title.set("Songs")
  for (i, name) in ["Intro", "Verse", "Chorus"].enumerated() { try doc.item(i).set(name) }
}
print("transaction \(first): header = \(header.text), redraws = \(header.redraws)")

view = nil
let second = try bus.transaction {
  try doc.item(3).set("Outro")
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
