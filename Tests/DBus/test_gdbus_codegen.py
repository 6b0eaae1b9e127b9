"""The shipped introspection XML through gdbus-codegen: the generated C
code builds without warnings, and a C client written against it
(Tests/DBus/gdbus_client.c) registers an observer, commits, receives its
Notify through the "contract-notify" GObject signal (the XML's
org.gtk.GDBus.C.Name on Notify), reads a value and unregisters, against a
real ordod on a private dbus-daemon.

Run: python3 Tests/DBus/test_gdbus_codegen.py   (ORDO_BIN = the build's bin dir)
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import DOC_XML  # noqa: E402
from test_dbus import DBusTest  # noqa: E402

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gdbus_client.c")


def build(directory):
    """Generates the proxy code from the shipped XML and builds the client."""
    subprocess.run(["gdbus-codegen", "--interface-prefix", "dev.ordo.", "--c-namespace", "Ordo",
                    "--generate-c-code", "ordo-bus1", DOC_XML], cwd=directory, check=True, timeout=60)
    with open(os.path.join(directory, "ordo-bus1.h")) as f:
        header = f.read()
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "gio-2.0", "gio-unix-2.0"], capture_output=True,
                           text=True, check=True).stdout.split()
    exe = os.path.join(directory, "gdbus_client")
    subprocess.run([os.environ.get("CC", "cc"), "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", directory, "-o", exe,
                    CLIENT, os.path.join(directory, "ordo-bus1.c"), *flags], check=True, timeout=120)
    return exe, header


class GDBusCodegen(DBusTest):
    def test_generated_c_client_receives_notify(self):
        exe, header = build(self.env.dir)
        r = subprocess.run([exe, self.env.address], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "committed txn=1",
            "notify mine txn=1 doc.title='Songs' doc.count=int64 3",
            "get doc.count=3 counter=1",
            "done",
        ])
        self.assertEqual(self.env.peer().contracts(), [])
        # The signal's C name: no GObject signal called "notify" is made.
        self.assertTrue("ordo_bus1_emit_contract_notify (" in header and "ordo_bus1_emit_notify (" not in header,
                        "the generated header names the Notify signal's C functions otherwise")


if __name__ == "__main__":
    harness.main("dbus gdbus-codegen")
