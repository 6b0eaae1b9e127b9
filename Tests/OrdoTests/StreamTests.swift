import Foundation
import Testing

@testable import Ordo

@Suite struct StreamTests {
  @Test func oneElementPerTransactionWithTheChangedValues() async throws {
    let bus = Bus()
    let stream = try bus.observe(name: "log", reads: ["doc.*"])
    try bus.transaction {
      try bus.set("doc.title", .string("a"))
      try bus.set("doc.title", .string("b"))
      try bus.set("doc.count", .int64(2))
    }
    try bus.transaction { try bus.remove("doc.count") }
    var it = stream.makeAsyncIterator()
    let first = try #require(await it.next())
    #expect(first.transaction == 1 && first.contract == stream.contract)
    #expect(first.changed == ["doc.title", "doc.count"])
    #expect(first.values == ["doc.title": .string("b"), "doc.count": .int64(2)])
    #expect(first.droppedBefore == 0)
    let second = try #require(await it.next())
    #expect(second.transaction == 2 && second.changed == ["doc.count"] && second.values.isEmpty)
    #expect(bus.contract(stream.contract)?.writes == [])
    stream.cancel()
    #expect(await it.next() == nil)
    #expect(bus.contracts().isEmpty)
  }

  @Test func aFullBufferDropsTheOldestAndCountsTheDrops() async throws {
    let bus = Bus()
    let stream = try bus.observe(name: "log", reads: ["k"], bufferLimit: 2)
    for i in 1...5 { try bus.transaction { try bus.set("k", .int64(Int64(i))) } }
    #expect(stream.dropped == 3)
    var it = stream.makeAsyncIterator()
    let a = try #require(await it.next())
    #expect(a.transaction == 4 && a.droppedBefore == 3 && a.values == ["k": .int64(4)])
    let b = try #require(await it.next())
    #expect(b.transaction == 5 && b.droppedBefore == 0)
    // A consumer that saw a drop catches up from the last transaction it handled.
    #expect(try bus.changes(since: 0, ["k"]).values == ["k": .int64(5)])
    try bus.transaction { try bus.set("k", .int64(6)) }
    #expect(await it.next()?.droppedBefore == 0)
    #expect(stream.dropped == 3)
    stream.cancel()
  }

  @Test func cancellingTheIteratingTaskUnregistersTheContract() async throws {
    let bus = Bus()
    let stream = try bus.observe(name: "log", reads: ["k"])
    let received = Box<[UInt64]>([])
    let started = AsyncStream<Void>.makeStream()
    let task = Task {
      started.continuation.yield()
      for await change in stream { received.value.append(change.transaction) }
      return "ended"
    }
    for await _ in started.stream { break }
    try bus.transaction { try bus.set("k", .int64(1)) }
    // Wait (boundedly) for the consumer to see transaction 1.
    for _ in 0..<500 where received.value.isEmpty { try await Task.sleep(nanoseconds: 2_000_000) }
    #expect(received.value == [1])
    task.cancel()
    #expect(await task.value == "ended")
    #expect(bus.contracts().isEmpty)
    try bus.transaction { try bus.set("k", .int64(2)) }
    #expect(received.value == [1])
  }

  @Test func releasingTheStreamUnregistersTheContract() throws {
    let bus = Bus()
    do {
      let stream = try bus.observe(name: "log", reads: ["k"])
      #expect(bus.contracts().map(\.name) == ["log"])
      withExtendedLifetime(stream) {}
    }
    #expect(bus.contracts().isEmpty)
  }

  @Test func anInitialElementAndValidation() async throws {
    let bus = Bus()
    try bus.transaction { try bus.set("k", .int64(1)) }
    let stream = try bus.observe(name: "log", reads: [try Pattern("k")], flags: .notifyInitial)
    var it = stream.makeAsyncIterator()
    let first = try #require(await it.next())
    #expect(first.changed.isEmpty && first.transaction == 1 && first.values.isEmpty)
    expectError(.invalidArgument, ["at least 1"]) { _ = try bus.observe(name: "x", reads: ["k"], bufferLimit: 0) }
    expectError(.invalidArgument, ["empty read set"]) { _ = try bus.observe(name: "x", reads: []) }
    expectError(.duplicateName) { _ = try bus.observe(name: "log", reads: ["k"]) }
    stream.cancel()
  }

  @Test func aConsumerWaitingOnAnotherThreadIsWokenByACommit() async throws {
    let bus = Bus()
    let stream = try bus.observe(name: "log", reads: ["k"])
    let consumer = Task.detached { () -> UInt64? in
      var it = stream.makeAsyncIterator()
      return await it.next()?.transaction
    }
    try await Task.sleep(nanoseconds: 20_000_000)
    try bus.transaction { try bus.set("k", .int64(1)) }
    #expect(await consumer.value == 1)
    stream.cancel()
  }
}
