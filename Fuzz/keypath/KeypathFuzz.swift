// libFuzzer target: keypath and pattern parsing and the pattern relations.
// `Keypath(_:)` and `Pattern(_:)` must never crash and must accept exactly
// what the reference (Tests/OrdoDifferentialTests/Naive.swift, a literal
// reading of SPEC §1) accepts; `matches`, "affects" (through
// `Pattern.isAffected(byWriteTo:)` and through a bus: a reader is called
// iff a write affects it), "may write" (through registration: a priority
// reader and a data writer conflict iff the write pattern may affect the
// read pattern) and the removeTree permission (through a callback) must
// agree with the reference.
//
// Input: a mode byte, then up to three strings. Mode odd: every byte picks
// a token (segments, wildcards, separators, bad characters), 0xff separates
// strings — this reaches the interesting pattern shapes quickly. Mode even:
// raw bytes, '\n' separates strings.

import CLibFuzzer
import Foundation
import Ordo

let tokens = [
  "a", "b", "c", "*", "**", ".", ".", ".", "a-1", "_", "Z9", "..", " ", "é", "*a", "a*", "\u{0}", "***", "/", "\n",
]

func strings(_ bytes: [UInt8]) -> [String] {
  guard let mode = bytes.first else { return [] }
  var out: [String] = []
  if mode & 1 == 1 {
    var cur = ""
    for b in bytes.dropFirst() {
      if b == 0xff {
        out.append(cur)
        cur = ""
      } else {
        cur += tokens[Int(b) % tokens.count]
      }
    }
    out.append(cur)
  } else {
    out = bytes.dropFirst().split(separator: 0x0a, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
  }
  return Array(out.prefix(3))
}

/// Small enough for the reference's brute-force search.
func small(_ s: String...) -> Bool {
  var literals = Set<String>()
  for x in s {
    let segs = Naive.segments(x)
    if segs.count > 4 { return false }
    for seg in segs where seg != "*" && seg != "**" { literals.insert(seg) }
  }
  return literals.count <= 3
}

func check(_ ok: Bool, _ what: @autoclosure () -> String) {
  if !ok { fatalError("reference disagrees: \(what())") }
}

final class Flag: @unchecked Sendable {
  var value = false
  var error: OrdoError?
}

@main enum KeypathFuzz {
  static func main() { exit(ordo_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv, keypathFuzz)) }
}

func keypathFuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  let s = strings(Array(UnsafeBufferPointer(start: data, count: size)))
  var keypathOK: [Bool] = []
  var patternOK: [Bool] = []
  for x in s {
    do {
      let k = try Keypath(x)
      check(k.string == x, "Keypath keeps its string")
      check(Naive.isKeypath(x), "Keypath accepted \(Array(x.utf8))")
      keypathOK.append(true)
    } catch {
      check(error.code == .invalidKeypath && !error.message.isEmpty, "Keypath error \(error)")
      check(!Naive.isKeypath(x), "Keypath refused \(Array(x.utf8)): \(error)")
      keypathOK.append(false)
    }
    do {
      let p = try Pattern(x)
      check(Naive.isPattern(x), "Pattern accepted \(Array(x.utf8))")
      check(p.isConcrete == Naive.isConcrete(x), "isConcrete of \(x)")
      check(p.isTree == (Naive.segments(x).last == "**"), "isTree of \(x)")
      patternOK.append(true)
    } catch {
      check(error.code == .invalidKeypath && !error.message.isEmpty, "Pattern error \(error)")
      check(!Naive.isPattern(x), "Pattern refused \(Array(x.utf8)): \(error)")
      patternOK.append(false)
    }
  }
  guard s.count >= 2, patternOK[0], keypathOK[1] else { return 0 }
  let (p, k) = (s[0], s[1])
  let pattern = try! Pattern(p)
  check(pattern.matches(k) == Naive.matches(p, k), "\(p) matches \(k)")
  guard small(p, k) else { return 0 }
  let affects = Naive.affects(write: k, read: p)
  check(pattern.isAffected(byWriteTo: k) == affects, "a write to \(k) affects a reader of \(p)")

  // Through a bus: a reader of p is called iff a write to k affects it.
  let bus = Bus()
  let called = Flag()
  _ = try! bus.register(name: "reader", reads: [p]) { _ in called.value = true }
  bus.begin()
  try! bus.touch(k)
  check(try! bus.commit() == 1, "a touch commits")
  check(called.value == affects, "bus: a write to \(k) calls a reader of \(p)")

  // removeTree(k) from a callback whose write set is [p].
  let rt = Bus()
  let refused = Flag()
  _ = try! rt.register(name: "writer", reads: ["trigger"], writes: [p], priority: 1) { [unowned rt] _ in
    do throws(OrdoError) { try rt.removeTree(k) } catch { refused.error = error }
  }
  rt.begin()
  try! rt.touch("trigger")
  _ = try! rt.commit()
  check((refused.error == nil) == Naive.coversTree(p, k), "removeTree \(k) with writes [\(p)]: \(String(describing: refused.error))")
  if let e = refused.error { check(e.code == .contractViolation, "removeTree error \(e)") }

  // "May write": a priority reader of r and a data writer of p conflict
  // iff p may affect r.
  guard s.count >= 3, patternOK[2], small(p, s[2]) else { return 0 }
  let r = s[2]
  let reg = Bus()
  _ = try! reg.register(name: "prio", reads: [r], priority: 1) { _ in }
  var conflict = false
  do {
    _ = try reg.register(name: "data", reads: ["q"], writes: [p]) { _ in }
  } catch {
    check(error.code == .orderConflict, "data writer registration: \(error)")
    conflict = true
  }
  check(conflict == Naive.mayAffect(writer: p, reader: r), "\(p) may affect a reader of \(r)")
  return 0
}
