import Foundation
import Testing

@testable import Ordo

/// A value shared with callbacks (which are `@Sendable`), guarded by a lock.
final class Box<T>: @unchecked Sendable {
  private let lock = NSLock()
  private var stored: T
  init(_ value: T) { stored = value }
  var value: T {
    get { lock.withLock { stored } }
    set { lock.withLock { stored = newValue } }
  }
  func mutate<R>(_ body: (inout T) throws -> R) rethrows -> R {
    try lock.withLock { try body(&stored) }
  }
}

/// One recorded contract call.
struct Call: Equatable, CustomStringConvertible {
  let name: String
  let changed: [String]
  let txn: UInt64
  var description: String { "\(name)\(changed) txn \(txn)" }
}

/// Records contract calls in order; thread-safe.
final class Calls: @unchecked Sendable {
  private let box = Box<[Call]>([])
  func add(_ name: String, _ n: ContractNotification) {
    box.mutate { $0.append(Call(name: name, changed: Array(n.changed), txn: n.transaction)) }
  }
  var all: [Call] { box.value }
  var names: [String] { all.map(\.name) }
  /// Returns the calls recorded so far and forgets them.
  func take() -> [Call] { box.mutate { list in defer { list.removeAll() }; return list } }
  func takeNames() -> [String] { take().map(\.name) }
}

extension Bus {
  /// Registers a contract that records each call in `calls`, then runs `body`
  /// with the call's context (so that it need not capture the bus).
  @discardableResult
  func watch(
    _ calls: Calls, _ name: String, reads: [String], writes: [String] = [], priority: Int32? = nil,
    flags: ContractFlags = [], _ body: @escaping ContractBody = { _ in }
  ) throws -> ContractHandle {
    try register(name: name, reads: reads, writes: writes, priority: priority, flags: flags) { (ctx: ContractContext) in
      calls.add(name, ctx.notification)
      try body(ctx)
    }
  }

  /// Commits one transaction made of `body`'s writes; returns its id.
  @discardableResult
  func commitWith(_ body: () throws -> Void) throws -> UInt64 {
    try transaction(body)
  }
}

/// Runs `body`, expects it to throw an ``OrdoError`` with `code` whose
/// message contains every fragment; returns the error.
@discardableResult
func expectError(
  _ code: OrdoError.Code, _ fragments: [String] = [], sourceLocation: SourceLocation = #_sourceLocation,
  _ body: () throws -> Void
) -> OrdoError? {
  do {
    try body()
    Issue.record("expected \(code.name), but the call succeeded", sourceLocation: sourceLocation)
    return nil
  } catch let e as OrdoError {
    #expect(e.code == code, "got \(e)", sourceLocation: sourceLocation)
    for f in fragments {
      #expect(e.message.contains(f), "message \"\(e.message)\" should contain \"\(f)\"", sourceLocation: sourceLocation)
    }
    return e
  } catch {
    Issue.record("expected \(code.name), got \(error)", sourceLocation: sourceLocation)
    return nil
  }
}

/// The error code a call throws, or nil when it succeeds (for use inside
/// callbacks, where results are checked after the pass).
func codeOf(_ body: () throws -> Void) -> OrdoError.Code? {
  do {
    try body()
    return nil
  } catch let e as OrdoError {
    return e.code
  } catch {
    return .internal
  }
}

/// Starts `count` threads running `body(index)` and waits for all of them.
func runThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let done = DispatchSemaphore(value: 0)
  for i in 0..<count {
    let t = Thread {
      body(i)
      done.signal()
    }
    t.stackSize = 1 << 20
    t.start()
  }
  for _ in 0..<count { done.wait() }
}
