import Foundation
import Testing

import Ordo

/// What a view showed, and in which transaction.
private struct Render: Equatable {
  let transaction: UInt64
  let title: String
  let count: Int64
}

/// A view class of which the app shows several instances.
private final class PlaylistHeader: Sendable {
  let renders = Box<[Render]>([])

  init(bus: Bus) throws {
    try bus.register(owner: self, role: "render", reads: ["playlist.title", "playlist.count"], flags: .notifyInitial) {
      header, ctx in
      header.renders.value.append(
        Render(
          transaction: ctx.transaction, title: try ctx.value("playlist.title")?.description ?? "",
          count: try ctx.value("playlist.count").flatMap { if case .int64(let n) = $0 { n } else { nil } } ?? -1))
    }
  }
}

/// A main-actor view with hooks: it lays out once at the end of each pass
/// and shows failures.
@MainActor private final class PlaylistTable {
  var rows: [String] = []
  var renders: [UInt64] = []
  var layouts = 0
  var failures: [String] = []

  init(bus: Bus) throws {
    try bus.registerOnMainActor(owner: self, role: "rows", reads: ["playlist.items.*"], flags: .notifyInitial) { table, ctx in
      let items = try ctx.snapshot(["playlist.items.*"]).values
      table.rows = items.keys.sorted().map { items[$0]!.description }
      table.renders.append(ctx.transaction)
      try ctx.atEndOfPassOnMainActor { table.layouts += 1 }
    }
    bus.onFailureOnMainActor { [weak self] failure in self?.failures.append(failure.name) }
  }
}

/// The app's model coordinator: builds and edits the playlist.
private struct Coordinator {
  let bus: Bus

  /// The computed data: the item count.
  func registerTotals() throws {
    try bus.register(name: "totals", reads: ["playlist.items.*"], writes: ["playlist.count"]) { (ctx: ContractContext) in
      try ctx.set("playlist.count", .int64(Int64(try ctx.snapshot(["playlist.items.*"]).values.count)))
    }
  }

  func add(_ items: [String], from start: Int = 0) throws {
    for (i, item) in items.enumerated() { try bus.set("playlist.items.\(start + i)", .string(item)) }
  }
}

@MainActor @Suite struct AppTests {
  /// Views registered while the model is being built render once, with the
  /// finished model; every view renders once per transaction, with data
  /// consistent with the computed count.
  @Test func everyViewRendersOncePerTransactionWithConsistentData() throws {
    let bus = Bus()
    let coordinator = Coordinator(bus: bus)
    try coordinator.registerTotals()

    var headers: [PlaylistHeader] = []
    var table: PlaylistTable?
    let built = try bus.transaction { () throws in
      try bus.set("playlist.title", .string("Mix"))
      try coordinator.add(["a", "b"])
      headers = [try PlaylistHeader(bus: bus), try PlaylistHeader(bus: bus)]
      table = try PlaylistTable(bus: bus)
      try coordinator.add(["c"], from: 2)
    }
    let view = try #require(table)
    for h in headers { #expect(h.renders.value == [Render(transaction: built, title: "string \"Mix\"", count: 3)]) }
    #expect(view.renders == [built] && view.rows == ["string \"a\"", "string \"b\"", "string \"c\""])
    #expect(view.layouts == 1)
    #expect(bus.contracts().map(\.name).filter { $0.hasPrefix("PlaylistHeader") } == ["PlaylistHeader.render#1", "PlaylistHeader.render#2"])

    let edited = try bus.transaction { () throws in
      try bus.set("playlist.title", .string("Road"))
      try coordinator.add(["d"], from: 3)
    }
    for h in headers { #expect(h.renders.value.last == Render(transaction: edited, title: "string \"Road\"", count: 4)) }
    #expect(headers.allSatisfy { $0.renders.value.count == 2 })
    #expect(view.renders == [built, edited] && view.rows.count == 4)
    #expect(view.layouts == 2)
    #expect(view.failures.isEmpty)
    #expect(bus.lint().isEmpty)

    // A closed header goes with its instance; the other stays.
    headers.removeLast()
    #expect(!bus.contracts().map(\.name).contains("PlaylistHeader.render#2"))
    try bus.transaction { try bus.set("playlist.title", .string("Late")) }
    #expect(headers[0].renders.value.count == 3)
    #expect(bus.statistics.failures == 0)
  }
}
