#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value guarded by a pthread mutex. Used instead of the standard
/// library's `Mutex`, whose contended path hands the lock over through the
/// kernel, out of ThreadSanitizer's sight: under contention `make tsan`
/// reports the accesses it orders as races (`concurrentCommitsShareSyncs`
/// contends). A pthread mutex is intercepted by the sanitizer; the cost of
/// a lock here (a few per transaction) is not on a hot path.
final class Locked<Value: ~Copyable>: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private var value: Value

  init(_ value: consuming Value) {
    self.value = value
    pthread_mutex_init(mutex, nil)
  }

  deinit {
    pthread_mutex_destroy(mutex)
    mutex.deallocate()
  }

  /// Runs `body` with the value, the mutex held.
  func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body(&value)
  }
}
