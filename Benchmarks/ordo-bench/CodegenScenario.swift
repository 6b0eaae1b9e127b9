import Foundation
import Ordo

/// Scenario: what generated accessors cost (docs/schema.md, "Generated
/// accessors"), on a bus made with examples/schema/playlist.json through
/// its checked-in accessors (PlaylistModel.swift, a link to the example's),
/// measured alternately in one run, 1 000 writes per transaction: a
/// generated accessor's write beside a hand-made ``Property``'s of the same
/// keypath, and a record write of a track's two fields beside the two
/// typed writes of the element's properties.
func runCodegen(_ s: Settings) throws -> [BenchResult] {
  let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../examples/schema/playlist.json")
  let w = try Writes(Bus(schema: try Schema(json: Data(contentsOf: file))))
  let tracks = w.model.playlist.tracks
  let variants = [
    Variant("property") { ops in try w.run(ops) { i in try w.hand.set(w.base &+ Int64(i)) } },
    Variant("generated") { ops in try w.run(ops) { i in try w.model.playlist.total.set(w.base &+ Int64(i)) } },
    Variant("typed-writes") { ops in
      try w.run(ops) { i in
        let e = w.elements[i]
        try e.duration.set(w.base &+ Int64(i))
        try e.title.set(w.titles[(Int(w.base) &+ i) % w.titles.count])
      }
    },
    Variant("record") { ops in
      try w.run(ops) { i in
        try tracks.set(w.ids[i], .init(duration: w.base &+ Int64(i), title: w.titles[(Int(w.base) &+ i) % w.titles.count]))
      }
    },
  ]
  progress("codegen: generated accessors and record writes against typed properties")
  let m = try measure(variants, s).per(Writes.perTransaction)
  let wrote = try tracks["t999"] != nil && w.model.playlist.totalValue > 0
  check(wrote, "codegen scenario: the writes happened")
  var accessor = BenchResult(scenario: "codegen-accessor", metric: "ns_per_write", ordo: m["generated"], target: "vs Property <= 1.05", met: nil)
  accessor.comparators = [("Property", m["property"])]
  accessor.ratios = [("vs Property", m.ratio("generated", "property"))]
  accessor.met = m.ratio("generated", "property") <= 1.05
  var record = BenchResult(scenario: "codegen-record-2-fields", metric: "ns_per_record", ordo: m["record"], target: "vs 2 typed writes <= 1.2", met: nil)
  record.comparators = [("2 typed writes", m["typed-writes"])]
  record.ratios = [("vs 2 typed writes", m.ratio("record", "typed-writes"))]
  record.met = m.ratio("record", "typed-writes") <= 1.2
  return [accessor, record]
}

/// The bus, its accessors, and the transactions the variants run.
private final class Writes {
  static let perTransaction = 1_000
  let bus: Bus
  let model: PlaylistModel
  let hand: Property<Int64>
  let ids = (0..<perTransaction).map { "t\($0)" }
  let elements: [PlaylistModel.Playlist.Tracks.Element]
  let titles = (0..<7).map { "title \($0)" }
  /// Changes with every transaction, so that every write is a change.
  var base: Int64 = 0

  init(_ bus: Bus) throws {
    self.bus = bus
    let model = try PlaylistModel(bus: bus)
    self.model = model
    hand = try bus.property("playlist.total", as: Int64.self)
    elements = try ids.map { try model.playlist.tracks.element($0) }
  }

  /// `ops` transactions of `perTransaction` writes each.
  func run(_ ops: Int, _ write: (Int) throws -> Void) throws -> UInt64 {
    let t0 = nowNS()
    for _ in 0..<ops {
      base &+= Int64(Self.perTransaction)
      bus.begin()
      for i in 0..<Self.perTransaction { try write(i) }
      try bus.commit()
    }
    return nowNS() - t0
  }
}
