import Ordo

// A small demonstration of the notification order on one bus: contracts of
// every kind, registered in a scrambled order, each called once per
// transaction in the order SPEC §4 defines.

/// Prints one line per call, with what the contract saw.
@Sendable func show(_ bus: Bus, _ name: String, _ note: ContractNotification) {
  print("  txn \(note.transaction)  \(name.padding(16))  changed: \(note.changed.joined(separator: ", "))")
}

extension String {
  func padding(_ n: Int) -> String { count >= n ? self : self + String(repeating: " ", count: n - count) }
}

func demo() throws {
  let bus = Bus()
  try bus.register(name: "content", reads: ["doc.count", "doc.title"]) { show(bus, "content", $0) }
  try bus.register(name: "child-view", reads: ["ui.panels"], priority: 2) { show(bus, "child-view", $0) }
  try bus.register(name: "root-view", reads: ["ui.layout"], writes: ["ui.panels"], priority: 1) { note in
    show(bus, "root-view", note)
    try bus.set("ui.panels", .int64(3))
  }
  try bus.register(name: "computed", reads: ["doc.items"], writes: ["doc.count"], priority: -1) { note in
    show(bus, "computed", note)
    guard case .string(let items)? = try bus.value("doc.items") else { return }
    try bus.set("doc.count", .int64(Int64(items.split(separator: ",").count)))
  }
  try bus.register(name: "coordinate", reads: ["doc.items", "doc.mode"], writes: ["ui.layout"], priority: -2) { note in
    show(bus, "coordinate", note)
    try bus.set("ui.layout", .string("grid"))
  }
  try bus.register(name: "normalize", reads: ["doc.items"], writes: ["doc.items"], priority: -3) { note in
    show(bus, "normalize", note)
    guard case .string(let items)? = try bus.value("doc.items") else { return }
    let sorted = Set(items.split(separator: ",")).sorted().joined(separator: ",")
    try bus.set("doc.items", .string(sorted))
  }
  try bus.register(name: "autosave", reads: []) { show(bus, "autosave", $0) }

  print("Contracts in pass order:")
  for c in bus.contracts() {
    let rank = c.priority.map { "priority \($0)" } ?? (c.kind == .everyTransaction ? "every transaction" : "level \(c.level)")
    print("  #\(c.position) \(c.name.padding(12)) \(rank)")
  }
  print("\nTransaction: doc.items = \"b,a,a\", doc.title = \"Songs\"")
  let txn = try bus.transaction {
    try bus.set("doc.items", .string("b,a,a"))
    try bus.set("doc.title", .string("Songs"))
  }
  print("committed transaction \(txn); doc.items = \(try bus.value("doc.items")!), doc.count = \(try bus.value("doc.count")!)")

  print("\nTransaction: doc.title = \"Albums\" (only content and autosave read it)")
  try bus.transaction { try bus.set("doc.title", .string("Albums")) }

  print("\nA refused write: set ui.panels outside a transaction")
  do { try bus.set("ui.panels", .int64(1)) } catch { print("  \(error)") }
}

do { try demo() } catch {
  print("demo failed: \(error)")
}
