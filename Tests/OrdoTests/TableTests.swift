import Testing

@testable import Ordo

/// The bus's own tables: the keypath and contract-name table
/// (``UnretainedTable``), the segment table, the contract registry and the
/// flat pattern lists, checked against plain Swift collections through many
/// insertions and removals.
@Suite struct TableTests {
  /// An entry that keeps no hash, as contracts in the by-name table.
  final class Named: TableEntry {
    let key: String
    init(_ key: String) { self.key = key }
    var tableHash: UInt64 { hashString(key) }
    func mayHave(_ h: UInt64) -> Bool { true }
  }

  /// Random inserts, finds and removals against a dictionary (which also
  /// keeps the entries alive: the table does not), then removal of all, so
  /// that the table grows, shrinks and empties.
  func agreesWithADictionary<T: TableEntry>(_ make: (String, UInt64) -> T, _ key: @escaping (T) -> String) {
    var table = UnretainedTable<T>()
    var model: [String: T] = [:]
    var rng = SystemRandomNumberGenerator()
    for step in 0..<20_000 {
      let k = "k\(Int.random(in: 0..<3_000, using: &rng)).v"
      let h = hashString(k)
      if let found = model[k] {
        #expect(table.find(h) { key($0) == k }?.takeUnretainedValue() === found)
        if step % 3 == 0 {
          table.remove(found)
          model[k] = nil
          #expect(table.find(h) { key($0) == k } == nil)
        }
      } else {
        #expect(table.find(h) { key($0) == k } == nil)
        let x = make(k, h)
        table.insert(x)
        model[k] = x
      }
      #expect(table.count == model.count)
    }
    for (k, x) in model {
      table.remove(x)
      #expect(table.find(hashString(k)) { key($0) == k } == nil)
    }
    #expect(table.count == 0)
  }

  @Test func keypathTableAgreesWithADictionary() {
    let slab = NodeSlab()
    agreesWithADictionary({ KeyNode(key: $0, ids: [], hash: $1, slab: slab) }, \.key)
  }

  @Test func nameTableAgreesWithADictionary() {
    agreesWithADictionary({ k, _ in Named(k) }, \.key)
  }

  @Test func byteAndStringHashesAgree() {
    for key in ["", "a", "doc.items.3.title", "model.item123456.value", "ünïcode.kéy", String(repeating: "x", count: 1_000)] {
      let bytes = Array(key.utf8)
      bytes.withUnsafeBytes { raw in
        #expect(hashBytes(raw) == hashString(key))
        #expect(equalBytes(key, raw))
        #expect(!equalBytes(key + "!", raw))
      }
    }
  }

  /// The word-wise comparison and hash at every length around the word
  /// size, with one differing byte at every position: equal only when the
  /// bytes are, and the hash sees every byte.
  @Test func wordWiseComparisonAndHashSeeEveryByte() {
    for n in 1...40 {
      let a = (0..<n).map { UInt8(truncatingIfNeeded: 0x41 &+ $0) }
      let key = String(decoding: a, as: UTF8.self)
      a.withUnsafeBytes { ra in
        #expect(sameBytes(ra.baseAddress!, ra.baseAddress!, n))
        #expect(equalBytes(key, ra))
        for i in 0..<n {
          var b = a
          b[i] ^= 0x20
          b.withUnsafeBytes { rb in
            #expect(!sameBytes(ra.baseAddress!, rb.baseAddress!, n), "length \(n), byte \(i)")
            #expect(!equalBytes(key, rb), "length \(n), byte \(i)")
            #expect(hashBytes(ra) != hashBytes(rb), "length \(n), byte \(i)")
          }
        }
      }
    }
  }

  @Test func segmentTableInternsOnce() {
    var table = SegmentTable()
    var ids: [String: UInt32] = [:]
    for i in 0..<5_000 {
      let name = "s\(i % 2_500)"
      let id = table.intern(name)
      if let known = ids[name] { #expect(id == known) } else { ids[name] = id }
      #expect(table.name(id) == name)
    }
    #expect(table.lookup("*") == SegmentTable.any)
    #expect(table.lookup("never") == SegmentTable.unknown)
    #expect(Set(ids.values).count == 2_500)
  }

  @Test func patternListsKeepReadsAndWritesApart() {
    let reads = [CPattern(ids: [1, 2, 3], isTree: false), CPattern(ids: [1, 0], isTree: true), CPattern(ids: [4, 5, 6, 7, 8, 9], isTree: false)]
    let writes = [CPattern(ids: [7], isTree: true)]
    let store = PatternStore(reads: reads, writes: writes)
    #expect(store.reads.map(\.ids) == reads.map(\.ids))
    #expect(store.reads.map(\.isTree) == reads.map(\.isTree))
    #expect(store.writes.map(\.ids) == [[7]])
    #expect(store.writes.first?.isTree == true)
    let empty = PatternStore(reads: [], writes: [])
    #expect(empty.reads.isEmpty && empty.writes.isEmpty)
    let writesOnly = PatternStore(reads: [], writes: writes)
    #expect(writesOnly.reads.isEmpty && writesOnly.writes.count == 1)
  }

  @Test func registryFindsContractsAfterManyUnregistrations() throws {
    let bus = Bus()
    var handles: [ContractHandle] = []
    for i in 0..<300 {
      handles.append(try bus.register(name: "c\(i)", reads: ["k\(i)"]) { _ in })
    }
    // Unregister 4 of every 5 (the registry sweeps out the unregistered).
    for (i, h) in handles.enumerated() where i % 5 != 0 { try h.unregister() }
    #expect(bus.statistics.contracts == 60)
    for (i, h) in handles.enumerated() {
      if i % 5 == 0 {
        #expect(bus.contract(h.id)?.name == "c\(i)")
      } else {
        #expect(throws: OrdoError.self) { try h.unregister() }
      }
    }
    #expect(bus.contracts().map(\.name) == stride(from: 0, to: 300, by: 5).map { "c\($0)" })
    for (i, h) in handles.enumerated() where i % 5 == 0 { try h.unregister() }
    #expect(bus.statistics.contracts == 0)
  }

  @Test func setExistingWritesThroughTheOneWritePath() throws {
    let bus = Bus()
    try bus.commitWith { try bus.set("a.b", .int64(1)) }
    // Captured by a callback below: unowned, or the bus and its contract
    // would keep each other alive.
    let setExisting: @Sendable (String, Value) throws(OrdoError) -> Bool = { [unowned bus] k, v throws(OrdoError) in
      var bytes = Array(k.utf8)
      return try bytes.withUnsafeMutableBufferPointer { (p) throws(OrdoError) -> Bool in try bus.setExisting(utf8: UnsafeBufferPointer(p), v) }
    }
    // Outside a transaction: refused like set, nothing changes.
    #expect(codeOf { _ = try setExisting("a.b", .int64(2)) } == .noTransaction)
    #expect(try bus.value("a.b") == .int64(1))
    let calls = Calls()
    try bus.register(name: "r", reads: ["a.b"]) { note in calls.add("r", note) }
    bus.begin()
    #expect(try setExisting("a.b", .int64(3)))
    #expect(try !setExisting("a.c", .int64(3)))  // not in the store: the caller falls back to set
    #expect(try !setExisting("a.b.", .int64(4)))
    #expect(try bus.commit() == 2)
    #expect(try bus.value("a.b") == .int64(3))
    #expect(try bus.counter("a.b") == 2)
    #expect(calls.all == [Call(name: "r", changed: ["a.b"], txn: 2)])
    // Inside a callback: the contract's rules apply, as through set.
    let inCallback = Box<[OrdoError.Code?]>([])
    try bus.register(name: "w", reads: ["x"], writes: ["a.b"]) { _ in
      inCallback.value.append(codeOf { _ = try setExisting("a.b", .int64(9)) })
      inCallback.value.append(codeOf { _ = try setExisting("x", .bool(false)) })
    }
    try bus.commitWith { try bus.set("x", .bool(true)) }
    #expect(inCallback.value == [nil, .contractViolation])
    #expect(try bus.value("a.b") == .int64(9))
    #expect(try bus.value("x") == .bool(true))
  }

  /// The schedule names contracts without retaining them; the registry
  /// must keep contracts unregistered during a pass until it ends, even
  /// when they are most of the bus (its sweep waits for the pass's end).
  @Test func contractsUnregisteredDuringAPassStayUntilItEnds() throws {
    let bus = Bus()
    let calls = Calls()
    var handles: [ContractHandle] = []
    let all = Box<[ContractHandle]>([])  // emptied at the end: handles keep their bus
    try bus.register(name: "sweeper", reads: ["k"], priority: -1) { note in
      calls.add("sweeper", note)
      for h in all.value.dropFirst(10) { try? h.unregister() }
    }
    for i in 0..<100 {
      handles.append(try bus.register(name: "c\(i)", reads: ["k"]) { note in calls.add("c\(i)", note) })
    }
    all.value = handles
    try bus.commitWith { try bus.set("k", .int64(1)) }
    // The sweeper ran first and unregistered c10…c99, scheduled but not yet
    // called: only c0…c9 are called, and nothing freed under the pass.
    #expect(calls.takeNames() == ["sweeper"] + (0..<10).map { "c\($0)" })
    #expect(bus.statistics.contracts == 11)
    // Outside the pass an unregistration sweeps; the bus goes on.
    try handles[0].unregister()
    try bus.commitWith { try bus.set("k", .int64(2)) }
    #expect(calls.takeNames() == ["sweeper"] + (1..<10).map { "c\($0)" })
    for h in handles[1..<10] { try h.unregister() }
    try bus.commitWith { try bus.set("k", .int64(3)) }
    #expect(calls.takeNames() == ["sweeper"])
    all.value = []
  }

  /// `ContractNotification.changed` is a collection, not an array: it must still
  /// compare, print, count and copy as the array it stands for.
  @Test func changedKeypathsBehaveAsTheirArray() throws {
    let bus = Bus()
    let seen = Box<[ChangedKeypaths]>([])
    try bus.register(name: "one", reads: ["a"]) { note in seen.mutate { $0.append(note.changed) } }
    try bus.register(name: "all", reads: []) { note in seen.mutate { $0.append(note.changed) } }
    try bus.commitWith {
      try bus.set("a", .int64(1))
      try bus.set("b", .int64(2))
    }
    let got = seen.value
    #expect(got.count == 2)
    #expect(got[0] == ["a"])
    #expect(got[0].count == 1 && got[0].first == "a")
    #expect("\(got[0])" == "[\"a\"]")
    #expect(got[1] == ["a", "b"])
    #expect(Array(got[1]) == ["a", "b"] && "\(got[1])" == "[\"a\", \"b\"]")
    #expect(ChangedKeypaths([]).isEmpty && ChangedKeypaths([]) == [])
    // A single keypath held as its node equals the same keypath as a list,
    // and hashes alike.
    #expect(got[0] == ChangedKeypaths(["a"]) && got[0].hashValue == ChangedKeypaths(["a"]).hashValue)
    #expect(got[0] != ChangedKeypaths(["b"]) && got[1] != ChangedKeypaths(["b", "a"]))
  }
}
