"""The access policy of ordod (SPEC §12, docs/policy.md) with two real
identities: a private dbus-daemon that lets every user connect, ordod
--policy, clients as root (this process, jeepney) and as nobody (setpriv,
Tests/DBus/policy_client.py). Each right allowed and denied on each method,
deny over allow, Snapshot and every-transaction Notify filtered, SIGHUP
reload (valid and broken), nothing changed by denied calls.

Run: python3 Tests/DBus/test_policy.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import ast
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import ORDOD, Env, RemoteError, read_line, spawn, stop  # noqa: E402
from test_dbus import DBusTest, E  # noqa: E402

import jeepney  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NOBODY = pwd.getpwnam("nobody")
ACCESS_DENIED = E("AccessDenied")

CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={dir}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <limit name="max_outgoing_bytes">{max_outgoing}</limit>
</busconfig>
"""

# Line numbers matter: the tests check that messages name them.
POLICY = """# root (uid 0) may do everything
allow uid:0 read,write,writer **
allow everyone read pub.** app.**
deny user:nobody read pub.secret.**
allow uid:{uid} write app.**
allow gid:{gid} writer app.norm.**
deny uid:{uid},gid:{gid} write app.locked
"""
# The reload: nobody loses its write right (line 5 gone).
POLICY2 = """allow uid:0 read,write,writer **
allow everyone read pub.** app.**
deny user:nobody read pub.secret.**
allow gid:{gid} writer app.norm.**
"""


class Nobody:
    """A client connection as user nobody (another process)."""

    def __init__(self, env):
        lib = os.path.join(env.dir, "pylib")
        if not os.path.isdir(lib):
            shutil.copytree(os.path.dirname(jeepney.__file__), os.path.join(lib, "jeepney"))
            shutil.copy(os.path.join(HERE, "policy_client.py"), lib)
            shutil.copy(os.path.join(HERE, "direct.py"), lib)
            for root, dirs, files in os.walk(lib):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
                for f in files:
                    os.chmod(os.path.join(root, f), 0o644)
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        e = {"PYTHONPATH": lib, "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
        self.p = spawn(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python,
                        os.path.join(lib, "policy_client.py"), *env.peer_address()],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, cwd=env.dir)
        self.unique_name = self.ask(("unique",))[1]

    def ask(self, req, timeout=20):
        self.p.stdin.write((repr(req) + "\n").encode())
        self.p.stdin.flush()
        try:
            return ast.literal_eval(read_line(self.p.stdout, timeout, "nobody's client"))
        except AssertionError:
            raise AssertionError("nobody's client: " + (self.p.stderr.read().decode() if self.p.poll() is not None else "no answer"))

    def call(self, member, sig="", *args):
        r = self.ask(("call", member, sig, list(args)))
        if r[0] == "error":
            raise RemoteError(r[1], r[2])
        return r[1]

    def register(self, name, reads, writes=(), options=None):
        return self.call("Register", "sasasa{sv}", name, list(reads), list(writes), options or {})[0]

    def commit(self, set=None, touch=(), remove=()):
        return self.call("Commit", "a{sv}asas", set or {}, list(touch), list(remove))[0]

    def get(self, keypath):
        (sig, value), counter = self.call("Get", "s", keypath)
        return sig, value, counter

    def snapshot(self, patterns):
        return self.call("Snapshot", "as", list(patterns))

    def next_notify(self, timeout=5):
        r = self.ask(("notify", timeout), timeout=timeout + 10)
        if r[0] == "timeout":
            raise TimeoutError("no Notify")
        return tuple(r[1])

    def close(self):
        stop(self.p, signal.SIGKILL)


class PolicyTest(DBusTest):
    policy = POLICY

    def setUp(self):
        self.env = Env(start_ordod=False, config=CONFIG)
        self.policy_path = os.path.join(self.env.dir, "policy")
        self.write_policy(self.policy)
        self.env.start_ordod(["--policy", self.policy_path])
        self.addCleanup(self._finish)
        self.root = self.env.peer()
        self.nobody = Nobody(self.env)
        self.addCleanup(self.nobody.close)

    def write_policy(self, text):
        with open(self.policy_path, "w") as f:
            f.write(text.format(uid=NOBODY.pw_uid, gid=NOBODY.pw_gid))

    def denied(self, fn, *args, contains=()):
        with self.assertRaises(RemoteError) as cm:
            fn(*args)
        self.assertEqual(cm.exception.name, ACCESS_DENIED, cm.exception.message)
        for c in contains:
            self.assertIn(c, cm.exception.message)
        return cm.exception.message

    def reload(self, text, expect):
        """Rewrites the policy file, sends SIGHUP and waits for `expect` in the log."""
        with open(self.policy_path, "w") as f:
            f.write(text.format(uid=NOBODY.pw_uid, gid=NOBODY.pw_gid))
        return self.env.sighup(expect)


class Rights(PolicyTest):
    def seed(self):
        self.assertEqual(self.root.commit({"pub.x": ("x", 1), "pub.secret.k": ("s", "hidden"), "app.a": ("x", 3),
                                           "app.locked": ("b", True), "other.z": ("x", 9)}), 1)

    def test_read_get_and_snapshot(self):
        self.seed()
        self.assertEqual(self.nobody.get("pub.x"), ("x", 1, 1))
        self.assertEqual(self.nobody.get("app.a"), ("x", 3, 1))
        msg = self.denied(self.nobody.get, "pub.secret.k", contains=('"pub.secret.k"', "read", "line 4", "deny user:nobody"))
        self.assertIn(f"uid {NOBODY.pw_uid}", msg)
        self.denied(self.nobody.get, "other.z", contains=('"other.z"', "read", "no rule allows it"))
        # Root reads everything.
        self.assertEqual(self.root.get("pub.secret.k"), ("s", "hidden", 1))
        # Snapshot carries only what the peer may read, values and counters.
        values, counters, txn = self.nobody.snapshot(["**"])
        self.assertEqual(sorted(values), ["app.a", "app.locked", "pub.x"])
        self.assertEqual(sorted(counters), ["app.a", "app.locked", "pub.x"])
        self.assertEqual(txn, 1)
        values, counters, _ = self.root.snapshot(["**"])
        self.assertEqual(len(values), 5)
        st = self.root.stats()
        self.assertEqual(st["access-denied"], 2)

    def test_write_commit_and_nothing_changed_when_denied(self):
        self.seed()
        self.assertEqual(self.nobody.commit({"app.b": ("x", 5)}), 2)
        self.assertEqual(self.root.get("app.b"), ("x", 5, 1))
        before = self.root.snapshot(["**"])
        self.denied(self.nobody.commit, {"pub.x": ("x", 2)}, contains=('"pub.x"', "write", "no rule allows it"))
        # One denied keypath denies the whole transaction.
        self.denied(self.nobody.commit, {"app.c": ("x", 1), "other.y": ("x", 1)}, contains=('"other.y"',))
        # Deny wins over allow: app.locked is under app.** (allowed) and denied to everyone.
        self.denied(self.nobody.commit, {"app.locked": ("b", False)}, contains=('"app.locked"', "line 7", "deny uid:"))
        self.denied(self.nobody.commit, {}, ["pub.x"], contains=("write",))
        self.denied(self.nobody.commit, {}, [], ["pub.x"], contains=("write",))
        # Removing the tree app.** needs write on all of it, app.locked included.
        self.denied(self.nobody.commit, {}, [], ["app.**"], contains=('"app.**"', "line 7"))
        self.assertEqual(self.root.snapshot(["**"]), before, "a denied call changed something")
        # Touch and remove where allowed.
        self.assertEqual(self.nobody.commit({}, ["app.a"], ["app.b"]), 3)
        self.assertEqual(self.root.get("app.a")[2], 2)

    def test_register_reads_writes_and_writer(self):
        self.seed()
        # A contract may not read what its peer may not read.
        self.denied(self.nobody.register, "all", ["pub.**"], contains=('"pub.**"', "read", "line 4"))
        self.denied(self.nobody.register, "other", ["other.z"], contains=("read",))
        obs = self.nobody.register("obs", ["pub.x"])
        # A writer needs the writer right over its write set, and write.
        self.denied(self.nobody.register, "w1", ["app.a"], ["app.other"], contains=('"app.other"', "writer"))
        norm = self.nobody.register("norm", ["app.a"], ["app.norm.out"], {"priority": ("i", -3), "timeout-ms": ("u", 3000)})
        # Root has every right.
        self.root.register("rootw", ["pub.secret.k"], ["other.q"], {"priority": ("i", -2)})
        names = sorted(c["name"] for c in self.root.contracts())
        self.assertEqual(names, ["norm", "obs", "rootw"])
        self.assertNotEqual(obs, norm)
        # Unregister is for the owner only (no policy right involved).
        root_path = [c["path"] for c in self.root.contracts() if c["name"] == "rootw"][0]
        self.denied(self.nobody.call, "Unregister", "o", root_path)

    def test_complete_is_checked(self):
        norm = self.nobody.register("norm", ["app.a"], ["app.norm.*"], {"priority": ("i", -3), "timeout-ms": ("u", 4000)})
        import threading
        result = {"n": 0}

        def commit():
            result["n"] += 1
            result["txn"] = self.root.commit({"app.a": ("x", result["n"])})
        t = threading.Thread(target=commit)
        t.start()
        path, txn, changed, values = self.nobody.next_notify(timeout=10)
        self.assertEqual((path, changed, values), (norm, ["app.a"], {"app.a": ("x", 1)}))
        self.assertEqual(self.nobody.call("Complete", "ota{sv}asas", norm, txn, {"app.norm.out": ("x", 10)}, [], []), ())
        t.join(10)
        self.assertEqual(self.root.get("app.norm.out"), ("x", 10, 1))
        # After a reload without nobody's write right, its Complete is refused.
        self.reload(POLICY2, "reloaded the access policy")
        t = threading.Thread(target=commit)
        t.start()
        path, txn, changed, values = self.nobody.next_notify(timeout=10)
        self.denied(self.nobody.call, "Complete", "ota{sv}asas", norm, txn, {"app.norm.out": ("x", 20)}, [], [],
                    contains=('"app.norm.out"', "write"))
        t.join(10)
        self.assertEqual(self.root.get("app.norm.out"), ("x", 10, 1))

    def test_every_transaction_notify_filtered(self):
        log = self.nobody.register("log", [])
        self.root.commit({"pub.x": ("x", 1), "pub.secret.k": ("s", "hidden"), "other.z": ("x", 1)})
        self.assertEqual(self.nobody.next_notify(), (log, 1, ["pub.x"], {"pub.x": ("x", 1)}))
        # A transaction of nothing it may read: no Notify at all.
        self.root.commit({"pub.secret.k": ("s", "again")})
        self.root.commit({"app.a": ("x", 2)})
        self.assertEqual(self.nobody.next_notify(), (log, 3, ["app.a"], {"app.a": ("x", 2)}))
        # Root's every-transaction observer sees everything.
        rlog = self.root.register("rlog", [])
        self.root.commit({"pub.secret.k": ("s", "third"), "pub.x": ("x", 5)})
        path, txn, changed, values = self.root.next_notify()
        self.assertEqual((path, txn, sorted(changed)), (rlog, 4, ["pub.secret.k", "pub.x"]))
        self.assertEqual(self.nobody.next_notify(), (log, 4, ["pub.x"], {"pub.x": ("x", 5)}))


class UnreadableAncestor(PolicyTest):
    policy = """allow uid:0 read,write,writer **
allow everyone read x.**
deny user:nobody read x.y.z
"""

    def test_a_write_to_an_unreadable_ancestor_is_not_named(self):
        obs = self.nobody.register("obs", ["x.y.z.w"])
        # x.y.z affects a reader of x.y.z.w (SPEC §1), but nobody may not
        # read it: the contract is called without the keypath or its value.
        self.root.commit({"x.y.z": ("s", "SECRET-VALUE")})
        self.assertEqual(self.nobody.next_notify(), (obs, 1, [], {}))
        self.root.commit({}, [], ["x.y.z"])
        self.assertEqual(self.nobody.next_notify(), (obs, 2, [], {}))
        self.root.commit({"x.y.z.w": ("x", 1), "x.y.z": ("s", "again")})
        self.assertEqual(self.nobody.next_notify(), (obs, 3, ["x.y.z.w"], {"x.y.z.w": ("x", 1)}))


    def test_a_cached_contract_gets_its_whole_read_set(self):
        self.root.commit({"x.y.z.w": ("x", 1), "x.y.z.v": ("x", 2), "x.q": ("x", 0)})
        obs = self.nobody.register("cached", ["x.y.z.*", "x.q"], options={"cache": ("b", True)})
        self.assertEqual(self.nobody.next_notify(),
                         (obs, 1, [], {"x.q": ("x", 0), "x.y.z.v": ("x", 2), "x.y.z.w": ("x", 1)}))
        # The tree removed under a keypath it may not read: its client could
        # not tell what went, so the Notify carries the whole read set, as an
        # initial call does, not only what is under x.q.
        self.root.commit({"x.q": ("x", 5)}, [], ["x.y.z.**"])
        self.assertEqual(self.nobody.next_notify(), (obs, 2, [], {"x.q": ("x", 5)}))
        self.root.commit({"x.y.z.w": ("x", 3)})
        self.assertEqual(self.nobody.next_notify(), (obs, 3, ["x.y.z.w"], {"x.y.z.w": ("x", 3)}))

class Reload(PolicyTest):
    def test_sighup_valid_then_broken(self):
        self.assertEqual(self.nobody.commit({"app.b": ("x", 1)}), 1)
        obs = self.nobody.register("obs", ["app.b"])
        self.reload(POLICY2, "reloaded the access policy")
        self.denied(self.nobody.commit, {"app.b": ("x", 2)}, contains=('"app.b"', "write"))
        # Peers and contracts stay.
        self.assertEqual([c["path"] for c in self.root.contracts()], [obs])
        self.root.commit({"app.b": ("x", 3)})
        self.assertEqual(self.nobody.next_notify()[:2], (obs, 2))
        # A broken file is refused with its line number; the old policy stays.
        log = self.reload("allow uid:0 read **\nallow everyone read app.**\nallow nobody-at-all write x\n",
                          "policy refused")
        self.assertIn(":3:", log)
        self.denied(self.nobody.commit, {"app.b": ("x", 4)})
        self.assertEqual(self.nobody.get("app.b")[:2], ("x", 3))
        self.assertEqual(self.root.commit({"other.q": ("x", 1)}), 3, "root keeps its rights from the old policy")
        # A file that cannot be read (here a directory in its place) is
        # refused too: it is not an empty policy.
        before = len(self.env.log())
        os.replace(self.policy_path, self.policy_path + ".saved")
        os.mkdir(self.policy_path)
        try:
            self.env.ordod.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "policy refused" not in self.env.log()[before:]:
                self.assertLess(time.monotonic(), deadline, "a directory was not refused at reload")
                time.sleep(0.02)
            self.assertIn("cannot read", self.env.log()[before:])
            self.assertEqual(self.root.commit({"other.q": ("x", 2)}), 4, "root keeps its rights from the old policy")
        finally:
            os.rmdir(self.policy_path)
            os.replace(self.policy_path + ".saved", self.policy_path)
        self.assertTrue(self.env.alive())


class StartRefused(unittest.TestCase):
    def test_bad_policy_at_start_exits_with_the_line(self):
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        path = os.path.join(env.dir, "bad")
        for text, line in (("allow everyone read a.**\n\nallow everyone fly a.**\n", ":3:"),
                           ("# ok\nallow everyone read a..b\n", ":2:"),
                           ("permit everyone read a\n", ":1:"),
                           ("allow user:no-such-user-here read a\n", ":1:")):
            with open(path, "w") as f:
                f.write(text)
            r = subprocess.run([ORDOD, "--address", env.address, "--policy", path], capture_output=True, text=True,
                               timeout=20)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(path + line, r.stderr)
        r = subprocess.run([ORDOD, "--address", env.address, "--policy", os.path.join(env.dir, "missing")],
                           capture_output=True, text=True, timeout=20)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot open", r.stderr)
        r = subprocess.run([ORDOD, "--address", env.address, "--policy", env.dir], capture_output=True, text=True,
                           timeout=20)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(env.dir + ":0: cannot read", r.stderr)


class ExamplePolicy(unittest.TestCase):
    def test_shipped_example_parses_where_its_users_exist(self):
        # The example names users a device would have; here they are mapped
        # to existing ones by rewriting the names, and ordod must accept it.
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        root = os.path.dirname(os.path.dirname(HERE))
        with open(os.path.join(root, "data", "policy.example")) as f:
            text = f.read()
        for name in ("ordo-settings", "ordo-normalizer"):
            text = text.replace("user:" + name, "user:nobody")
        text = text.replace("group:ordo-apps", "group:nogroup")
        path = os.path.join(env.dir, "policy")
        with open(path, "w") as f:
            f.write(text)
        p = env.start_ordod(["--policy", path])
        self.assertIsNone(p.poll())
        stop(p)


if __name__ == "__main__":
    harness.main("dbus policy")
