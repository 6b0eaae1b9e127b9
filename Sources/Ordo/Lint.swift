/// A pair of contracts whose order the registration checks leave to the run
/// time (``Bus/lint()``): a contract placed later in the pass has a write
/// pattern that may write what a contract placed before it reads. Such a
/// write fails with ``OrdoError/Code/stability`` when the later contract
/// makes it (SPEC §5); wildcard write patterns are left out of the
/// registration's ``OrdoError/Code/orderConflict`` check, so only a lint
/// finds them beforehand.
public struct LintFinding: Sendable, Hashable, CustomStringConvertible {
  /// The contract placed before the other in the pass.
  public let earlier: String
  /// Its read pattern that the write may affect.
  public let reads: String
  /// The contract placed after it.
  public let later: String
  /// Its write pattern that may write what `earlier` reads.
  public let writes: String
  /// An example: a keypath the write pattern allows whose write affects the
  /// read pattern.
  public let keypath: String

  /// The finding in one sentence.
  public var description: String {
    "contract \"\(later)\" may write \"\(keypath)\" (its write pattern \"\(writes)\"), which contract \"\(earlier)\", placed before it in the pass, reads (its read pattern \"\(reads)\"): that write would fail with STABILITY"
  }
}

extension Bus {
  /// Lists every pair of registered contracts where a later contract's
  /// write pattern may write what an earlier contract reads, in pass order
  /// (by the earlier contract, then the later one, then their patterns as
  /// declared), each with an example keypath. An empty list means no write
  /// a contract's write set allows can fail with
  /// ``OrdoError/Code/stability``.
  public func lint() -> [LintFinding] {
    LintFinding.find(in: contracts().map { ($0.name, $0.reads, $0.writes) })
  }
}

extension LintFinding {
  /// The findings of ``Bus/lint()`` for contracts given in pass order with
  /// their patterns (for clients that list a bus's contracts remotely).
  package static func find(in contracts: [(name: String, reads: [String], writes: [String])]) -> [LintFinding] {
    let list = contracts.map { c in (c.name, c.reads.compactMap { try? Pattern($0) }, c.writes.compactMap { try? Pattern($0) }) }
    var findings: [LintFinding] = []
    for (i, (earlier, reads, _)) in list.enumerated() {
      for (later, _, writes) in list[(i + 1)...] {
        for w in writes {
          for r in reads where w.mayAffect(reader: r) {
            findings.append(LintFinding(earlier: earlier, reads: r.string, later: later, writes: w.string, keypath: w.example(affecting: r)))
          }
        }
      }
    }
    return findings
  }
}

extension Pattern {
  /// A keypath this write pattern matches whose write affects `reader`,
  /// when ``mayAffect(reader:)``: the pattern's segments, each `*` filled
  /// with the reader's segment there when it names one, else `x`; a final
  /// `**` stands for the reader's further segments (at least one).
  func example(affecting reader: Pattern) -> String {
    let count = isTree ? max(fixed.count, reader.fixed.count, 1) : fixed.count
    var segments: [String] = []
    for i in 0..<count {
      if i < fixed.count, case .literal(let l) = fixed[i] {
        segments.append(l)
      } else if i < reader.fixed.count, case .literal(let l) = reader.fixed[i] {
        segments.append(l)
      } else {
        segments.append("x")
      }
    }
    return segments.joined(separator: ".")
  }
}
