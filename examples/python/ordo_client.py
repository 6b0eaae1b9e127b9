#!/usr/bin/env python3
"""A Python client of an Ordo bus over D-Bus, with jeepney (pure Python).

    python3 -m pip install jeepney
    ordod &                                  # prints DBUS_SESSION_BUS_ADDRESS=...
    DBUS_SESSION_BUS_ADDRESS=... python3 examples/python/ordo_client.py

It registers an observer contract on `doc.**`, commits two transactions, prints
the Notify signals it receives, reads a value and a snapshot, and leaves (the
bus removes its contract when its connection closes).
"""
import os
import sys
from collections import deque

from jeepney import DBusAddress, MatchRule, MessageType, HeaderFields, new_method_call
from jeepney.io.blocking import open_dbus_connection

BUS = DBusAddress("/dev/ordo/Bus", bus_name=os.environ.get("ORDO_NAME", "dev.ordo.Bus"),
                  interface="dev.ordo.Bus1")


class OrdoError(Exception):
    pass


def call(conn, member, signature="", *args):
    reply = conn.send_and_get_reply(new_method_call(BUS, member, signature, args), timeout=10)
    if reply.header.message_type == MessageType.error:
        # e.g. dev.ordo.Error.NotFound: "doc.missing" holds no value (its counter is 0)
        raise OrdoError(f"{reply.header.fields[HeaderFields.error_name]}: {reply.body[0]}")
    return reply.body


def main():
    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if not address:
        sys.exit("set DBUS_SESSION_BUS_ADDRESS to the address ordod printed")
    conn = open_dbus_connection(address)
    # Notify signals are unicast to us: no match rule on the bus is needed,
    # only a local filter that keeps them (bufsize: keep them all).
    notes = deque()
    conn.filter(MatchRule(type="signal", interface="dev.ordo.Bus1", member="Notify"), queue=notes)

    # An observer: empty write set. Options: priority (i), notify-initial (b).
    (contract,) = call(conn, "Register", "sasasa{sv}", "python-example", ["doc.**"], [],
                       {"notify-initial": ("b", True)})
    print("registered", contract)

    # Values are variants of type b, x, d, s or ay.
    (txn,) = call(conn, "Commit", "a{sv}asas",
                  {"doc.title": ("s", "Songs"), "doc.count": ("x", 3), "doc.ratio": ("d", 0.5)}, [], [])
    print("committed transaction", txn)
    call(conn, "Commit", "a{sv}asas", {"doc.count": ("x", 4)}, ["doc.selection"], [])

    # The initial call, then one Notify per transaction, in order.
    for _ in range(3):
        msg = conn.recv_until_filtered(notes, timeout=5)
        path, txn, changed, values = msg.body
        shown = {k: v[1] for k, v in values.items()}
        print(f"Notify txn={txn} changed={changed} values={shown}")

    (sig, value), counter = call(conn, "Get", "s", "doc.count")
    print(f"doc.count = {value!r} ({sig}), counter {counter}")
    values, counters, txn = call(conn, "Snapshot", "as", ["doc.*"])
    print("snapshot at", txn, {k: v[1] for k, v in values.items()}, counters)

    try:
        call(conn, "Get", "s", "doc.missing")
    except OrdoError as e:
        print("as expected:", e)

    call(conn, "Unregister", "o", contract)
    conn.close()


if __name__ == "__main__":
    main()
