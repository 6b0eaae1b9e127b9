import Synchronization

/// One notification of an observer contract, as a ``ChangeStream``
/// delivers it: what the callback would have received, the values its
/// changed keypaths held right after the contract's turn in the pass, and
/// how many notifications the stream dropped just before this one.
public struct ObservedChange: Sendable, Hashable {
  /// The transaction id (the last committed id for the initial element).
  public let transaction: UInt64
  /// The observer contract's id.
  public let contract: ContractID
  /// The changed keypaths that affect the stream's read set; empty for the
  /// initial element (``ContractFlags/notifyInitial``).
  public let changed: ChangedKeypaths
  /// The values of the changed keypaths that held one at the contract's
  /// turn; a changed keypath missing here was removed (or only touched).
  public let values: [String: Value]
  /// How many notifications were dropped, oldest first, because the buffer
  /// was full, between the previous element and this one (0 normally).
  /// After a drop, catch up with ``Bus/changes(since:_:)-(_,[String])`` from the last
  /// transaction you handled.
  public let droppedBefore: Int
}

/// An `AsyncSequence` of one observer contract's notifications, for work
/// done asynchronously (SPEC §13). Made by
/// ``Bus/observe(name:reads:priority:flags:bufferLimit:)-(_,[String],_,_,_)``.
///
/// ```swift
/// let titles = try bus.observe(name: "title-log", reads: ["doc.title"])
/// Task {
///   for await change in titles { print(change.transaction, change.values) }
/// }
/// ```
///
/// - **Once per transaction.** The stream's contract is an ordinary data
///   contract with an empty write set: called at most once per
///   transaction, in the pass's order; each call becomes one element.
/// - **Buffering.** The pass never waits for the consumer: each call
///   appends to a buffer of at most `bufferLimit` elements. When the buffer
///   is full the **oldest** element is dropped; the next element delivered
///   says how many were dropped before it (``ObservedChange/droppedBefore``)
///   and ``dropped`` counts them all. A consumer that sees a drop can catch
///   up with ``Bus/changes(since:_:)-(_,[String])``.
/// - **Ending.** Cancelling the task that iterates, calling ``cancel()``,
///   or releasing the stream and every iterator of it unregisters the
///   contract; iteration then ends (`next()` returns nil) once the buffered
///   elements are consumed — at once on cancellation.
/// - One consumer: the elements are shared among the iterators of one
///   stream (each element goes to one of them).
public struct ChangeStream: AsyncSequence, Sendable {
  /// The stream's elements.
  public typealias Element = ObservedChange
  /// Iteration does not throw.
  public typealias Failure = Never

  let core: StreamCore

  /// The observer contract's id (see ``Bus/contract(_:)``).
  public var contract: ContractID { core.contract }

  /// Notifications dropped so far because the buffer was full.
  public var dropped: Int { core.state.withLock { $0.droppedTotal } }

  /// Unregisters the contract and ends the iteration at once.
  public func cancel() { core.cancel(discardBuffered: true) }

  /// Makes an iterator.
  public func makeAsyncIterator() -> Iterator { Iterator(core: core) }

  /// Iterates a ``ChangeStream``.
  public struct Iterator: AsyncIteratorProtocol, Sendable {
    let core: StreamCore

    /// The next element; nil once the stream ended or the task was
    /// cancelled (which unregisters the contract).
    public mutating func next() async -> ObservedChange? {
      await core.next()
    }

    /// The next element, on the caller's actor. See ``next()``.
    public mutating func next(isolation actor: isolated (any Actor)?) async -> ObservedChange? {
      await core.next()
    }
  }
}

/// The shared state of a stream: the buffer and the waiting consumer.
final class StreamCore: Sendable {
  struct State {
    var buffer: [ObservedChange] = []
    var head = 0
    var waiting: CheckedContinuation<ObservedChange?, Never>?
    var finished = false
    var droppedSince = 0
    var droppedTotal = 0

    var count: Int { buffer.count - head }

    mutating func pop() -> ObservedChange {
      let e = buffer[head]
      head += 1
      if head > 64 && head * 2 > buffer.count {
        buffer.removeFirst(head)
        head = 0
      }
      return e
    }
  }

  let state = Mutex(State())
  let limit: Int
  let link: BusLink
  private let id = Atomic<UInt64>(0)

  init(limit: Int, link: BusLink) {
    self.limit = limit
    self.link = link
  }

  var contract: ContractID { id.load(ordering: .acquiring) }
  func setContract(_ c: ContractID) { id.store(c, ordering: .releasing) }

  /// A call of the contract: buffer it, or hand it to the waiting consumer.
  func deliver(_ note: ContractNotification, _ values: [String: Value]) {
    state.withLock { s in
      guard !s.finished else { return }
      // Drops are counted at the head of the buffer (see ``take(_:)``).
      let e = ObservedChange(transaction: note.transaction, contract: note.contract, changed: note.changed, values: values, droppedBefore: 0)
      if let w = s.waiting {
        s.waiting = nil
        w.resume(returning: e)
        return
      }
      if s.count >= limit {
        _ = s.pop()
        s.droppedSince += 1
        s.droppedTotal += 1
      }
      s.buffer.append(e)
    }
  }

  func next() async -> ObservedChange? {
    if let e = poll() { return e ?? nil }
    return await withTaskCancellationHandler {
      await withCheckedContinuation { (c: CheckedContinuation<ObservedChange?, Never>) in
        state.withLock { s in
          if s.count > 0 {
            c.resume(returning: take(&s))
          } else if s.finished || s.waiting != nil {
            c.resume(returning: nil)
          } else {
            s.waiting = c
          }
        }
      }
    } onCancel: {
      cancel(discardBuffered: true)
    }
  }

  /// An element at once, `.some(nil)` when the stream ended, nil when the
  /// consumer must wait.
  private func poll() -> ObservedChange?? {
    if Task.isCancelled {
      cancel(discardBuffered: true)
      return .some(nil)
    }
    return state.withLock { s -> ObservedChange?? in
      if s.count > 0 { return .some(take(&s)) }
      if s.finished { return .some(nil) }
      return nil
    }
  }

  /// Pops the head, with the drops that happened before it.
  private func take(_ s: inout State) -> ObservedChange {
    let e = s.pop()
    guard s.droppedSince > 0 else { return e }
    defer { s.droppedSince = 0 }
    return ObservedChange(
      transaction: e.transaction, contract: e.contract, changed: e.changed, values: e.values,
      droppedBefore: s.droppedSince)
  }

  /// Ends the stream and unregisters its contract.
  func cancel(discardBuffered: Bool) {
    let waiter: CheckedContinuation<ObservedChange?, Never>? = state.withLock { s in
      s.finished = true
      if discardBuffered {
        s.buffer.removeAll()
        s.head = 0
      }
      defer { s.waiting = nil }
      return s.waiting
    }
    waiter?.resume(returning: nil)
    let c = contract
    if c != 0, let bus = link.bus { try? bus.unregister(c) }
  }

  deinit {
    let c = contract
    if c != 0, let bus = link.bus { try? bus.unregister(c) }
  }
}

extension Bus {
  /// Registers an observer contract — a data contract with an empty write
  /// set — and returns its notifications as an `AsyncSequence` (see
  /// ``ChangeStream`` for the buffering policy and how it ends).
  ///
  /// - Parameters:
  ///   - name: the contract's name, unique on the bus.
  ///   - reads: the read patterns (not empty).
  ///   - priority: nil for a data contract (the usual observer), else its
  ///     priority.
  ///   - bufferLimit: the most undelivered elements kept (at least 1);
  ///     beyond it the oldest is dropped.
  ///   - flags: ``ContractFlags/notifyInitial`` makes the first element an
  ///     initial one (empty `changed`).
  /// - Throws: ``OrdoError/Code/invalidArgument`` for a limit below 1 or an
  ///   empty read set (every-transaction streams are not offered: use a
  ///   read set of `**`); like ``register(_:)``.
  public func observe(
    name: String, reads: [String], priority: Int32? = nil, flags: ContractFlags = [], bufferLimit: Int = 256
  ) throws(OrdoError) -> ChangeStream {
    guard bufferLimit >= 1 else {
      throw OrdoError(.invalidArgument, "the buffer limit of stream \"\(name)\" is \(bufferLimit); it must be at least 1")
    }
    guard !reads.isEmpty else {
      throw OrdoError(.invalidArgument, "stream \"\(name)\" has an empty read set; observe \"**\" to see every change")
    }
    let core = StreamCore(limit: bufferLimit, link: link)
    let handle = try register(name: name, reads: reads, priority: priority, flags: flags, callback: { [weak core, link] note in
      guard let core, let bus = link.bus else { return }
      core.deliver(note, bus.values(of: note))
    })
    core.setContract(handle.id)
    return ChangeStream(core: core)
  }
}
