// A bus and everything its contracts capture are freed when the last
// reference to the bus goes away (found by the scenario fuzzer's leak
// detector). Callbacks that use the bus capture it unowned: a callback that
// holds its bus strongly keeps it alive, as documented.

import Foundation
import Ordo
import Testing

/// Something a callback captures, to watch its lifetime.
final class Witness: @unchecked Sendable {
  nonisolated(unsafe) static var alive = 0
  static let lock = NSLock()
  init() { Witness.lock.withLock { Witness.alive += 1 } }
  deinit { Witness.lock.withLock { Witness.alive -= 1 } }
  func touch() {}
}

@Suite("Lifetime", .serialized)
struct LifetimeTests {
  private func makeBusAndDrop(_ body: (Bus, Witness) throws -> Void) rethrows -> (bus: Bool, witness: Bool) {
    weak var weakBus: Bus?
    weak var weakWitness: Witness?
    func scope() throws {
      let bus = Bus()
      let witness = Witness()
      weakBus = bus
      weakWitness = witness
      try body(bus, witness)
    }
    try scope()
    return (weakBus != nil, weakWitness != nil)
  }

  @Test("a bus whose contracts were called is freed with what they capture")
  func calledContracts() throws {
    let alive = try makeBusAndDrop { bus, w in
      try bus.register(name: "view", reads: ["doc.**"]) { _ in w.touch() }
      try bus.register(name: "norm", reads: ["doc.a"], writes: ["doc.b"], priority: -3) { [unowned bus] _ in
        w.touch()
        try bus.set("doc.b", .int64(1))
      }
      try bus.register(name: "log", reads: []) { _ in w.touch() }
      try bus.transaction {
        try bus.set("doc.a", .int64(1))
        try bus.set("doc.c", .int64(1))
      }
    }
    #expect(alive.bus == false, "the bus outlives its last reference")
    #expect(alive.witness == false, "a callback's captures outlive the bus")
  }

  @Test("a bus is freed after contracts were unregistered or skipped in a pass")
  func skippedContracts() throws {
    let alive = try makeBusAndDrop { bus, w in
      try bus.register(name: "restore", reads: ["k"], writes: ["k"], priority: -3) { [unowned bus] _ in
        w.touch()
        try bus.set("k", .int64(0))  // cancels the change: later contracts are skipped
      }
      try bus.register(name: "skipped", reads: ["k"]) { _ in w.touch() }
      try bus.register(name: "gone", reads: ["other"]) { _ in w.touch() }
      try bus.transaction { try bus.set("k", .int64(0)) }
      try bus.transaction { try bus.set("k", .int64(1)) }
      try bus.transaction { try bus.set("other", .int64(1)) }
      try bus.unregister(named: "gone")
    }
    #expect(alive.bus == false)
    #expect(alive.witness == false)
  }

  @Test("a bus is freed after a scheduled contract was unregistered during the pass")
  func unregisteredWhileScheduled() throws {
    let alive = try makeBusAndDrop { bus, w in
      let content = try bus.register(name: "content", reads: ["ui.mode"]) { _ in w.touch() }.id
      try bus.register(name: "root", reads: ["ui.mode"], priority: 1) { [unowned bus] _ in
        w.touch()
        try bus.unregister(content)
      }
      try bus.transaction { try bus.set("ui.mode", .string("list")) }
    }
    #expect(alive.bus == false)
    #expect(alive.witness == false, "the unregistered contract's callback outlives the bus")
  }

  @Test("a bus is freed after removeTree removed a keypath's own value")
  func removeTreeOfItself() throws {
    let alive = try makeBusAndDrop { bus, w in
      try bus.register(name: "reader", reads: ["t.**"]) { _ in w.touch() }
      try bus.transaction {
        try bus.set("t", .int64(1))
        try bus.set("t.a", .int64(1))
      }
      try bus.transaction { try bus.removeTree("t") }
    }
    #expect(alive.bus == false)
    #expect(alive.witness == false, "the keypath node removed by its own removeTree outlives the bus")
  }

  @Test("a bus dropped with a transaction still open is freed")
  func droppedWithOpenTransaction() throws {
    let alive = try makeBusAndDrop { bus, w in
      try bus.register(name: "reader", reads: ["a.**"]) { _ in w.touch() }
      try bus.transaction { try bus.set("a.b", .int64(1)) }
      bus.begin()
      try bus.set("a.b", .int64(2))
      try bus.removeTree("a.b")
      // No commit: the bus goes away with the transaction open.
    }
    #expect(alive.bus == false)
    #expect(alive.witness == false, "the open transaction's journal keeps the keypath node and its readers alive")
  }
}
