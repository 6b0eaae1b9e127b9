/// The bus's side of a persistence layer (OrdoStore): the hook that stores
/// each transaction, and the restore of a stored state.
extension Bus {
  /// Sets the function told about every transaction just before it commits,
  /// with its id and the state after it of every keypath it changed. It
  /// runs on the committing thread with the bus's lock held, after the
  /// pass's last callback; when it throws, the transaction is discarded
  /// (memory as before it) and `commit` throws ``OrdoError/Code/storage``.
  /// For persistence layers (OrdoStore); it must not call into the bus.
  package func setCommitHook(_ hook: ((UInt64, [KeyState]) throws -> Void)?) {
    withGate { passes.commitHook = hook }
  }

  /// Replaces the model (values, counters, changed-at), the last
  /// transaction id and the epoch with a stored state. Contracts stay.
  ///
  /// - Throws: ``OrdoError/Code/invalidArgument`` while a transaction is
  ///   open on any thread (it waits for other threads' transactions) or
  ///   when a keypath changed after `lastTransaction`;
  ///   ``OrdoError/Code/invalidKeypath``. Nothing changes when it throws.
  package func restore(epoch: String, lastTransaction: UInt64, keypaths: [KeyState]) throws(OrdoError) {
    try withGate { () throws(OrdoError) in
      let acquired = gate.acquire()
      defer { if acquired { gate.release() } }
      guard acquired, case .idle = gate.phase else {
        throw OrdoError(.invalidArgument, "restore while this thread has a transaction open: commit or roll it back first")
      }
      try store.restore(epoch: epoch, lastTransaction: lastTransaction, keypaths: keypaths)
    }
  }
}
