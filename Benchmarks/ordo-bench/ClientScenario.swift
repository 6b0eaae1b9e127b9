// Scenario dbus-c-client: the C client of libordo (ordo_client_*) against a
// plain libdbus client doing the same work through the same dbus-daemon and
// ordod. See Benchmarks/c/ordo-client-bench.c.
import Foundation

/// Starts `ordod` with a private dbus-daemon and runs ordo-client-bench
/// against it. `notify_per_s`: the Notify signals per second a C client's
/// observer takes in against a libdbus observer of the same signals
/// (target ≥ 0.8). `roundtrip_us`: a Get through the C client against the
/// same call through libdbus (target ≤ 1.2).
func runDBusClient(_ s: Settings) throws -> [BenchResult] {
  let rateTarget = "vs raw-libdbus-observer >= 0.8", tripTarget = "vs raw-libdbus-call <= 1.2"
  func unavailable(_ reason: String) -> [BenchResult] {
    [
      .unavailable("dbus-c-client", "notify_per_s", target: rateTarget, reason: reason),
      .unavailable("dbus-c-client", "roundtrip_us", target: tripTarget, reason: reason),
    ]
  }
  let ordod: String, bench: String
  do {
    (ordod, bench) = try dbusPrograms(
      s, s.clientBench, missing: "no C client program: `make bench` builds ordo-client-bench against the installed libordo.so")
  } catch { return unavailable(error.reason) }
  let name = "dev.ordo.ClientBench"
  let (daemon, started, _) = try startOrdod(ordod, name: name, scenario: "dbus-c-client")
  defer {
    daemon.process.terminate()
    daemon.finish()
  }
  guard let address = started else { return unavailable("ordod did not start") }
  let (rounds, batch, samples) = s.quick ? (3, 300, 30) : (s.reps, 2_000, 200)
  progress("dbus-c-client: measuring (\(rounds) rounds of \(batch) notifications and \(samples) Get calls per side)")
  let client = try Child(bench, [address, name, "\(rounds)", "\(batch)", "\(samples)"])
  let figures = client.figures()
  guard client.process.terminationStatus == 0,
    let rate = figures["client_notify_per_s"], let raw = figures["raw_notify_per_s"], let ratio = figures["client_vs_raw"],
    let get = figures["client_get_us"], let rawGet = figures["raw_get_us"], let getRatio = figures["get_vs_raw"]
  else {
    // The program checks every value each observer received.
    check(false, "dbus-c-client: the C client benchmark program failed (exit \(client.process.terminationStatus))")
    return []
  }
  var notify = BenchResult(scenario: "dbus-c-client", metric: "notify_per_s", ordo: rate, target: rateTarget, met: ratio >= 0.8)
  notify.comparators = [("raw-libdbus-observer", raw)]
  notify.ratios = [("vs raw-libdbus-observer", ratio)]
  var trip = BenchResult(scenario: "dbus-c-client", metric: "roundtrip_us", ordo: get, target: tripTarget, met: getRatio <= 1.2)
  trip.comparators = [("raw-libdbus-call", rawGet)]
  trip.ratios = [("vs raw-libdbus-call", getRatio)]
  return [notify, trip]
}
