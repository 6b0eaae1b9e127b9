// Pass traces over D-Bus (docs/devtools.md): `SubscribeTrace`,
// `UnsubscribeTrace`, and the bus's trace hook that sends `Trace` signals.
import CDBus
import Ordo

extension DBusService {
  /// `SubscribeTrace(as patterns)`: from now on the caller is sent a
  /// `Trace` signal for every pass with a keypath matching one of
  /// `patterns` (a new call replaces them), filtered to what it may read.
  func subscribeTrace(_ c: Call) throws(OrdoServiceError) -> DBusMessageRef? {
    var r = c.m.reader()
    let texts = try r.stringArray("patterns", limit: limits.maxKeypathsPerCall)
    guard !texts.isEmpty else {
      throw .ordo(OrdoError(.invalidArgument, "SubscribeTrace: no pattern; pass \"**\" for every pass"))
    }
    guard texts.count <= TraceSubscribers.maxPatterns else {
      throw .ordo(OrdoError(.limit, "SubscribeTrace: \(texts.count) patterns, more than \(TraceSubscribers.maxPatterns)"))
    }
    var patterns: [Pattern] = []
    for p in texts {
      do { patterns.append(try Pattern(p)) } catch { throw .ordo(error) }
    }
    // Its identity, for the read filter, even when no policy is in force
    // yet (one may be loaded later).
    let identity = c.access.peer ?? (try? self.identity(of: c.sender))
    guard let before = traces.set(c.sender, .init(patterns: patterns, identity: identity)) else {
      throw .ordo(OrdoError(.limit, "SubscribeTrace: \(TraceSubscribers.maxSubscribers) peers already receive traces"))
    }
    if before == 0 {
      traceListener.withLock { key in
        if key == nil { key = bus.addTraceListener { [weak self] t in self?.sendTrace(t) } }
      }
      log(.info, "\(c.sender) subscribed to pass traces of [\(texts.joined(separator: ", "))]: tracing on")
    } else {
      log(.info, "\(c.sender) subscribed to pass traces of [\(texts.joined(separator: ", "))]")
    }
    return c.m.methodReturn { _ in }
  }

  /// `UnsubscribeTrace()`: no more `Trace` signals (nothing if none were asked for).
  func unsubscribeTrace(_ c: Call) -> DBusMessageRef? {
    dropTraceSubscriber(c.sender)
    return c.m.methodReturn { _ in }
  }

  /// Forgets `peer`'s trace subscription; the last one removes the bus's
  /// trace hook (a pass then records nothing).
  func dropTraceSubscriber(_ peer: String) {
    let (removed, left) = traces.remove(peer)
    guard removed else { return }
    if left == 0 { dropTraceListener() }
    log(.info, "\(peer) no longer receives pass traces\(left == 0 ? ": tracing off" : "")")
  }

  /// Removes the service's trace listener from the bus (the host's own
  /// `onTrace` handler, if any, stays).
  func dropTraceListener() {
    traceListener.withLock { key in
      if let k = key { bus.removeTraceListener(k) }
      key = nil
    }
  }

  /// The bus's trace hook: sends each subscriber its view of the pass.
  /// Runs on the committing thread, after the pass.
  func sendTrace(_ trace: PassTrace) {
    let subscribers = traces.all
    if subscribers.isEmpty { return }
    let policy = policyOn.load(ordering: .relaxed) ? policyBox.withLock({ $0 }) : nil
    for (peer, s) in subscribers {
      let filter = policy.map { p in s.identity.map { p.readable(by: $0) } ?? ReadFilter(allow: [], deny: []) }
      guard let view = TraceSubscribers.view(trace, patterns: s.patterns, filter: filter),
        let m = traces.signal(view, to: peer, maxBytes: limits.maxMessageBytes)
      else { continue }
      traces.sent.add(1, ordering: .relaxed)
      link.send(m, droppable: true)
    }
  }
}
