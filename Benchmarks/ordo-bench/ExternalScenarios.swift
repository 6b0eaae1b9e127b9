/// Scenario 4: the work of scenario 2 driven from C through libordo.so.
func runCABI(_ s: Settings) throws -> [BenchResult] {
  [BenchResult.unavailable("c-abi", "ns_per_change", target: "vs swift <= 1.3", reason: "C library not built yet")]
}

/// Scenario 5: D-Bus notifications.
func runDBus(_ s: Settings) throws -> [BenchResult] {
  [
    BenchResult.unavailable("dbus", "notify_per_s", target: "none", reason: "D-Bus bridge not built"),
    BenchResult.unavailable("dbus", "roundtrip_us", target: "none", reason: "D-Bus bridge not built"),
  ]
}
