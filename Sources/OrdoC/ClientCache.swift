// ordo_client_cached: a cached client contract's read set (ORDO_CLIENT_CACHE,
// docs/dbus.md "Consistent reads"), read from OrdoClient's cache.

import COrdo
import Ordo
import OrdoDBus

@c @implementation
public func ordo_client_cached(
  _ client: OpaquePointer?, _ contract: UInt64, _ patterns: UnsafePointer<UnsafePointer<CChar>?>?, _ n_patterns: Int,
  _ callback: ordo_snapshot_callback?, _ userData: UnsafeMutableRawPointer?, _ out_txn: UnsafeMutablePointer<UInt64>?
) -> ordo_status {
  perKeypath(client, patterns, n_patterns, callback, userData, out_txn) { (c, list) throws(OrdoError) in
    guard let record = c.contracts[contract] else { throw OrdoError(.notFound, "this client has no contract \(contract)") }
    guard let cache = c.remote.cache(of: record.path) else {
      throw OrdoError(.invalidArgument, "contract \"\(record.name)\" was registered without ORDO_CLIENT_CACHE: it keeps no cache")
    }
    var matching: [Pattern] = []
    for p in list { matching.append(try Pattern(p)) }
    let keys = cache.values.keys.filter { k in matching.contains { $0.matches(k) } }
    return (keys, cache.values, [:], cache.transaction)
  }
}
