import Synchronization

#if canImport(Glibc)
import Glibc
#endif

private let stopFlag = Atomic<Bool>(false)

/// SIGINT/SIGTERM end `watch` cleanly (its contract goes with the connection).
func installStopHandlers() {
  signal(SIGPIPE, SIG_IGN)
  signal(SIGINT) { _ in stopFlag.store(true, ordering: .relaxed) }
  signal(SIGTERM) { _ in stopFlag.store(true, ordering: .relaxed) }
}

func stopRequested() -> Bool { stopFlag.load(ordering: .relaxed) }
