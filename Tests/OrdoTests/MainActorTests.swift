import Foundation
import Testing

@testable import Ordo

/// Main-actor state, as a view model's.
@MainActor final class TitleLabel {
  var text = ""
  var updates = 0
}

/// A main-actor owner, as a view controller.
@MainActor final class TitleController {
  let label = TitleLabel()
}

@MainActor @Suite struct MainActorTests {
  @Test func aMainActorContractUpdatesMainActorState() throws {
    let bus = Bus()
    let label = TitleLabel()
    try bus.registerOnMainActor(name: "label", reads: ["doc.title"], writes: ["doc.shown"]) { ctx in
      label.text = try ctx.value("doc.title").map(\.description) ?? ""
      label.updates += 1
      try ctx.set("doc.shown", .bool(true))
    }
    try bus.transaction { try bus.set("doc.title", .string("Songs")) }
    #expect(label.text == "string \"Songs\"")
    #expect(label.updates == 1)
    #expect(try bus.value("doc.shown") == .bool(true))
  }

  @Test func aCommitFromAnotherThreadIsReportedNotCalled() async throws {
    let bus = Bus()
    let label = TitleLabel()
    let failures = Box<[ContractFailure]>([])
    bus.onFailure { failures.value.append($0) }
    try bus.registerOnMainActor(name: "label", reads: ["doc.title"]) { _ in label.updates += 1 }
    await Task.detached {
      #expect(throws: Never.self) { try bus.transaction { try bus.set("doc.title", .string("x")) } }
    }.value
    #expect(label.updates == 0)
    let f = try #require(failures.value.first)
    #expect(failures.value.count == 1)
    #expect(f.name == "label" && f.transaction == 1)
    #expect(f.message.contains("runs on the main actor") && f.message.contains("transaction 1"))
    #expect(bus.contracts().first?.failures == 1)
    // Committed on the main actor again: called.
    try bus.transaction { try bus.set("doc.title", .string("y")) }
    #expect(label.updates == 1)
  }

  @Test func aMainActorOwnerBoundContractGoesWithItsOwner() throws {
    let bus = Bus()
    var controller: TitleController? = TitleController()
    try bus.registerOnMainActor(owner: controller!, name: "controller", reads: ["doc.title"]) { controller, ctx in
      controller.label.text = try ctx.value("doc.title")?.description ?? ""
    }
    try bus.transaction { try bus.set("doc.title", .string("a")) }
    #expect(controller?.label.text == "string \"a\"")
    controller = nil
    try bus.transaction { try bus.set("doc.title", .string("b")) }
    #expect(bus.contracts().isEmpty)
  }

  /// Failure and trace handlers, end-of-pass hooks and rollback actions
  /// update main-actor state directly (no `assumeIsolated` here).
  @Test func hooksRunOnTheMainActor() throws {
    let bus = Bus()
    let label = TitleLabel()
    var log: [String] = []
    bus.onFailureOnMainActor { failure in log.append("failed \(failure.name) \(failure.transaction)") }
    bus.onTraceOnMainActor { trace in log.append("trace \(trace.transaction)") }
    try bus.registerOnMainActor(name: "broken", reads: ["doc.title"]) { ctx in
      try ctx.atEndOfPassOnMainActor { log.append("end of pass, label \(label.text)") }
      label.text = try ctx.value("doc.title")?.description ?? ""
      throw OrdoError(.internal, "no font")
    }
    bus.atEndOfPassOnMainActor { label.updates += 1 }
    try bus.transaction { try bus.set("doc.title", .string("a")) }
    #expect(log == ["failed broken 1", "trace 1", "end of pass, label string \"a\""])
    #expect(label.updates == 1)

    bus.begin()
    try bus.onRollbackOnMainActor { label.text = "restored" }
    try bus.rollback()
    #expect(label.text == "restored")
    bus.onFailureOnMainActor(nil)
    bus.onTraceOnMainActor(nil)
  }
}
