import Foundation
import Testing

@testable import Ordo

/// An owner of contracts, as a view controller is.
final class ViewOwner: Sendable {
  let name: String
  let calls = Box<Int>(0)
  init(_ name: String) { self.name = name }
}

@Suite struct OwnerTests {
  @Test func theContractIsCalledWithItsOwnerWhileItLives() throws {
    let bus = Bus()
    let owner = ViewOwner("view")
    try bus.register(owner: owner, name: "view", reads: ["doc.title"]) { owner, ctx in
      owner.calls.value += 1
      #expect(owner.name == "view" && ctx.changed == ["doc.title"])
    }
    try bus.transaction { try bus.set("doc.title", .string("a")) }
    #expect(owner.calls.value == 1)
  }

  @Test func aDeallocatedOwnersContractIsNotCalledAndIsRemoved() throws {
    let bus = Bus()
    var owner: ViewOwner? = ViewOwner("view")
    weak let gone = owner
    let calls = Box<Int>(0)
    try bus.register(owner: owner!, name: "view", reads: ["doc.title"]) { _, _ in calls.value += 1 }
    try bus.transaction { try bus.set("doc.title", .string("a")) }
    #expect(calls.value == 1)
    owner = nil
    #expect(gone == nil, "the bus keeps no strong reference to the owner")
    #expect(bus.contracts().isEmpty, "a dead owner's contract is no longer listed")
    try bus.transaction { try bus.set("doc.title", .string("b")) }
    #expect(calls.value == 1)
    #expect(bus.contracts().isEmpty)
    #expect(bus.statistics.failures == 0)
  }

  @Test func anOwnerReleasedDuringAPassIsNotCalledLaterInIt() throws {
    let bus = Bus()
    let holder = Box<ViewOwner?>(ViewOwner("late"))
    let log = Box<[String]>([])
    try bus.register(name: "early", reads: ["a"], priority: -1) { _ in
      log.value.append("early")
      holder.value = nil  // the last strong reference goes, mid-pass
    }
    try bus.register(owner: holder.value!, name: "late", reads: ["a"]) { _, _ in log.value.append("late") }
    try bus.register(name: "after", reads: ["a"]) { _ in log.value.append("after") }
    try bus.transaction { try bus.set("a", .int64(1)) }
    #expect(log.value == ["early", "after"])
    #expect(bus.contracts().map(\.name) == ["early", "after"])
  }

  @Test func theNextOwnerBoundRegistrationSweepsDeadOwners() throws {
    let bus = Bus()
    var first: ViewOwner? = ViewOwner("a")
    try bus.register(owner: first!, name: "a", reads: ["x"]) { _, _ in }
    try bus.register(owner: first!, name: "b", reads: ["y"]) { _, _ in }
    first = nil
    #expect(bus.contracts().isEmpty)
    let second = ViewOwner("c")
    try bus.register(owner: second, name: "c", reads: ["x"]) { _, _ in }
    #expect(bus.contracts().map(\.name) == ["c"])
    #expect(bus.removeContractsOfDeallocatedOwners() == 0)
    withExtendedLifetime(second) {}
  }

  /// A dead owner's contract goes at the next commit, whatever it changed,
  /// and is no longer listed from the moment its owner is gone.
  @Test func theNextCommitRemovesDeadOwnersContracts() throws {
    let bus = Bus()
    var owner: ViewOwner? = ViewOwner("view")
    try bus.register(owner: owner!, name: "view", reads: ["doc.title"]) { _, _ in }
    try bus.register(name: "other", reads: ["doc.other"]) { _ in }
    owner = nil
    #expect(bus.contracts().map(\.name) == ["other"])
    #expect(!bus.graph().contains("view"))
    try bus.transaction { try bus.set("doc.other", .int64(1)) }
    #expect(bus.statistics.contracts == 1, "unregistered by the commit")
    #expect(bus.removeContractsOfDeallocatedOwners() == 0)
  }

  /// Several instances of one view class: names derived from the type, the
  /// role and the instance number, the same in contracts(), the graph, the
  /// trace and failures.
  @Test func namesDerivedFromTheOwnersTypeRoleAndInstance() throws {
    let bus = Bus()
    let first = ViewOwner("first"), second = ViewOwner("second")
    try bus.register(owner: first, role: "titleUpdated", reads: ["doc.title"]) { owner, _ in owner.calls.value += 1 }
    try bus.register(owner: second, role: "titleUpdated", reads: ["doc.title"]) { owner, _ in owner.calls.value += 1 }
    try bus.register(owner: first, role: "broken", reads: [Pattern("doc.title")]) { _, _ in throw OrdoError(.internal, "no") }
    let names = ["ViewOwner.titleUpdated#1", "ViewOwner.titleUpdated#2", "ViewOwner.broken#1"]
    #expect(bus.contracts().map(\.name) == names)
    #expect(names.allSatisfy { bus.graph().contains("\"c:\($0)\"") })
    let traced = Box<[String]>([])
    let failed = Box<[String]>([])
    bus.onTrace { trace in traced.value = trace.steps.map(\.name) }
    bus.onFailure { failed.value.append($0.name) }
    try bus.transaction { try bus.set("doc.title", .string("a")) }
    #expect(traced.value == names)
    #expect(failed.value == ["ViewOwner.broken#1"])
    #expect(first.calls.value == 1 && second.calls.value == 1)
    expectError(.duplicateName, ["ViewOwner.titleUpdated#2"]) {
      try bus.register(owner: second, role: "titleUpdated", reads: ["doc.title"]) { _, _ in }
    }
  }

  @Test func anOwnerBoundContractCanUnregisterAndWriteThroughItsContext() throws {
    let bus = Bus()
    let owner = ViewOwner("o")
    try bus.register(owner: owner, name: "once", reads: ["a"], writes: ["b"]) { owner, ctx in
      owner.calls.value += 1
      try ctx.set("b", .int64(1))
      try ctx.unregister()
    }
    try bus.transaction { try bus.set("a", .int64(1)) }
    try bus.transaction { try bus.set("a", .int64(2)) }
    #expect(owner.calls.value == 1)
    #expect(try bus.value("b") == .int64(1))
    #expect(bus.contracts().isEmpty)
    #expect(bus.removeContractsOfDeallocatedOwners() == 0)
  }

  @Test func anInitialCallWithADeadOwnerCannotHappen() throws {
    // The owner is alive during registration: the initial call sees it.
    let bus = Bus()
    let owner = ViewOwner("o")
    try bus.register(owner: owner, name: "init", reads: ["a"], flags: .notifyInitial) { owner, ctx in
      owner.calls.value += 1
      #expect(ctx.isInitial)
    }
    #expect(owner.calls.value == 1)
  }
}

/// Owned values (SPEC §15) and the writes after an owned set: the last
/// write of a keypath in a transaction decides whether its value is owned.
@Suite struct OwnedValueWriteTests {
  /// A bus whose persistence layer records, with each commit, whether each
  /// changed keypath is owned after it (keypath → owned).
  func recording() -> (Bus, Box<[String: Bool]>) {
    let bus = Bus()
    let stored = Box<[String: Bool]>([:])
    bus.setCommitHook { _, changes in stored.mutate { for k in changes { $0[k.keypath] = k.owned } } }
    return (bus, stored)
  }

  @Test func aCallbacksPlainWriteInThePassEndsTheOwnership() throws {
    let (bus, stored) = recording()
    try bus.register(name: "writer", reads: ["go"], writes: ["x", "y", "z"]) { _ in
      try bus.set("x", .int64(1))  // the same value
      try bus.set("y", .string("plain"))
      try bus.remove("z")
    }
    let owner = Owner(bus, name: "o")
    try bus.transaction(owner: owner) { () throws(OrdoError) in
      for k in ["x", "y", "z", "w"] { try bus.set(k, .int64(1)) }
      try bus.touch("go")
    }
    #expect(try bus.ownedValues() == [OwnedValue(keypath: "w", owner: "o")])
    // z, set and removed, did not change: nothing to store.
    #expect(stored.value == ["x": false, "y": false, "go": false, "w": true])
    owner.release()
    #expect(try bus.value("x") == .int64(1))
    #expect(try bus.value("y") == .string("plain"))
    #expect(try bus.value("w") == nil)
  }

  @Test func anOwnerReleasedInTheTransactionOfItsSetsTakesThemAway() throws {
    let (bus, stored) = recording()
    let owner = Owner(bus, name: "o")
    let other = Owner(bus, name: "other")
    bus.begin()
    try bus.begin(owner: owner)
    for k in ["a", "b", "c"] { try bus.set(k, .int64(1)) }
    try bus.commit()
    try bus.set("b", .int64(2))  // plain: no longer the owner's
    try bus.transaction(owner: other) { () throws(OrdoError) in try bus.set("c", .int64(3)) }  // handed over
    owner.release()
    try bus.commit()
    #expect(try bus.value("a") == nil)
    #expect(try bus.value("b") == .int64(2))
    #expect(try bus.ownedValues() == [OwnedValue(keypath: "c", owner: "other")])
    #expect(stored.value == ["b": false, "c": true])
  }

  @Test func aReleaseLeavesWhatAPlainWriteOfItsTransactionTookAway() throws {
    let bus = Bus()
    let owner = Owner(bus, name: "o")
    try bus.transaction(owner: owner) { () throws(OrdoError) in
      for k in ["a", "b", "c"] { try bus.set(k, .int64(1)) }
    }
    try bus.transaction { () throws(OrdoError) in
      try bus.set("b", .int64(2))  // plain: no longer the owner's
      try bus.touch("c")  // a touch leaves the ownership
      owner.release()
    }
    #expect(try bus.value("a") == nil && bus.value("c") == nil)
    #expect(try bus.value("b") == .int64(2))
    #expect(try bus.ownedValues().isEmpty)
  }

  @Test func aPlainWriteAfterTheOwnedScopeInTheSameTransactionEndsTheOwnership() throws {
    let (bus, stored) = recording()
    let owner = Owner(bus, name: "o")
    let property = try bus.property("p", as: Int64.self)
    let handle = try bus.resolve("h")
    bus.begin()
    try bus.begin(owner: owner)
    for k in ["held", "boxed", "p", "h", "kept"] { try bus.set(k, .int64(1)) }
    try bus.commit()
    // Plain now: a scalar set, held back until the commit; a boxed one; a
    // typed property's and a handle's (held back too).
    try bus.set("held", .int64(2))
    try bus.set("boxed", .string("plain"))
    try property.set(2)
    try bus.set(handle, .int64(2))
    try bus.commit()
    #expect(try bus.ownedValues() == [OwnedValue(keypath: "kept", owner: "o")])
    #expect(stored.value == ["held": false, "boxed": false, "p": false, "h": false, "kept": true])
    owner.release()
    #expect(try bus.value("held") == .int64(2))
    #expect(try bus.value("boxed") == .string("plain"))
    #expect(try bus.value("p") == .int64(2))
    #expect(try bus.value("h") == .int64(2))
    #expect(try bus.value("kept") == nil)
  }

  @Test func anOwnedWriteAfterAPlainOneInTheSameTransactionOwns() throws {
    let (bus, stored) = recording()
    let a = Owner(bus, name: "a")
    let b = Owner(bus, name: "b")
    bus.begin()
    try bus.set("x", .int64(1))
    try bus.set("y", .int64(1))
    try bus.begin(owner: a)
    try bus.set("x", .int64(2))
    try bus.set("y", .int64(2))
    try bus.commit()
    // Plain, then owned again, then by another owner.
    try bus.set("x", .int64(3))
    try bus.begin(owner: a)
    try bus.set("x", .int64(4))
    try bus.commit()
    try bus.begin(owner: b)
    try bus.set("y", .int64(3))
    try bus.commit()
    try bus.commit()
    #expect(try bus.ownedValues() == [OwnedValue(keypath: "x", owner: "a"), OwnedValue(keypath: "y", owner: "b")])
    #expect(stored.value == ["x": true, "y": true])
    a.release()
    #expect(try bus.value("x") == nil)
    #expect(try bus.value("y") == .int64(3))
  }

  @Test func aRefusedReleaseIsReportedAndItsValuesStayOwned() throws {
    let bus = Bus()
    let refusing = Box(false)
    bus.setCommitHook { _, _ in
      if refusing.value { throw OrdoError(.storage, "disk full") }
    }
    let failures = Box<[ContractFailure]>([])
    bus.onFailure { f in failures.mutate { $0.append(f) } }
    let owner = Owner(bus, name: "o")
    try bus.transaction(owner: owner) { () throws(OrdoError) in try bus.set("x", .int64(1)) }
    refusing.value = true
    owner.release()
    #expect(failures.value.map(\.name) == ["owner \"o\""])
    #expect(failures.value.first.map { $0.contract == 0 && $0.transaction == 0 && $0.message.contains("disk full") } == true)
    #expect(try bus.value("x") == .int64(1))
    #expect(bus.transactionID == 1)
    #expect(try bus.ownedValues() == [OwnedValue(keypath: "x", owner: "(no live owner)")])
    // The placeholder's release (the next restart's) removes it.
    refusing.value = false
    #expect(bus.releaseRestoredOwnedValues() == 2)
    #expect(try bus.value("x") == nil)
    #expect(try bus.ownedValues().isEmpty)
  }

  @Test func aReleaseInATransactionRolledBackLeavesItsValuesOwned() throws {
    let bus = Bus()
    let failures = Box(0)
    bus.onFailure { _ in failures.value += 1 }
    let owner = Owner(bus, name: "o")
    try bus.transaction(owner: owner) { () throws(OrdoError) in try bus.set("x", .int64(1)) }
    bus.begin()
    owner.release()
    #expect(try bus.value("x") == nil)
    try bus.rollback()
    #expect(failures.value == 0, "the caller that rolled back knows")
    #expect(try bus.value("x") == .int64(1))
    #expect(try bus.ownedValues() == [OwnedValue(keypath: "x", owner: "(no live owner)")])
    // A plain write ends that ownership as any other.
    try bus.transaction { () throws(OrdoError) in try bus.set("x", .int64(1)) }
    #expect(try bus.ownedValues().isEmpty)
  }
}
