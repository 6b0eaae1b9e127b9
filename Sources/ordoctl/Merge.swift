// ordoctl set --merge: writes read from stdin, merged like dconf's
// write_fast (OrdoDBus.MergingWriter; docs/dbus.md "Merging writes").
import Ordo
import OrdoDBus

#if canImport(Glibc)
import Glibc
#endif

/// One input line: `KEY=VALUE` (set), `touch KEY`, `rm KEY` (`KEY.**`: the
/// tree); empty lines and lines starting with `#` are skipped. Nil: nothing
/// to write.
func mergeLine(_ line: Substring) throws(OrdoError) -> (set: [(String, Value)], touch: [String], remove: [String])? {
  var s = line
  while let c = s.last, c == " " || c == "\t" || c == "\r" { s.removeLast() }
  while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
  if s.isEmpty || s.hasPrefix("#") { return nil }
  for (verb, isTouch) in [("touch ", true), ("rm ", false)] where s.hasPrefix(verb) {
    let k = s.dropFirst(verb.count).drop(while: { $0 == " " || $0 == "\t" })
    guard !k.isEmpty, !k.contains(" ") else { throw OrdoError(.invalidArgument, "\"\(s)\": \(verb)takes one keypath") }
    return isTouch ? ([], [String(k)], []) : ([], [], [String(k)])
  }
  guard let eq = s.firstIndex(of: "=") else {
    throw OrdoError(.invalidArgument, "\"\(s)\" is not KEY=VALUE, touch KEY or rm KEY")
  }
  return ([(String(s[..<eq]), try ValueText.parse(String(s[s.index(after: eq)...])))], [], [])
}

/// Reads lines from stdin and writes them through a MergingWriter as they
/// come: the first goes out at once as a Commit, the ones read while it is
/// in flight join the next Commit. Prints `writes=N commits=M txn=T` (T:
/// the last transaction id they landed in). A malformed line stops the
/// input (the lines before it are written) and exits 2; a Commit the
/// service refused is reported with its line range and exits 1.
func mergedSet(_ client: OrdoClient, maxBatch: Int) -> Never {
  signal(SIGPIPE, SIG_IGN)
  let writer = client.mergingWriter(maxBatchKeypaths: maxBatch)
  // The lines of one read arrived together: they merge, and the replies
  // are taken between reads (and while waiting for input).
  writer.pollsOnWrite = false
  var lines: [MergedWrite: (first: Int, last: Int)] = [:]
  var lineNo = 0
  var inputError: String?
  var acceptError: OrdoRemoteError?
  var pending: [UInt8] = []
  var buf = [UInt8](repeating: 0, count: 65536)

  func take(_ raw: ArraySlice<UInt8>) {
    lineNo += 1
    let text = String(decoding: raw, as: UTF8.self)
    do {
      guard let w = try mergeLine(Substring(text)) else { return }
      do {
        let t = try writer.write(set: w.set, touch: w.touch, remove: w.remove)
        lines[t] = (lines[t]?.first ?? lineNo, lineNo)
      } catch {
        acceptError = error
      }
    } catch {
      inputError = "line \(lineNo): \(error.message)"
    }
  }

  reading: while inputError == nil && acceptError == nil {
    if !writer.isIdle, let fd = client.fileDescriptor {
      // Wait for input or for the reply to the Commit in flight, whichever
      // comes first: the pending batch goes out when the reply arrives,
      // even while the input is quiet.
      var fds = [pollfd(fd: 0, events: Int16(POLLIN), revents: 0), pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
      _ = poll(&fds, 2, 100)
      if fds[1].revents != 0 || fds[0].revents == 0 { writer.poll() }
      if fds[0].revents == 0 { continue }
    }
    let n = read(0, &buf, buf.count)
    if n < 0 {
      if errno == EINTR { continue }
      inputError = "cannot read stdin: \(String(cString: strerror(errno)))"
      break
    }
    if n == 0 {
      if !pending.isEmpty { take(pending[...]) }
      break
    }
    writer.poll()
    pending += buf[0..<n]
    var start = pending.startIndex
    while let nl = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
      take(pending[start..<nl])
      start = nl + 1
      if inputError != nil || acceptError != nil { break reading }
    }
    pending.removeSubrange(pending.startIndex..<start)
  }

  do { try writer.flush() } catch {}
  var txn: UInt64 = 0
  var failed = false
  for (ticket, range) in lines.sorted(by: { $0.key < $1.key }) {
    switch writer.state(ticket) {
    case .committed(let t): txn = max(txn, t)
    case .failed(let e):
      failed = true
      let where_ = range.first == range.last ? "line \(range.first)" : "lines \(range.first)-\(range.last)"
      var msg = "ordoctl: \(where_): \(e.description)\n"
      msg.withUTF8 { _ = write(2, $0.baseAddress!, $0.count) }
    case .pending: failed = true
    }
  }
  out("writes=\(writer.writesIssued) commits=\(writer.commitsSent) txn=\(txn)")
  client.close()
  if let inputError { fail(inputError, code: 2) }
  if let acceptError { fail("line \(lineNo): \(acceptError.description)", code: acceptError.name == DBusErrorName.dbus ? 1 : 2) }
  exit(failed ? 1 : 0)
}
