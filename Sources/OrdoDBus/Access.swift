// Who a caller is and what it may do: its uid and groups from the bus
// daemon (asked once per peer) or, for a direct peer, from its socket's
// credentials, and the `Access` its calls check.
import CDBus
import Ordo

#if canImport(Glibc)
import Glibc
#endif

extension DBusService {
  /// The rights of one caller: everything without a policy.
  struct Access {
    let policy: Policy?
    let peer: PeerIdentity?
    let sender: String

    static let unchecked = Access(policy: nil, peer: nil, sender: "")

    /// Throws `AccessDenied` naming the keypath or pattern and the right,
    /// unless the caller holds `right` on all of `pattern`.
    func require(_ right: Right, _ pattern: String, for what: String) throws(OrdoServiceError) {
      guard let policy else { return }
      guard let peer else { throw .accessDenied("\(what): \(sender)'s identity is unknown, so it has no \(right.rawValue) right on \"\(pattern)\"") }
      let d = policy.check(peer, right, pattern)
      guard !d.allowed else { return }
      throw .accessDenied("\(what): \(sender) (\(peer)) lacks the right \(right.rawValue) on \"\(pattern)\": \(d.reason) in \(policy.source)")
    }

    /// The writes of a Commit or Complete: `write` on each keypath (on
    /// `k.**` for a tree removal).
    func requireWrites(_ batch: [Write], for what: String) throws(OrdoServiceError) {
      guard policy != nil else { return }
      for w in batch {
        switch w {
        case .set(let k, _), .touch(let k), .remove(let k): try require(.write, k, for: what)
        case .removeTree(let k): try require(.write, k + ".**", for: what)
        }
      }
    }

    /// What the caller may read (nil: everything): the one filter of
    /// `Snapshot`, `Changes` and `Notify`.
    var readFilter: ReadFilter? {
      guard let policy else { return nil }
      return peer.map { policy.readable(by: $0) } ?? ReadFilter(allow: [], deny: [])
    }
  }

  /// The rights of `sender` under the policy in force.
  func access(_ sender: String) throws(OrdoServiceError) -> Access {
    guard let policy = policyBox.withLock({ $0 }) else { return .unchecked }
    return Access(policy: policy, peer: try identity(of: sender), sender: sender)
  }

  /// The uid and gids the bus daemon reports for `sender`, asked once per
  /// peer (`GetConnectionCredentials`) and forgotten when it leaves; for a
  /// direct peer, its socket's credentials (the groups the kernel recorded,
  /// as the bus daemon reports them).
  func identity(of sender: String) throws(OrdoServiceError) -> PeerIdentity {
    if let known = remote.peers[sender]?.identity { return known }
    if sender.hasPrefix(Link.directPrefix) {
      guard let c = link.credentials(of: sender) else {
        throw .accessDenied("\(sender)'s connection reports no Unix credentials, so it has no rights")
      }
      return remember(PeerIdentity(uid: c.uid, gids: c.gids ?? Self.groups(of: c.uid)), of: sender, pid: c.pid)
    }
    guard let connection = link.connection,
      let call = DBusMessageRef.methodCall(
        destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
        member: "GetConnectionCredentials")
    else { throw .other(name: DBusErrorName.dbus, message: "cannot build GetConnectionCredentials") }
    var w = call.writer()
    w.string(sender)
    let reply: DBusMessageRef
    do { reply = try connection.call(call, timeoutMs: 5000) } catch {
      throw .accessDenied("cannot learn who \(sender) is from the bus daemon (GetConnectionCredentials failed: \(error.name): \(error.message)), so it has no rights")
    }
    var uid: UInt32?
    var gids: [UInt32]?
    var r = reply.reader()
    var d = r.recurse()
    while !d.atEnd {
      var e = d.recurse()
      d.next()
      guard let key = try? e.string("key") else { continue }
      var v = e.recurse()
      switch (key, v.currentSignature()) {
      case ("UnixUserID", "u"): uid = v.uint32()
      case ("UnixGroupIDs", "au"):
        var a = v.recurse()
        var list: [UInt32] = []
        while !a.atEnd { list.append(a.uint32()) }
        gids = list
      default: break
      }
    }
    guard let uid else { throw .accessDenied("the bus daemon reports no Unix user for \(sender), so it has no rights") }
    return remember(PeerIdentity(uid: uid, gids: gids ?? Self.groups(of: uid)), of: sender, pid: nil)
  }

  /// Keeps `sender`'s identity until it leaves.
  private func remember(_ identity: PeerIdentity, of sender: String, pid: UInt32?) -> PeerIdentity {
    remote.peer(sender).identity = identity
    log(.debug, "\(sender) is \(identity)\(pid.map { " (pid \($0))" } ?? "")")
    return identity
  }

  /// The groups of `uid` from the system's databases (when the bus daemon
  /// does not report UnixGroupIDs).
  static func groups(of uid: UInt32) -> [UInt32] {
    guard let pw = getpwuid(uid) else { return [] }
    let gid = pw.pointee.pw_gid
    var n: Int32 = 64
    var list = [gid_t](repeating: 0, count: Int(n))
    if getgrouplist(pw.pointee.pw_name, gid, &list, &n) < 0 {
      list = [gid_t](repeating: 0, count: Int(n))
      _ = getgrouplist(pw.pointee.pw_name, gid, &list, &n)
    }
    return Array(list.prefix(Int(max(0, n))))
  }
}
