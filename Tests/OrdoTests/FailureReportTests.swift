import Foundation
import Testing

import Ordo

/// A contract that always fails.
private func registerBroken(_ bus: Bus, _ name: String) throws {
  try bus.register(name: name, reads: ["in"]) { (_: ContractContext) in throw OrdoError(.internal, "out of paper") }
}

/// What `body` writes to standard error (file descriptor 2).
private func standardError(_ body: () throws -> Void) rethrows -> String {
  var fds: [Int32] = [0, 0]
  precondition(pipe(&fds) == 0)
  let saved = dup(2)
  dup2(fds[1], 2)
  defer {
    dup2(saved, 2)
    close(saved)
  }
  try body()
  dup2(saved, 2)
  close(fds[1])
  let text = FileHandle(fileDescriptor: fds[0], closeOnDealloc: true).readDataToEndOfFile()
  return String(decoding: text, as: UTF8.self)
}

@Suite(.serialized) struct FailureReportTests {
  @Test func withoutAHandlerFailuresGoToStandardErrorRateLimited() throws {
    let bus = Bus()
    try registerBroken(bus, "printer")
    let first = try standardError {
      for i in 1...15 { try bus.transaction { try bus.set("in", .int64(Int64(i))) } }
    }
    let lines = first.split(separator: "\n").filter { $0.contains("\"printer\"") }
    #expect(lines.count == 10, "\(first)")
    #expect(lines.first == "ordo: contract \"printer\" failed in transaction 1: INTERNAL: out of paper (set Bus.onFailure to handle failures)")
    Thread.sleep(forTimeInterval: 1.05)
    let later = try standardError { try bus.transaction { try bus.set("in", .int64(16)) } }
    #expect(later.contains("ordo: 5 more callback failures were not written (at most 10 a second)\nordo: contract \"printer\" failed in transaction 16"), "\(later)")
    #expect(bus.statistics.failures == 16)
  }

  @Test func aHandlerReplacesTheReport() throws {
    let bus = Bus()
    try registerBroken(bus, "handled")
    let seen = Box<[String]>([])
    bus.onFailure { seen.value.append("\($0.name) \($0.transaction)") }
    let text = try standardError { try bus.transaction { try bus.set("in", .int64(1)) } }
    #expect(!text.contains("\"handled\""))
    #expect(seen.value == ["handled 1"])
  }

  /// The handler runs at the failed contract's turn: a registration it
  /// makes with notifyInitial whose position is before that turn is
  /// ORDER_CONFLICT (SPEC §5), one after it is called in the same pass.
  @Test func aHandlerRegistersAtTheFailedContractsPosition() throws {
    let bus = Bus()
    let order = Box<[String]>([])
    try bus.register(name: "A", reads: ["a"], priority: 1) { (_: ContractContext) in
      order.value.append("A")
      throw OrdoError(.internal, "A fails")
    }
    try bus.register(name: "B", reads: ["a"], priority: 3) { (_: ContractContext) in order.value.append("B") }
    let refusals = Box<[OrdoError.Code]>([])
    bus.onFailure { _ in
      for (name, priority) in [("early", Int32(0)), ("late", Int32(2))] {
        do {
          try bus.register(name: name, reads: ["x"], priority: priority, flags: .notifyInitial) { (_: ContractContext) in
            order.value.append(name)
          }
        } catch let e as OrdoError { refusals.value.append(e.code) } catch { Issue.record("not an OrdoError: \(error)") }
      }
    }
    try bus.transaction { try bus.set("a", .int64(1)) }
    #expect(refusals.value == [.orderConflict])
    #expect(order.value == ["A", "late", "B"])
  }

  #if DEBUG
    @Test func trapInDebugStopsTheProgram() async {
      await #expect(processExitsWith: .failure) {
        let bus = Bus()
        bus.failurePolicy = .trapInDebug
        try registerBroken(bus, "fatal")
        try bus.transaction { try bus.set("in", .int64(1)) }
      }
    }
  #endif

  @Test func theDefaultPolicyReports() {
    #expect(Bus().failurePolicy == .report)
  }
}
