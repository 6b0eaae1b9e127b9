#!/usr/bin/env python3
"""Runs the conformance scenarios through the C ABI (libordo.so) with ctypes.

    conformance_ctypes.py [--lib PATH/libordo.so] DIR [DIR...]

Every *.json scenario of the directories (format: conformance/README.md) runs
against a fresh bus (ordo_bus_new ... ordo_bus_free), with the semantics of
the Swift runner (Sources/OrdoConformance/Runner.swift): each step checks its
error expectation (the status name), its result (get, counter, commit's
expect_txn) and the exact, ordered contract calls it caused (expect_calls);
on_notify actions run inside the C callback and their failures fail the
enclosing step. On top of that, for the C ABI: every registered contract's
destroy function must have run exactly once when the bus is freed, and never
for a failed registration.

Prints one line per scenario and exits 1 if any failed (2 on a malformed
scenario file or bad usage). Python 3 standard library only.
"""

import ctypes
import ctypes.util
import json
import os
import re
import struct
import sys
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_bool, c_char_p, c_double, c_int,
                    c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p)

# ---------------------------------------------------------------------------
# The C ABI (include/ordo.h)
# ---------------------------------------------------------------------------

ORDO_OK = 0
ORDO_NO_PRIORITY = -2**31
ORDO_NOTIFY_INITIAL = 1
STATUS_CODES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 99]
TYPE_NAMES = {1: "bool", 2: "int64", 3: "double", 4: "string", 5: "bytes"}


class Notification(Structure):
    _fields_ = [("txn", c_uint64), ("contract", c_uint64),
                ("changed", POINTER(c_char_p)), ("n_changed", c_size_t)]


CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(Notification), c_void_p)
DESTROY = CFUNCTYPE(None, c_void_p)


class ContractSpec(Structure):
    _fields_ = [("size", c_uint32), ("name", c_char_p),
                ("reads", POINTER(c_char_p)), ("n_reads", c_size_t),
                ("writes", POINTER(c_char_p)), ("n_writes", c_size_t),
                ("priority", c_int32), ("flags", c_uint32),
                ("callback", CALLBACK), ("user_data", c_void_p), ("destroy", DESTROY)]


def load_library(path):
    lib = ctypes.CDLL(path)
    st = c_int  # ordo_status: a C enum
    sigs = {
        "ordo_version": (c_char_p, []),
        "ordo_last_error_message": (c_char_p, []),
        "ordo_status_name": (c_char_p, [st]),
        "ordo_bus_new": (c_void_p, []),
        "ordo_bus_new_with_schema": (st, [c_char_p, POINTER(c_void_p)]),
        "ordo_is_stored": (st, [c_void_p, c_char_p, POINTER(c_bool)]),
        "ordo_bus_free": (None, [c_void_p]),
        "ordo_begin": (st, [c_void_p]),
        "ordo_commit": (st, [c_void_p, POINTER(c_uint64)]),
        "ordo_rollback": (st, [c_void_p]),
        "ordo_set_bool": (st, [c_void_p, c_char_p, c_bool]),
        "ordo_set_int64": (st, [c_void_p, c_char_p, c_int64]),
        "ordo_set_double": (st, [c_void_p, c_char_p, c_double]),
        "ordo_set_string": (st, [c_void_p, c_char_p, c_char_p]),
        "ordo_set_bytes": (st, [c_void_p, c_char_p, c_void_p, c_size_t]),
        "ordo_touch": (st, [c_void_p, c_char_p]),
        "ordo_remove": (st, [c_void_p, c_char_p]),
        "ordo_remove_tree": (st, [c_void_p, c_char_p]),
        "ordo_get_type": (st, [c_void_p, c_char_p, POINTER(c_int)]),
        "ordo_get_bool": (st, [c_void_p, c_char_p, POINTER(c_bool)]),
        "ordo_get_int64": (st, [c_void_p, c_char_p, POINTER(c_int64)]),
        "ordo_get_double": (st, [c_void_p, c_char_p, POINTER(c_double)]),
        "ordo_get_string": (st, [c_void_p, c_char_p, POINTER(c_void_p)]),
        "ordo_get_bytes": (st, [c_void_p, c_char_p, POINTER(c_void_p), POINTER(c_size_t)]),
        "ordo_free": (None, [c_void_p]),
        "ordo_get_counter": (st, [c_void_p, c_char_p, POINTER(c_uint64)]),
        "ordo_register": (st, [c_void_p, POINTER(ContractSpec), POINTER(c_uint64)]),
        "ordo_resolve": (st, [c_void_p, c_char_p, POINTER(c_void_p)]),
        "ordo_handle_keypath": (c_char_p, [c_void_p]),
        "ordo_handle_set_bool": (st, [c_void_p, c_bool]),
        "ordo_handle_set_int64": (st, [c_void_p, c_int64]),
        "ordo_handle_set_double": (st, [c_void_p, c_double]),
        "ordo_handle_set_string": (st, [c_void_p, c_char_p]),
        "ordo_handle_set_bytes": (st, [c_void_p, c_void_p, c_size_t]),
        "ordo_handle_touch": (st, [c_void_p]),
        "ordo_handle_remove": (st, [c_void_p]),
        "ordo_handle_get_type": (st, [c_void_p, POINTER(c_int)]),
        "ordo_handle_get_bool": (st, [c_void_p, POINTER(c_bool)]),
        "ordo_handle_get_int64": (st, [c_void_p, POINTER(c_int64)]),
        "ordo_handle_get_double": (st, [c_void_p, POINTER(c_double)]),
        "ordo_handle_get_string": (st, [c_void_p, POINTER(c_void_p)]),
        "ordo_handle_get_bytes": (st, [c_void_p, POINTER(c_void_p), POINTER(c_size_t)]),
        "ordo_handle_get_counter": (st, [c_void_p, POINTER(c_uint64)]),
        "ordo_unregister": (st, [c_void_p, c_uint64]),
        "ordo_expect_counter": (st, [c_void_p, c_char_p, c_uint64]),
        "ordo_owner_new": (st, [c_void_p, c_char_p, POINTER(c_void_p)]),
        "ordo_begin_owned": (st, [c_void_p, c_void_p]),
        "ordo_owner_free": (None, [c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = argtypes
    return lib


class Ordo:
    """Thin access to the library: status names and errors."""

    def __init__(self, lib):
        self.lib = lib
        self.names = {c: lib.ordo_status_name(c).decode() for c in [0] + STATUS_CODES}
        # Conformance names drop the prefix: ORDO_E_CYCLE -> CYCLE.
        self.short = {c: n[len("ORDO_E_"):] for c, n in self.names.items() if c != 0}
        self.known = set(self.short.values())

    def error(self, status):
        return OrdoError(self.short.get(status, "status %d" % status),
                         self.lib.ordo_last_error_message().decode("utf-8", "replace"))


class OrdoError(Exception):
    """A failed call: the status name (without prefix) and the message."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


class ScenarioError(Exception):
    """A malformed scenario, or an outcome that differs from the expectation."""


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------

class Value:
    """A typed value; equality is the bus's: same type, same content, doubles
    bit for bit."""

    def __init__(self, type_, content):
        self.type = type_
        self.content = content

    def key(self):
        if self.type == "double":
            return ("double", struct.pack("<d", self.content))
        if self.type == "string":
            return ("string", self.content.encode("utf-8", "surrogatepass"))
        return (self.type, self.content)

    def __eq__(self, other):
        return isinstance(other, Value) and self.key() == other.key()

    def __str__(self):
        if self.type == "bool":
            return "bool %s" % ("true" if self.content else "false")
        if self.type == "string":
            return 'string "%s"' % self.content
        if self.type == "bytes":
            return "bytes %d" % len(self.content)
        return "%s %s" % (self.type, self.content)


def decode_value(raw, location):
    bad = ScenarioError("%s: a value is an object with one key: bool, int64, double, string or bytes" % location)
    if not isinstance(raw, dict) or len(raw) != 1:
        raise bad
    (type_, x), = raw.items()
    if type_ == "bool" and isinstance(x, bool):
        return Value("bool", x)
    if type_ == "int64" and isinstance(x, (int, float)) and not isinstance(x, bool):
        if isinstance(x, float) and not x.is_integer():
            pass
        elif -2**63 <= int(x) < 2**63:
            return Value("int64", int(x))
    if type_ == "double" and isinstance(x, (int, float)) and not isinstance(x, bool):
        return Value("double", float(x))
    if type_ == "string" and isinstance(x, str):
        return Value("string", x)
    if type_ == "bytes" and isinstance(x, str) and re.fullmatch(r"([0-9a-fA-F]{2})*", x):
        return Value("bytes", bytes.fromhex(x))
    if type_ not in ("bool", "int64", "double", "string", "bytes"):
        raise bad
    raise ScenarioError("%s: not a valid %s value" % (location, type_))


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------

ORDO_E_SCHEMA = 14

KNOWN_OPS = ["register", "unregister", "begin", "commit", "rollback", "set", "touch", "remove",
             "remove_tree", "get", "counter", "expect", "owner", "begin_owned", "release"]


class Step:
    def __init__(self, raw, where, known_errors):
        if not isinstance(raw, dict) or not isinstance(raw.get("op"), str):
            raise ScenarioError('%s: a step is an object with "op"' % where)
        op = raw["op"]
        if op not in KNOWN_OPS:
            raise ScenarioError('%s: unknown op "%s"' % (where, op))
        self.op = op
        self.fields = raw
        label = raw.get("key", raw.get("name"))
        self.location = "%s (%s%s)" % (where, op, "" if label is None else " %s" % label)
        self.expect_error = None
        if "expect_error" in raw:
            e = raw["expect_error"]
            if not isinstance(e, str) or e not in known_errors:
                raise ScenarioError('%s: expect_error must be a status name such as "CYCLE"' % where)
            self.expect_error = e
        self.expect_calls = None
        if "expect_calls" in raw:
            calls = raw["expect_calls"]
            if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                raise ScenarioError("%s: expect_calls is a list of objects" % where)
            self.expect_calls = []
            for c in calls:
                if not isinstance(c.get("contract"), str):
                    raise ScenarioError('%s: an expected call needs "contract"' % where)
                changed = c.get("changed")
                changed = set(changed) if isinstance(changed, list) and all(isinstance(k, str) for k in changed) else None
                txn = c.get("txn")
                txn = txn if isinstance(txn, int) and not isinstance(txn, bool) else None
                self.expect_calls.append((c["contract"], changed, txn))
        actions = raw.get("on_notify", [])
        actions = actions if isinstance(actions, list) else []
        self.on_notify = [Step(a, "%s on_notify action %d" % (where, i + 1), known_errors)
                          for i, a in enumerate(actions)]
        only = raw.get("only_txn")
        self.only_txn = only if isinstance(only, int) and not isinstance(only, bool) else None

    def string(self, key):
        s = self.fields.get(key)
        if not isinstance(s, str):
            raise ScenarioError('%s: missing string "%s"' % (self.location, key))
        return s

    def strings(self, key):
        a = self.fields.get(key)
        if a is None:
            return []
        if not isinstance(a, list) or not all(isinstance(s, str) for s in a):
            raise ScenarioError('%s: "%s" must be a list of strings' % (self.location, key))
        return a

    def value(self, key):
        return decode_value(self.fields.get(key), '%s "%s"' % (self.location, key))


class Scenario:
    def __init__(self, data, source, known_errors):
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise ScenarioError("%s: not JSON: %s" % (source, e))
        if not isinstance(obj, dict):
            raise ScenarioError("%s: a scenario is a JSON object" % source)
        if not isinstance(obj.get("name"), str):
            raise ScenarioError('%s: missing "name"' % source)
        if not isinstance(obj.get("steps"), list):
            raise ScenarioError('%s: missing "steps"' % source)
        self.name = obj["name"]
        self.source = source
        # A schema document inline: the scenario's bus is made with it.
        self.schema = obj.get("schema")
        self.steps = [Step(s, "%s: step %d" % (source, i + 1), known_errors) for i, s in enumerate(obj["steps"])]


def load_directory(directory, known_errors):
    files = sorted(f for f in os.listdir(directory) if f.endswith(".json"))
    out = []
    for f in files:
        path = os.path.join(directory, f)
        with open(path, "rb") as fh:
            out.append(Scenario(fh.read(), path, known_errors))
    return out


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

def encode(s):
    return s.encode("utf-8", "surrogatepass")


class Run:
    """One scenario against one bus."""

    def __init__(self, ordo, via_handles=False, schema=None):
        self.ordo = ordo
        # Through handles, every set/touch/remove/get/counter resolves its
        # keypath with ordo_resolve and calls the ordo_handle_* variant.
        self.via_handles = via_handles
        self.lib = ordo.lib
        if schema is None:
            self.bus = self.lib.ordo_bus_new()
        else:
            bus = c_void_p(None)
            if self.lib.ordo_bus_new_with_schema(json.dumps(schema).encode(), byref(bus)) != 0:
                raise ScenarioError("the schema does not validate: %s" % self.lib.ordo_last_error_message().decode())
            self.bus = bus.value
        self.calls = []            # (contract name, [changed], txn)
        self.action_failures = []
        self.handles = {}          # name -> contract id
        self.owners = {}           # name -> ordo_owner *, until released
        self.keep = []             # ctypes callbacks must outlive their contracts
        self.destroys = {}         # token -> times destroy ran
        self.registered = {}       # token -> contract name, for successful registrations
        self.failed_tokens = set()
        self.next_token = 1
        self.destroy_fn = DESTROY(self._destroyed)
        self.keep.append(self.destroy_fn)

    def _destroyed(self, user_data):
        self.destroys[user_data] = self.destroys.get(user_data, 0) + 1

    def close(self):
        """Frees the bus; returns a message if destroy was not called exactly
        once per registered contract (and never for failed ones)."""
        self.lib.ordo_bus_free(self.bus)
        self.bus = None
        for owner in self.owners.values():
            self.lib.ordo_owner_free(owner)  # after its bus: nothing to remove
        self.owners = {}
        for token, name in sorted(self.registered.items()):
            n = self.destroys.get(token, 0)
            if n != 1:
                return 'contract "%s": destroy ran %d times, expected once' % (name, n)
        for token in sorted(self.failed_tokens):
            if self.destroys.get(token, 0):
                return "destroy ran for a contract whose registration failed"
        return None

    def check(self, status):
        if status != ORDO_OK:
            raise self.ordo.error(status)

    # -- steps --------------------------------------------------------------

    def perform(self, step, in_callback):
        before = len(self.calls)
        failures_before = len(self.action_failures)
        error = None
        got = None
        try:
            got = self.execute(step)
        except OrdoError as e:
            error = e
        want = step.expect_error
        if error is not None and want is None:
            raise ScenarioError("%s: expected success, got %s: %s" % (step.location, error.code, error.message))
        if error is not None and error.code != want:
            raise ScenarioError("%s: expected %s, got %s: %s" % (step.location, want, error.code, error.message))
        if error is None and want is not None:
            raise ScenarioError("%s: expected %s, but the step succeeded" % (step.location, want))
        if error is None:
            self.check_result(step, got)
        if in_callback:
            return
        failures = self.action_failures[failures_before:]
        if failures:
            raise ScenarioError("%s: an on_notify action failed: %s" % (step.location, failures[0]))
        if step.expect_calls is not None:
            self.compare(step.expect_calls, self.calls[before:], step.location)

    def compare(self, want, got, location):
        def render(calls):
            return "[" + ", ".join("%s %s txn %d" % (c, json.dumps(ch), t) for c, ch, t in calls) + "]"
        if len(want) != len(got):
            raise ScenarioError("%s: expected %d calls %s, got %d: %s"
                                % (location, len(want), json.dumps([w[0] for w in want]), len(got), render(got)))
        for i, ((wc, wch, wt), (gc, gch, gt)) in enumerate(zip(want, got)):
            if wc != gc:
                raise ScenarioError('%s: call %d should be "%s", got "%s"; all calls: %s'
                                    % (location, i + 1, wc, gc, render(got)))
            if wch is not None and wch != set(gch):
                raise ScenarioError("%s: call %d (%s) should receive changed %s, got %s"
                                    % (location, i + 1, wc, json.dumps(sorted(wch)), json.dumps(sorted(gch))))
            if wt is not None and wt != gt:
                raise ScenarioError("%s: call %d (%s) should receive txn %d, got %d" % (location, i + 1, wc, wt, gt))

    def check_result(self, step, got):
        if step.op == "get":
            want = step.value("expect")
            if got != want:
                raise ScenarioError("%s: expected %s, got %s" % (step.location, want, got if got is not None else "nothing"))
            if "expect_stored" in step.fields:
                stored = c_bool(False)
                self.check(self.lib.ordo_is_stored(self.bus, encode(step.string("key")), byref(stored)))
                if stored.value != bool(step.fields["expect_stored"]):
                    raise ScenarioError("%s: expected %s" % (step.location, "a stored value" if step.fields["expect_stored"] else "a default"))
        elif step.op == "counter":
            want = step.fields.get("expect")
            if not isinstance(want, (int, float)) or isinstance(want, bool):
                raise ScenarioError('%s: counter needs a numeric "expect"' % step.location)
            if got != int(want):
                raise ScenarioError("%s: expected counter %d, got %s" % (step.location, int(want), got))
        elif step.op == "commit":
            if "expect_txn" not in step.fields:
                return
            raw = step.fields["expect_txn"]
            txn = got or 0
            if isinstance(raw, str):
                if raw != "nonzero":
                    raise ScenarioError('%s: expect_txn is a number or "nonzero"' % step.location)
                if txn == 0:
                    raise ScenarioError("%s: expected a nonzero transaction id, got 0" % step.location)
            elif isinstance(raw, (int, float)) and not isinstance(raw, bool) and int(raw) != txn:
                raise ScenarioError("%s: expected transaction id %d, got %d" % (step.location, int(raw), txn))

    def execute(self, step):
        lib, bus, op = self.lib, self.bus, step.op
        if op == "register":
            return self.register(step)
        if op == "unregister":
            name = step.string("name")
            if name not in self.handles:
                raise OrdoError("NOT_FOUND", 'no contract named "%s" was registered by this scenario' % name)
            self.check(lib.ordo_unregister(bus, self.handles[name]))
            del self.handles[name]
            return None
        if op == "begin":
            self.check(lib.ordo_begin(bus))
            return None
        if op == "commit":
            txn = c_uint64(0)
            self.check(lib.ordo_commit(bus, byref(txn)))
            return txn.value
        if op == "rollback":
            self.check(lib.ordo_rollback(bus))
            return None
        if op == "set":
            key = encode(step.string("key"))
            v = step.value("value")
            if v.type == "bool":
                self.check(self.on("set_bool", key, v.content))
            elif v.type == "int64":
                self.check(self.on("set_int64", key, v.content))
            elif v.type == "double":
                self.check(self.on("set_double", key, v.content))
            elif v.type == "string":
                self.check(self.on("set_string", key, encode(v.content)))
            else:
                self.check(self.on("set_bytes", key, v.content, len(v.content)))
            return None
        if op == "touch":
            self.check(self.on("touch", encode(step.string("key"))))
            return None
        if op == "remove":
            self.check(self.on("remove", encode(step.string("key"))))
            return None
        if op == "remove_tree":
            self.check(lib.ordo_remove_tree(bus, encode(step.string("key"))))
            return None
        if op == "get":
            return self.get(encode(step.string("key")))
        if op == "counter":
            n = c_uint64(0)
            self.check(self.on("get_counter", encode(step.string("key")), byref(n)))
            return n.value
        if op == "expect":
            n = step.fields.get("counter")
            if not isinstance(n, int) or isinstance(n, bool):
                raise ScenarioError('%s: expect needs a numeric "counter"' % step.location)
            self.check(lib.ordo_expect_counter(bus, encode(step.string("key")), n))
            return None
        if op == "owner":
            owner = c_void_p(None)
            self.check(lib.ordo_owner_new(bus, encode(step.string("name")), byref(owner)))
            self.owners[step.string("name")] = owner.value
            return None
        if op == "begin_owned":
            self.check(lib.ordo_begin_owned(bus, self.owner(step)))
            return None
        if op == "release":
            lib.ordo_owner_free(self.owner(step))
            del self.owners[step.string("name")]
            return None
        raise ScenarioError("%s: unknown op" % step.location)

    def owner(self, step):
        """The owner a step names, made by an earlier owner step and not
        released (ordo_owner_free frees it)."""
        name = step.string("name")
        if name not in self.owners:
            raise ScenarioError('%s: no owner named "%s" is live in this scenario' % (step.location, name))
        return self.owners[name]

    def on(self, fn, key, *rest):
        """Calls ordo_<fn>(bus, key, ...) or, through handles,
        ordo_handle_<fn>(handle, ...) for the handle ordo_resolve gives."""
        if not self.via_handles:
            return getattr(self.lib, "ordo_" + fn)(self.bus, key, *rest)
        h = c_void_p(None)
        st = self.lib.ordo_resolve(self.bus, key, byref(h))
        if st == ORDO_E_SCHEMA and fn.startswith("get"):
            # A keypath the schema does not declare has no handle: read it
            # by its string.
            return getattr(self.lib, "ordo_" + fn)(self.bus, key, *rest)
        if st != 0:
            return st
        if self.lib.ordo_handle_keypath(h) != key:
            raise ScenarioError("ordo_handle_keypath gives %r for %r" % (self.lib.ordo_handle_keypath(h), key))
        return getattr(self.lib, "ordo_handle_" + fn)(h, *rest)

    def get(self, key):
        lib, on = self.lib, self.on
        t = c_int(0)
        self.check(on("get_type", key, byref(t)))
        type_ = TYPE_NAMES[t.value]
        if type_ == "bool":
            b = c_bool(False)
            self.check(on("get_bool", key, byref(b)))
            return Value("bool", b.value)
        if type_ == "int64":
            i = c_int64(0)
            self.check(on("get_int64", key, byref(i)))
            return Value("int64", i.value)
        if type_ == "double":
            d = c_double(0)
            self.check(on("get_double", key, byref(d)))
            return Value("double", d.value)
        p = c_void_p(None)
        if type_ == "string":
            self.check(on("get_string", key, byref(p)))
            try:
                return Value("string", ctypes.string_at(p.value).decode("utf-8"))
            finally:
                lib.ordo_free(p)
        n = c_size_t(0)
        self.check(on("get_bytes", key, byref(p), byref(n)))
        try:
            return Value("bytes", ctypes.string_at(p.value, n.value))
        finally:
            lib.ordo_free(p)

    def register(self, step):
        name = step.string("name")
        flags = 0
        for f in step.strings("flags"):
            if f != "notify_initial":
                raise ScenarioError('%s: unknown flag "%s"' % (step.location, f))
            flags |= ORDO_NOTIFY_INITIAL
        priority = step.fields.get("priority")
        priority = int(priority) if isinstance(priority, (int, float)) and not isinstance(priority, bool) else ORDO_NO_PRIORITY
        reads = [encode(s) for s in step.strings("reads")]
        writes = [encode(s) for s in step.strings("writes")]
        actions = step.on_notify

        def callback(_bus, note_ptr, _user_data):
            try:
                note = note_ptr.contents
                changed = [note.changed[i].decode("utf-8") for i in range(note.n_changed)]
                if note.changed[note.n_changed] is not None:
                    self.action_failures.append("%s: the changed list is not NULL-terminated" % name)
                self.calls.append((name, changed, note.txn))
                for action in actions:
                    if action.only_txn is None or action.only_txn == note.txn:
                        try:
                            self.perform(action, True)
                        except ScenarioError as e:
                            self.action_failures.append(str(e))
            except BaseException as e:  # never let an exception cross into C
                self.action_failures.append("%s: callback raised %r" % (name, e))

        cb = CALLBACK(callback)
        self.keep.append(cb)
        token = self.next_token
        self.next_token += 1
        read_array = (c_char_p * max(len(reads), 1))(*reads)
        write_array = (c_char_p * max(len(writes), 1))(*writes)
        spec = ContractSpec(
            size=ctypes.sizeof(ContractSpec), name=encode(name),
            reads=read_array if reads else None, n_reads=len(reads),
            writes=write_array if writes else None, n_writes=len(writes),
            priority=priority, flags=flags, callback=cb, user_data=token, destroy=self.destroy_fn)
        cid = c_uint64(0)
        status = self.lib.ordo_register(self.bus, byref(spec), byref(cid))
        if status != ORDO_OK:
            self.failed_tokens.add(token)
            raise self.ordo.error(status)
        self.registered[token] = name
        self.handles[name] = cid.value
        return None


def run_scenario(ordo, scenario, via_handles=False):
    """Runs a scenario; returns (failure or None, the calls made)."""
    run = Run(ordo, via_handles, scenario.schema)
    failure = None
    try:
        for step in scenario.steps:
            run.perform(step, False)
    except ScenarioError as e:
        failure = str(e)
    finally:
        destroy_problem = run.close()
    return failure or destroy_problem, run.calls


def run_both(ordo, scenario):
    """Runs a scenario through keypath strings and through handles: both
    must pass, and make the same calls."""
    failure, by_strings = run_scenario(ordo, scenario)
    if failure:
        return "through keypath strings: " + failure
    failure, by_handles = run_scenario(ordo, scenario, via_handles=True)
    if failure:
        return "through handles: " + failure
    if by_strings != by_handles:
        return "the calls through handles differ from those through strings:\n  strings: %s\n  handles: %s" % (by_strings, by_handles)
    return None


def main(argv):
    args = argv[1:]
    lib_path = os.environ.get("ORDO_LIB")
    if "--lib" in args:
        i = args.index("--lib")
        if i + 1 >= len(args):
            print("conformance_ctypes: --lib needs a path", file=sys.stderr)
            return 2
        lib_path = args[i + 1]
        del args[i:i + 2]
    if not args or "-h" in args or "--help" in args:
        print("usage: conformance_ctypes.py [--lib libordo.so] DIR [DIR...]\n"
              "Runs every *.json conformance scenario in the directories through libordo.so.")
        return 2 if not args else 0
    lib_path = lib_path or ctypes.util.find_library("ordo")
    if not lib_path:
        print("conformance_ctypes: libordo.so not found: pass --lib PATH", file=sys.stderr)
        return 2
    ordo = Ordo(load_library(lib_path))
    try:
        scenarios = [s for d in args for s in load_directory(d, ordo.known)]
    except (OSError, ScenarioError) as e:
        print("conformance_ctypes: %s" % e, file=sys.stderr)
        return 2
    failed = 0
    for s in scenarios:
        failure = run_both(ordo, s)
        if failure:
            failed += 1
            print("FAIL %s (%s)\n     %s" % (s.name, s.source, failure))
        else:
            print("ok   %s" % s.name)
    print("%d of %d scenarios passed through the C ABI, by keypath strings and by handles (%s, ordo %s)"
          % (len(scenarios) - failed, len(scenarios), lib_path, ordo.lib.ordo_version().decode()))
    return 0 if failed == 0 and scenarios else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
