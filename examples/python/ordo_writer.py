#!/usr/bin/env python3
"""A remote WRITER contract over D-Bus with jeepney: a normalizer (priority
-3) that trims and lower-cases `user.name`. The service sends its Notify
inside the pass and waits for its Complete; the writes join the same
transaction, so every later contract sees the normalized value.

    python3 examples/python/ordo_writer.py            # runs until Ctrl-C
    python3 examples/python/ordo_writer.py --demo     # commits once itself, prints, exits

The bus address comes from DBUS_SESSION_BUS_ADDRESS (ordod prints it).
"""
import sys
import threading
from collections import deque

from jeepney import DBusAddress, MatchRule, MessageType, new_method_call
from jeepney.io.blocking import open_dbus_connection

BUS = DBusAddress("/dev/ordo/Bus", bus_name="dev.ordo.Bus", interface="dev.ordo.Bus1")


def call(conn, method, sig="", *args):
    reply = conn.send_and_get_reply(new_method_call(BUS, method, sig, args), timeout=10)
    if reply.header.message_type == MessageType.error:
        raise RuntimeError(f"{method}: {reply.body[0] if reply.body else 'error'}")
    return reply.body


def serve(conn, path, notes, stop):
    """Answers each Notify of the writer contract with one Complete."""
    while not stop.is_set():
        try:
            contract, txn, changed, values = conn.recv_until_filtered(notes, timeout=0.2).body
        except TimeoutError:
            continue
        set_ = {}
        if "user.name" in values:
            sig, name = values["user.name"]
            clean = " ".join(name.split()).lower()
            if clean != name:
                set_["user.name"] = ("s", clean)
        # All or nothing: if one write breaks a rule (outside the write set,
        # stability), the reply is that error and none of them is applied.
        try:
            call(conn, "Complete", "ota{sv}asas", contract, txn, set_, [], [])
            print(f"completed txn={txn} writes={set_}", flush=True)
        except RuntimeError as e:
            print(f"Complete refused: {e}", flush=True)


def main():
    conn = open_dbus_connection("SESSION")
    notes = deque()
    conn.filter(MatchRule(type="signal", interface="dev.ordo.Bus1", member="Notify"), queue=notes)
    # A non-empty write set makes a writer; timeout-ms bounds the wait (default 2000).
    path, = call(conn, "Register", "sasasa{sv}", "normalize-name", ["user.name"], ["user.name"],
                 {"priority": ("i", -3), "timeout-ms": ("u", 1000)})
    print(f"registered {path}", flush=True)
    stop = threading.Event()
    if "--demo" not in sys.argv:
        try:
            serve(conn, path, notes, stop)
        except KeyboardInterrupt:
            pass
        return
    # Demo: another connection commits (its Commit returns after the pass,
    # which waits for our Complete, so the writer must answer on its own thread).
    t = threading.Thread(target=serve, args=(conn, path, notes, stop), daemon=True)
    t.start()
    other = open_dbus_connection("SESSION")
    txn, = call(other, "Commit", "a{sv}asas", {"user.name": ("s", "  Ada   LOVELACE ")}, [], [])
    (sig, value), counter = call(other, "Get", "s", "user.name")
    print(f"committed txn={txn}; user.name={value!r} counter={counter}", flush=True)
    stop.set()
    t.join(5)
    other.close()
    conn.close()


if __name__ == "__main__":
    main()
