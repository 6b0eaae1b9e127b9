"""A hostile D-Bus peer of dev.ordo.Bus1, run as its own process by
test_hostile.py so that the test can kill it with SIGKILL at any moment.

  hostile_peer.py ADDRESS register PREFIX
      Registers observers PREFIX-0, PREFIX-1 … (reads victim.*) in a loop,
      unregistering the oldest once it holds 200; prints "ready" after 20.
  hostile_peer.py ADDRESS writer NAME
      Registers a writer contract NAME (reads w.in, writes w.out,
      timeout-ms 60000), prints "ready" and then "notified TXN" for each
      Notify, and never sends Complete.

Lines go to standard output, flushed; the process runs until killed (and
exits by itself after 120 s so that nothing is left behind).
"""
import os
import signal
import sys
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Peer  # noqa: E402


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    address, mode, name = sys.argv[1:4]
    signal.alarm(120)
    peer = Peer(address)
    if mode == "register":
        held = deque()
        i = 0
        while True:
            held.append(peer.register(f"{name}-{i}", ["victim.*"]))
            i += 1
            if i == 20:
                say("ready")
            if len(held) >= 200:
                peer.unregister(held.popleft())
    elif mode == "writer":
        peer.register(name, ["w.in"], ["w.out"], {"timeout-ms": ("u", 60000)})
        say("ready")
        while True:
            try:
                n = peer.next_notify(timeout=1)
            except TimeoutError:
                continue
            say(f"notified {n[1]}")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
