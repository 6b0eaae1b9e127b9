// Batches of writes for the C client (include/ordo.h "C client"): what
// ordo_client_commit sends as a Commit, and what a writer contract's
// callback answers with (its Complete). A batch made by ordo_writes_new
// belongs to the program; the batch of a writer belongs to its contract,
// is open only while the contract's callback runs, and checks each keypath
// against the contract's write set.

import COrdo
import Ordo
import OrdoDBus

/// What an `ordo_writes *` points to.
final class CWrites {
  /// The sets in the order given, a keypath set again replacing its value.
  private(set) var sets: [(String, Value)] = []
  private var setIndex: [String: Int] = [:]
  private(set) var touches: [String] = []
  /// Removals; a tree's is `k.**`, as the D-Bus Commit takes it.
  private(set) var removals: [String] = []
  /// The commit's conditions (keypath, counter) and whether its sets are
  /// owned (SPEC §15): a program's batch only; with either it is sent as
  /// `CommitWith`.
  private(set) var expect: [(String, UInt64)] = []
  var owned = false
  /// For a writer's answer: the contract's name and write set.
  let writer: (name: String, patterns: [Pattern])?
  /// Whether the batch takes writes: always for the program's own, only
  /// during its contract's callback for a writer's.
  var open: Bool

  init(writer: (name: String, patterns: [Pattern])? = nil) {
    self.writer = writer
    open = writer == nil
  }

  /// The batch behind a handle, or INVALID_ARGUMENT for NULL.
  static func from(_ handle: OpaquePointer?) throws(OrdoError) -> CWrites {
    guard let handle else { throw invalid("writes is NULL") }
    return Unmanaged<CWrites>.fromOpaque(UnsafeRawPointer(handle)).takeUnretainedValue()
  }

  /// The handle of this batch, as C sees it (not retained).
  var handle: OpaquePointer { OpaquePointer(Unmanaged.passUnretained(self).toOpaque()) }

  /// Empties the batch.
  func clear() {
    sets.removeAll(keepingCapacity: true)
    setIndex.removeAll(keepingCapacity: true)
    touches.removeAll(keepingCapacity: true)
    removals.removeAll(keepingCapacity: true)
    expect.removeAll(keepingCapacity: true)
    owned = false
  }

  /// Refuses what only a program's own batch carries, on a writer's.
  func requireProgramBatch(_ what: String) throws(OrdoError) {
    if let writer {
      throw invalid("\(what) on the writes of contract \"\(writer.name)\": a writer's answer (Complete) carries neither conditions nor ownership")
    }
  }

  func addExpect(_ keypath: UnsafePointer<CChar>?, _ counter: UInt64) throws(OrdoError) {
    try requireProgramBatch("ordo_writes_expect_counter")
    expect.append((try Keypath(try keypathArg(keypath)).string, counter))
  }

  /// The batch as a writer's answer.
  var remoteWrites: RemoteWrites {
    RemoteWrites(set: Dictionary(sets, uniquingKeysWith: { _, last in last }), touch: touches, remove: removals)
  }

  /// Checks that the batch takes a write of `keypath` now, and returns it.
  private func admit(_ keypath: UnsafePointer<CChar>?) throws(OrdoError) -> String {
    let k = try Keypath(try keypathArg(keypath)).string
    guard open else {
      throw invalid("the writes of a notification are used after its callback returned (its answer was sent): \"\(k)\"")
    }
    if let writer, !writer.patterns.contains(where: { $0.matches(k) }) {
      throw OrdoError(
        .contractViolation,
        "contract \"\(writer.name)\" may not write \"\(k)\": its write set is [\(writer.patterns.map(\.string).joined(separator: ", "))]")
    }
    return k
  }

  func set(_ keypath: UnsafePointer<CChar>?, _ value: (String) throws(OrdoError) -> Value) throws(OrdoError) {
    let k = try admit(keypath)
    let v = try value(k)
    if let i = setIndex[k] {
      sets[i].1 = v
    } else {
      setIndex[k] = sets.count
      sets.append((k, v))
    }
  }

  func touch(_ keypath: UnsafePointer<CChar>?) throws(OrdoError) { touches.append(try admit(keypath)) }

  func remove(_ keypath: UnsafePointer<CChar>?, tree: Bool) throws(OrdoError) {
    let k = try admit(keypath)
    removals.append(tree ? k + ".**" : k)
  }
}

@c @implementation
public func ordo_writes_new(_ out: UnsafeMutablePointer<OpaquePointer?>?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let out = try outArg(out, "out")
    out.pointee = OpaquePointer(Unmanaged.passRetained(CWrites()).toOpaque())
  }
}

@c @implementation
public func ordo_writes_free(_ writes: OpaquePointer?) {
  guard let w = try? CWrites.from(writes) else { return }
  guard w.writer == nil else {
    return setLastError("ordo_writes_free: the writes of a notification belong to the client; nothing was freed")
  }
  Unmanaged.passUnretained(w).release()
}

@c @implementation
public func ordo_writes_clear(_ writes: OpaquePointer?) -> ordo_status {
  guarded { () throws(OrdoError) in
    let w = try CWrites.from(writes)
    guard w.open else { throw invalid("the writes of a notification are used after its callback returned") }
    w.clear()
  }
}

/// Adds a set of the value `make` gives (it may refuse the C value).
private func set(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ make: (String) throws(OrdoError) -> Value) -> ordo_status {
  guarded { () throws(OrdoError) in try CWrites.from(writes).set(keypath, make) }
}

@c @implementation
public func ordo_writes_set_bool(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ value: Bool) -> ordo_status {
  set(writes, keypath) { (_) throws(OrdoError) in .bool(value) }
}

@c @implementation
public func ordo_writes_set_int64(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ value: Int64) -> ordo_status {
  set(writes, keypath) { (_) throws(OrdoError) in .int64(value) }
}

@c @implementation
public func ordo_writes_set_double(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ value: Double) -> ordo_status {
  set(writes, keypath) { (_) throws(OrdoError) in .double(value) }
}

@c @implementation
public func ordo_writes_set_string(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ utf8: UnsafePointer<CChar>?) -> ordo_status {
  set(writes, keypath) { (k) throws(OrdoError) in try stringValue(utf8, for: k) }
}

@c @implementation
public func ordo_writes_set_bytes(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ data: UnsafeRawPointer?, _ len: Int) -> ordo_status {
  set(writes, keypath) { (k) throws(OrdoError) in try bytesValue(data, len, for: k) }
}

@c @implementation
public func ordo_writes_touch(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in try CWrites.from(writes).touch(keypath) }
}

@c @implementation
public func ordo_writes_remove(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in try CWrites.from(writes).remove(keypath, tree: false) }
}

@c @implementation
public func ordo_writes_remove_tree(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?) -> ordo_status {
  guarded { () throws(OrdoError) in try CWrites.from(writes).remove(keypath, tree: true) }
}

@c @implementation
public func ordo_writes_expect_counter(_ writes: OpaquePointer?, _ keypath: UnsafePointer<CChar>?, _ counter: UInt64) -> ordo_status {
  guarded { () throws(OrdoError) in try CWrites.from(writes).addExpect(keypath, counter) }
}

@c @implementation
public func ordo_writes_set_owned(_ writes: OpaquePointer?, _ owned: Bool) -> ordo_status {
  guarded { () throws(OrdoError) in
    let w = try CWrites.from(writes)
    try w.requireProgramBatch("ordo_writes_set_owned")
    w.owned = owned
  }
}
