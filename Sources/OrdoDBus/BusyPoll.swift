// Busy polling after a sync: how the service waits right after the
// acknowledgements a sync allowed went out (SPEC §11).
#if canImport(Glibc)
import Glibc
#endif

/// How long the service keeps polling its connections after a sync, before
/// it sleeps until the next message.
///
/// A writer that waits for its `Commit` reply sends its next `Commit` a few
/// tens of microseconds after the reply. A service that blocks as soon as
/// the reply is out leaves its CPU idle in between, and the next `Commit`
/// then waits for the service to be woken: where an idle CPU halts (a
/// virtual machine without halt polling), that wake-up is a large part of
/// a durable write's cost beyond its sync. Polling for a
/// moment first keeps the CPU awake; between two polls the CPU goes to any
/// other runnable thread (`sched_yield`), so a writer on the same CPU runs
/// at once rather than waiting behind the poll. What it gains on durable
/// write-and-wait, over a direct connection and through the bus daemon,
/// is measured in docs/measurements/2026-12-04-busy-poll.md. The price: up
/// to `limit` of CPU after each sync that no message follows.
///
/// Only ``DBusService/run()`` polls: a host that drives
/// ``DBusService/dispatch(timeoutMs:)`` from its own loop decides how it
/// waits.
struct BusyPoll {
  /// The longest a poll lasts (zero: the service sleeps at once).
  let limit: Duration

  /// The default limit (`ordod --busy-poll-us`).
  static let defaultLimit = Duration.microseconds(50)

  /// `d` in nanoseconds.
  static func nanoseconds(_ d: Duration) -> Int64 {
    let (seconds, attoseconds) = d.components
    return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
  }

  /// Returns once `fd` (the service's epoll descriptor) is readable, or
  /// after `limit`.
  func wait(for fd: Int32) {
    guard limit > .zero else { return }
    let clock = ContinuousClock()
    let deadline = clock.now.advanced(by: limit)
    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    while poll(&p, 1, 0) == 0 && clock.now < deadline {
      sched_yield()
    }
  }
}
