"""A dev.ordo.Bus1 client that runs as another user (test_policy.py starts it
with setpriv as nobody). It reads one request per line on stdin, as a Python
literal, and answers one Python literal per line on stdout:

  ("call", member, signature, args)  ->  ("ok", body) | ("error", name, message)
  ("notify", timeout)                ->  ("notify", body) | ("timeout",)
  ("trace", timeout)                 ->  ("trace", body) | ("timeout",)
  ("unique",)                        ->  ("unique", name)

Arguments: the bus daemon's address, or "--direct" and ordod's direct
address (ordod --listen). Only jeepney and direct.py are needed (copied
beside this file by the test).
"""
import ast
import sys
from collections import deque

from jeepney import DBusAddress, HeaderFields, MatchRule, MessageType, new_method_call

from direct import connect


def main():
    conn = connect(sys.argv[-1], direct=sys.argv[1] == "--direct")
    notes = deque()
    conn.filter(MatchRule(type="signal", interface="dev.ordo.Bus1", member="Notify"), queue=notes, bufsize=1000)
    traces = deque()
    conn.filter(MatchRule(type="signal", interface="dev.ordo.Bus1", member="Trace"), queue=traces, bufsize=1000)
    addr = DBusAddress("/dev/ordo/Bus", bus_name="dev.ordo.Bus", interface="dev.ordo.Bus1")
    for line in sys.stdin:
        req = ast.literal_eval(line)
        if req[0] == "call":
            _, member, sig, args = req
            reply = conn.send_and_get_reply(new_method_call(addr, member, sig, tuple(args)), timeout=20)
            if reply.header.message_type == MessageType.error:
                out = ("error", reply.header.fields.get(HeaderFields.error_name), reply.body[0] if reply.body else "")
            else:
                out = ("ok", reply.body)
        elif req[0] == "notify":
            try:
                out = ("notify", conn.recv_until_filtered(notes, timeout=req[1]).body)
            except TimeoutError:
                out = ("timeout",)
        elif req[0] == "trace":
            try:
                out = ("trace", conn.recv_until_filtered(traces, timeout=req[1]).body)
            except TimeoutError:
                out = ("timeout",)
        elif req[0] == "unique":
            out = ("unique", conn.unique_name)
        else:
            out = ("error", "bad-request", repr(req))
        sys.stdout.write(repr(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
