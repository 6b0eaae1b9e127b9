// The machinery behind the C ABI (include/ordo.h): the bus handle, contract
// bookkeeping (user data and destroy), the thread-local error message and
// argument conversion. The exported functions are in OrdoC.swift and
// DBus.swift.

import COrdo
import Ordo
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - Status and the thread-local error message

/// The thread-local key of the last error message (a `malloc`ed C string,
/// freed when replaced or when the thread exits).
private let errorKey: pthread_key_t = {
  var key = pthread_key_t()
  let rc = pthread_key_create(&key) { free($0) }
  precondition(rc == 0, "ordo: pthread_key_create failed")
  return key
}()

/// Records `message` as the calling thread's last error message.
func setLastError(_ message: String) {
  let old = pthread_getspecific(errorKey)
  pthread_setspecific(errorKey, strdup(message))
  free(old)
}

/// The calling thread's last error message ("" if none).
func lastErrorMessage() -> UnsafePointer<CChar> {
  if let p = pthread_getspecific(errorKey) { return UnsafePointer(p.assumingMemoryBound(to: CChar.self)) }
  return emptyCString
}

nonisolated(unsafe) private let emptyCString: UnsafePointer<CChar> = {
  let s: StaticString = ""
  return UnsafeRawPointer(s.utf8Start).assumingMemoryBound(to: CChar.self)
}()

/// The C status of an error code (the raw values are the same).
func status(_ code: OrdoError.Code) -> ordo_status {
  ordo_status(rawValue: UInt32(code.rawValue))
}

/// Records the error's message and returns its status.
func report(_ error: OrdoError) -> ordo_status {
  setLastError(error.message)
  return status(error.code)
}

/// Runs `body`, turning a thrown ``OrdoError`` into its status and message.
@inline(__always)
func guarded(_ body: () throws(OrdoError) -> Void) -> ordo_status {
  do {
    try body()
    return ORDO_OK
  } catch {
    return report(error)
  }
}

/// An `ORDO_E_INVALID_ARGUMENT` error.
func invalid(_ message: String) -> OrdoError { OrdoError(.invalidArgument, message) }

// MARK: - Arguments

/// The offset of the first byte of `p` that is not part of valid UTF-8, or
/// nil when the whole C string is valid.
func firstInvalidUTF8(_ p: UnsafePointer<CChar>) -> Int? {
  let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(p).assumingMemoryBound(to: UInt8.self), count: strlen(p))
  var iterator = bytes.makeIterator()
  var parser = Unicode.UTF8.ForwardParser()
  var offset = 0
  while true {
    switch parser.parseScalar(from: &iterator) {
    case .valid(let scalar): offset += scalar.count
    case .emptyInput: return nil
    case .error: return offset
    }
  }
}

/// The C string with every byte outside printable ASCII escaped as \xNN,
/// at most `limit` bytes, for messages about malformed input.
func escaped(_ p: UnsafePointer<CChar>, limit: Int = 80) -> String {
  var out = ""
  var n = 0
  var q = UnsafeRawPointer(p).assumingMemoryBound(to: UInt8.self)
  while q.pointee != 0 {
    if n == limit {
      out += "…"
      break
    }
    let b = q.pointee
    if b >= 0x20 && b < 0x7f && b != UInt8(ascii: "\\") {
      out.unicodeScalars.append(Unicode.Scalar(b))
    } else {
      out += "\\x" + (b < 16 ? "0" : "") + String(b, radix: 16)
    }
    n += 1
    q += 1
  }
  return out
}

/// A required UTF-8 string argument; `what` names it in messages.
/// NULL and invalid UTF-8 are `code` (INVALID_ARGUMENT unless told).
func stringArg(_ p: UnsafePointer<CChar>?, _ what: String, code: OrdoError.Code = .invalidArgument) throws(OrdoError) -> String {
  guard let p else { throw invalid("\(what) is NULL") }
  if let s = String(validatingCString: p) { return s }
  let at = firstInvalidUTF8(p) ?? 0
  let byte = UInt8(bitPattern: p[at])
  throw OrdoError(code, "\(what) \"\(escaped(p))\" is not valid UTF-8: byte \(at) (0x\(String(byte, radix: 16))) is not allowed")
}

/// The string value of a set of `keypath` (as messages name it): NULL and
/// invalid UTF-8 are INVALID_ARGUMENT.
func stringValue(_ utf8: UnsafePointer<CChar>?, for keypath: String) throws(OrdoError) -> Value {
  let what = "the string value for \"\(keypath)\""
  guard let utf8 else { throw invalid("\(what) is NULL (use \"\" for the empty string)") }
  return .string(try stringArg(utf8, what))
}

/// The bytes value of a set of `keypath` (as messages name it): `data` may
/// be NULL only when `len` is 0.
func bytesValue(_ data: UnsafeRawPointer?, _ len: Int, for keypath: String) throws(OrdoError) -> Value {
  if len == 0 { return .bytes([]) }
  guard len > 0 else { throw invalid("bytes length \(UInt(bitPattern: len)) for \"\(keypath)\" is too large") }
  guard let data else { throw invalid("bytes data for \"\(keypath)\" is NULL but its length is \(len)") }
  return .bytes(Array(UnsafeRawBufferPointer(start: data, count: len)))
}

/// A required keypath argument (validated by the core; here only NULL and
/// UTF-8).
@inline(__always)
func keypathArg(_ p: UnsafePointer<CChar>?) throws(OrdoError) -> String {
  try stringArg(p, "keypath", code: .invalidKeypath)
}

/// A required out pointer.
@inline(__always)
func outArg<T>(_ p: UnsafeMutablePointer<T>?, _ name: String) throws(OrdoError) -> UnsafeMutablePointer<T> {
  guard let p else { throw invalid("\(name) is NULL") }
  return p
}

/// An array of `n` C strings (NULL allowed when `n` is 0).
/// `owner` prefixes the names in messages ("spec->" for a contract spec's
/// fields, "" for a function's arguments).
func stringArray(
  _ array: UnsafePointer<UnsafePointer<CChar>?>?, _ n: Int, _ what: String, code: OrdoError.Code, owner: String = "spec->"
) throws(OrdoError) -> [String] {
  if n == 0 { return [] }
  guard n > 0 else { throw invalid("n_\(what) is \(UInt(bitPattern: n)), which is not a valid count") }
  guard let array else { throw invalid("\(owner)\(what) is NULL but \(owner)n_\(what) is \(n)") }
  var out: [String] = []
  out.reserveCapacity(n)
  for i in 0..<n {
    guard let p = array[i] else { throw invalid("\(owner)\(what)[\(i)] is NULL (\(owner)n_\(what) is \(n))") }
    out.append(try stringArg(p, "\(owner)\(what)[\(i)]", code: code))
  }
  return out
}

// MARK: - The bus handle

/// A pthread mutex (not movable: allocated once).
final class PMutex: @unchecked Sendable {
  private let m: UnsafeMutablePointer<pthread_mutex_t>

  init() {
    m = .allocate(capacity: 1)
    m.initialize(to: pthread_mutex_t())
    pthread_mutex_init(m, nil)
  }

  deinit {
    pthread_mutex_destroy(m)
    m.deallocate()
  }

  @inline(__always)
  func withLock<T>(_ body: () -> T) -> T {
    pthread_mutex_lock(m)
    defer { pthread_mutex_unlock(m) }
    return body()
  }
}

/// What an `ordo_bus *` points to: the core bus and the C contracts
/// registered on it. The handle is an `Unmanaged` reference retained by
/// `ordo_bus_new` and released by `ordo_bus_free`; contract callbacks hold
/// the handle unretained, so there is no cycle.
final class CBus: @unchecked Sendable {
  /// The core bus.
  let bus: Bus

  init(schema: Schema? = nil) { bus = schema.map(Bus.init(schema:)) ?? Bus() }

  /// The D-Bus publication of this bus (managed by DBus.swift); released
  /// before the bus when the bus is freed.
  var dbus: AnyObject?

  private let lock = PMutex()
  /// Registered C contracts by id (those whose id is known).
  private var contracts: [ContractID: CContract] = [:]
  /// Ids unregistered before their C contract learned its id (another
  /// thread guessing an id in the moment between the core's registration
  /// and ours).
  private var early: Set<ContractID> = []

  /// The bus behind a handle, or INVALID_ARGUMENT for NULL.
  static func from(_ handle: OpaquePointer?) throws(OrdoError) -> CBus {
    guard let handle else { throw invalid("bus is NULL") }
    return Unmanaged<CBus>.fromOpaque(UnsafeRawPointer(handle)).takeUnretainedValue()
  }

  /// Runs `body` with the bus behind a handle (INVALID_ARGUMENT for NULL)
  /// and returns its status, without retaining the bus: the caller's
  /// handle keeps it alive for the call (freeing a bus another thread still
  /// uses is the caller's bug, include/ordo.h). For the per-write entry
  /// points, where a retain and a release are a tenth of the cost.
  @inline(__always)
  static func with(_ handle: OpaquePointer?, _ body: (CBus) throws(OrdoError) -> Void) -> ordo_status {
    guard let handle else { return report(invalid("bus is NULL")) }
    return Unmanaged<CBus>.fromOpaque(UnsafeRawPointer(handle))._withUnsafeGuaranteedRef { box in
      guarded { () throws(OrdoError) in try body(box) }
    }
  }

  /// The handle of this bus, as C sees it.
  var handle: OpaquePointer { OpaquePointer(Unmanaged.passUnretained(self).toOpaque()) }

  /// Gives a registered contract its id. Returns whether it was unregistered
  /// already (its destroy is then due). Lock held.
  private func adopt(_ c: CContract, _ id: ContractID) -> Bool {
    guard c.id == 0 else { return false }
    c.id = id
    defer { c.adopted.store(true, ordering: .releasing) }
    if early.remove(id) != nil {
      c.live = false
      return true
    }
    contracts[id] = c
    return false
  }

  /// Called by ordo_register when the core accepted the contract.
  func registered(_ c: CContract, _ id: ContractID) {
    let due = lock.withLock { adopt(c, id) && c.takeDestroy() }
    if due { c.runDestroy() }
  }

  /// Called by ordo_unregister when the core removed contract `id`.
  func unregistered(_ id: ContractID) {
    let c: CContract? = lock.withLock {
      guard let c = contracts.removeValue(forKey: id) else {
        early.insert(id)
        return nil
      }
      c.live = false
      return c.takeDestroy() ? c : nil
    }
    c?.runDestroy()
  }

  /// Entering a callback before the contract has its id (the first call
  /// racing the registration, see ``CContract/enter(_:)``): returns false
  /// when the contract is gone.
  func enterSlow(_ c: CContract, _ id: ContractID) -> Bool {
    let (ok, due) = lock.withLock { () -> (Bool, Bool) in
      let due = adopt(c, id) && c.takeDestroy()
      guard c.live else { return (false, due) }
      c.running += 1
      return (true, false)
    }
    if due { c.runDestroy() }
    return ok
  }

  /// Leaving a callback of a contract that is no longer registered (see
  /// ``CContract/leave()``): runs a destroy deferred while it ran.
  func leaveSlow(_ c: CContract) {
    let due = lock.withLock { () -> Bool in
      c.running -= 1
      return !c.live && c.takeDestroy()
    }
    if due { c.runDestroy() }
  }

  /// Called by ordo_bus_free: the contracts still registered, in
  /// registration order, marked gone.
  func takeAll() -> [CContract] {
    lock.withLock {
      let all = contracts.values.sorted { $0.id < $1.id }
      contracts.removeAll()
      for c in all { c.live = false }
      return all
    }
  }
}

/// The `changed` array of a notification with no keypath: `{ NULL }`.
nonisolated(unsafe) private let noKeypaths: UnsafePointer<UnsafePointer<CChar>?> = {
  let p = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: 1)
  p.initialize(to: nil)
  return UnsafePointer(p)
}()

/// The largest notification buffer a contract keeps between calls (a larger
/// one, made for a notification with very many keypaths, is freed after it).
private let maxKeptBuffer = 1 << 16

/// A contract registered through the C ABI: its callback, user data and
/// destroy function, and the trampoline that calls the callback with an
/// `ordo_notification`. The core holds it through the callback closure.
final class CContract: @unchecked Sendable {
  // What a call reads: these fields, first (``callFields``), which the
  // contract is registered with, for a pass to fetch before it schedules
  // the contract. Spread over the object, a call read up to three lines of it
  // (callgrind's cache simulation of `ordo-c-bench 100000` with `scale`).
  /// Set (releasing) once ``id`` is set, under the owner's lock.
  let adopted = Atomic<Bool>(false)
  // Guarded by the owner's lock, or by the bus's transaction once adopted
  // (see ``enter(_:)``).
  var live = true
  var running: Int32 = 0
  let callback: ordo_callback
  let userData: UnsafeMutableRawPointer?
  /// The owner's handle, as the callback receives it.
  let bus: OpaquePointer
  let destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
  /// The bus, unretained: the core bus (and so this contract) never
  /// outlives it. Only the rare paths of a call touch it.
  unowned(unsafe) let owner: CBus
  var id: ContractID = 0
  private var destroyTaken = false

  // The buffer of a notification with several keypaths (the pointer array,
  // then the NUL-terminated keypaths), reused from call to call so that a
  // call allocates nothing once it has grown. Touched only by calls, which
  // run on the thread that owns the bus's transaction; `bufferBusy` marks
  // it in use (calls of one contract do not nest, but should one ever, it
  // gets a buffer of its own).
  private var buffer: UnsafeMutableRawPointer?
  private var bufferSize = 0
  private var bufferBusy = false

  init(owner: CBus, callback: ordo_callback, userData: UnsafeMutableRawPointer?, destroy: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?) {
    self.owner = owner
    bus = owner.handle
    self.callback = callback
    self.userData = userData
    self.destroy = destroy
  }

  deinit { free(buffer) }

  /// The bytes a call reads, from ``adopted`` to ``bus``: the object's
  /// first stored properties, after the 16-byte header of a Swift object
  /// (its metadata and reference counts). A prefetch hint only
  /// (``Bus/register(_:prefetching:)``): were the layout other, the pass
  /// would fetch a line in vain, nothing more.
  var callFields: UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()) + 16, count: 32)
  }

  /// Whether destroy is due now (gone, not running) and not yet taken; takes
  /// it. Owner's lock held.
  func takeDestroy() -> Bool {
    guard !live, running == 0, !destroyTaken else { return false }
    destroyTaken = true
    return true
  }

  /// Makes sure destroy is never called (a failed registration). Owner's
  /// lock not needed: the contract was never visible.
  func disarm() {
    live = false
    destroyTaken = true
  }

  func runDestroy() { destroy?(userData) }

  /// Entering a callback: returns false when the contract is gone.
  ///
  /// Once the contract has its id, entering and leaving need no lock: they
  /// run on the thread that owns the bus's transaction, and whatever else
  /// changes `live` or `running` (an unregistration from another thread,
  /// ordo_bus_free) waits for that transaction to end, which the bus's own
  /// lock orders before it. Only the rare paths (the first call racing the
  /// registration for the id, a destroy that comes due) take the owner's
  /// lock.
  @inline(__always)
  private func enter(_ id: ContractID) -> Bool {
    guard adopted.load(ordering: .acquiring) else { return owner.enterSlow(self, id) }
    guard live else { return false }
    running += 1
    return true
  }

  /// Leaving a callback: runs a destroy deferred while it ran.
  @inline(__always)
  private func leave() {
    guard live else { return owner.leaveSlow(self) }
    // Still registered: no destroy can be due (see ``enter(_:)``).
    running -= 1
  }

  /// Calls the C callback. The notification, the `changed` array and its
  /// strings are valid during the call only (include/ordo.h): one keypath
  /// is passed as the key node's own C string (made once per keypath) in a
  /// notification on the stack; several are copied into the contract's
  /// reusable buffer. Nothing is allocated per call.
  ///
  /// (The single keypath's notification was a block of each contract's,
  /// filled in place, which saved the stack frame a few instructions. At
  /// 100 000 contracts the block was out of cache, and the bus's lock,
  /// taken again after the call, waited for that store to reach it: a
  /// locked instruction drains the store buffer. A C commit of 10 random
  /// keypaths spent a fifth of its time there; docs/performance.md.)
  func invoke(_ note: ContractNotification) {
    guard enter(note.contract) else { return }
    assert(running == 1, "a C contract's calls nest")
    let changed = note.changed
    if let k = changed.onlyKeypathCString {
      var list: (UnsafePointer<CChar>?, UnsafePointer<CChar>?) = (k, nil)
      withUnsafePointer(to: &list) { p in
        var cnote = ordo_notification(
          txn: note.transaction, contract: note.contract,
          changed: UnsafeRawPointer(p).assumingMemoryBound(to: UnsafePointer<CChar>?.self), n_changed: 1)
        callback(bus, &cnote, userData)
      }
    } else {
      invokeOther(note, changed)
    }
    // Not a defer (an out-of-line call): nothing above throws.
    leave()
  }

  /// A call with no keypath or several: the notification on the stack.
  @inline(never)
  private func invokeOther(_ note: ContractNotification, _ changed: ChangedKeypaths) {
    // startIndex is 0: endIndex is the count, in one call.
    let n = changed.endIndex
    if n == 0 { call(note, noKeypaths, 0) } else { invokeMany(note, changed, n) }
  }

  @inline(__always)
  private func call(_ note: ContractNotification, _ changed: UnsafePointer<UnsafePointer<CChar>?>, _ n: Int) {
    var cnote = ordo_notification(txn: note.transaction, contract: note.contract, changed: changed, n_changed: n)
    callback(bus, &cnote, userData)
  }

  /// Calls the callback with several keypaths, laid out in one buffer: the
  /// NULL-terminated pointer array, then the strings. Each keypath is read
  /// once; the pointers are written as offsets first (the buffer may move
  /// while it grows) and made pointers at the end.
  @inline(never)
  private func invokeMany(_ note: ContractNotification, _ changed: ChangedKeypaths, _ n: Int) {
    let own = !bufferBusy
    var base = own ? buffer : nil
    var size = own ? bufferSize : 0
    if own { bufferBusy = true }
    let slot = MemoryLayout<UnsafePointer<CChar>?>.stride
    let pointerBytes = (n + 1) * slot
    var used = pointerBytes
    func reserve(_ need: Int) {
      guard need > size else { return }
      let grown = max(need, 2 * size, 256)
      guard let p = realloc(base, grown) else { fatalError("ordo: out of memory allocating \(grown) bytes") }
      base = p
      size = grown
    }
    reserve(pointerBytes + 32 * n)
    for i in 0..<n {
      var k = changed[i]
      k.withUTF8 { utf8 in
        reserve(used + utf8.count + 1)
        let dst = base! + used
        if let src = utf8.baseAddress { dst.copyMemory(from: src, byteCount: utf8.count) }
        dst.storeBytes(of: 0, toByteOffset: utf8.count, as: UInt8.self)
        base!.storeBytes(of: used, toByteOffset: i * slot, as: Int.self)
        used += utf8.count + 1
      }
    }
    let start = base!
    for i in 0..<n {
      let offset = start.load(fromByteOffset: i * slot, as: Int.self)
      let p: UnsafePointer<CChar>? = UnsafePointer((start + offset).assumingMemoryBound(to: CChar.self))
      start.storeBytes(of: p, toByteOffset: i * slot, as: UnsafePointer<CChar>?.self)
    }
    start.storeBytes(of: nil, toByteOffset: n * slot, as: UnsafePointer<CChar>?.self)
    call(note, UnsafePointer(start.bindMemory(to: UnsafePointer<CChar>?.self, capacity: n + 1)), n)
    guard own else { return free(start) }
    if size > maxKeptBuffer {
      free(start)
      buffer = nil
      bufferSize = 0
    } else {
      buffer = start
      bufferSize = size
    }
    bufferBusy = false
  }
}
