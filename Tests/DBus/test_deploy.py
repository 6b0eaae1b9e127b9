"""The installed service (mk/deploy.mk): `make install-service` with DESTDIR
and PREFIX=/usr puts every file where a distribution would, with the right
contents; the man pages render with `man -l`; D-Bus activation through the
installed session .service file starts the installed ordod on a private
dbus-daemon; `make uninstall-service` leaves nothing.

Run: python3 Tests/DBus/test_deploy.py   (from the repository root; make test-deploy)
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import xml.dom.minidom

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import read_line, spawn, stop  # noqa: E402

from jeepney import DBusAddress, new_method_call  # noqa: E402
from jeepney.io.blocking import open_dbus_connection  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FILES = {  # path under PREFIX=/usr (and /etc) → mode
    "usr/sbin/ordod": 0o755,
    "usr/bin/ordoctl": 0o755,
    "usr/share/man/man8/ordod.8": 0o644,
    "usr/share/man/man1/ordoctl.1": 0o644,
    "usr/share/dbus-1/system.d/dev.ordo.Bus.conf": 0o644,
    "usr/share/dbus-1/services/dev.ordo.Bus.service": 0o644,
    "usr/share/dbus-1/system-services/dev.ordo.Bus.service": 0o644,
    "usr/lib/systemd/system/ordod.service": 0o644,
    "usr/lib/systemd/user/ordod.service": 0o644,
    "usr/lib/systemd/system/ordod-direct.socket": 0o644,
    "usr/lib/systemd/system/ordod-direct.service": 0o644,
    "etc/ordo/policy.example": 0o644,
}


def make(*args):
    r = subprocess.run(["make", "--no-print-directory", "-C", ROOT, *args], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise AssertionError(f"make {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def left_files(top):
    out = []
    for root, dirs, files in os.walk(top):
        out += [os.path.join(root, f) for f in files]
        out += [os.path.join(root, d) for d in dirs if os.path.islink(os.path.join(root, d))]
    return out


def ini(path):
    """The key=value lines of a .service/unit file."""
    d = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                d[k] = v
    return d


class Deploy(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ordo-deploy-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_destdir_install_every_file_man_and_uninstall(self):
        dest = os.path.join(self.tmp, "dest")
        make("install-service", "DESTDIR=" + dest, "PREFIX=/usr")
        for rel, mode in FILES.items():
            p = os.path.join(dest, rel)
            self.assertTrue(os.path.isfile(p), rel)
            self.assertEqual(os.stat(p).st_mode & 0o777, mode, rel)
        self.assertEqual(sorted(os.path.relpath(p, dest) for p in left_files(dest)), sorted(FILES))
        # The executables run (no Swift toolchain needed: the runtime is linked in).
        for exe in ("usr/sbin/ordod", "usr/bin/ordoctl"):
            r = subprocess.run([os.path.join(dest, exe), "--help"], capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("usage:", r.stdout)
            ldd = subprocess.run(["ldd", os.path.join(dest, exe)], capture_output=True, text=True).stdout
            self.assertNotIn("libswiftCore", ldd)
        # Paths in the installed files point at the installed ordod and policy.
        sess = ini(os.path.join(dest, "usr/share/dbus-1/services/dev.ordo.Bus.service"))
        self.assertEqual((sess["Name"], sess["Exec"], sess["SystemdService"]), ("dev.ordo.Bus", "/usr/sbin/ordod", "ordod.service"))
        sysd = ini(os.path.join(dest, "usr/share/dbus-1/system-services/dev.ordo.Bus.service"))
        self.assertEqual(sysd["Exec"], "/usr/sbin/ordod --system --policy /etc/ordo/policy")
        self.assertEqual((sysd["User"], sysd["SystemdService"]), ("root", "ordod.service"))
        unit = ini(os.path.join(dest, "usr/lib/systemd/system/ordod.service"))
        self.assertEqual((unit["Type"], unit["BusName"]), ("dbus", "dev.ordo.Bus"))
        self.assertEqual(unit["ExecStart"], "/usr/sbin/ordod --system --policy /etc/ordo/policy")
        self.assertEqual(unit["Alias"], "dbus-dev.ordo.Bus.service")
        user = ini(os.path.join(dest, "usr/lib/systemd/user/ordod.service"))
        self.assertEqual(user["ExecStart"], "/usr/sbin/ordod")
        sock = ini(os.path.join(dest, "usr/lib/systemd/system/ordod-direct.socket"))
        self.assertEqual((sock["ListenStream"], sock["SocketMode"]), ("/run/ordo/bus", "0666"))
        direct = ini(os.path.join(dest, "usr/lib/systemd/system/ordod-direct.service"))
        self.assertEqual(direct["ExecStart"], "/usr/sbin/ordod --no-bus --listen systemd: --policy /etc/ordo/policy")
        for f in (unit, user, sess, sysd, direct):
            self.assertFalse(any("@" in v and v.startswith("@") for v in f.values()), f)
        # The bus policy is well-formed and lets root own the name.
        conf = xml.dom.minidom.parse(os.path.join(dest, "usr/share/dbus-1/system.d/dev.ordo.Bus.conf"))
        owners = [p.getAttribute("user") for p in conf.getElementsByTagName("policy")
                  if any(a.getAttribute("own") == "dev.ordo.Bus" for a in p.getElementsByTagName("allow"))]
        self.assertIn("root", owners)
        # The shipped policy example is accepted by the installed ordod's parser
        # only where its users exist; its syntax is checked by test_policy.py.
        # Man pages render.
        for page, title in (("usr/share/man/man8/ordod.8", "ORDOD"), ("usr/share/man/man1/ordoctl.1", "ORDOCTL")):
            r = subprocess.run(["man", "-l", os.path.join(dest, page)], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(title, r.stdout)
            self.assertIn("SYNOPSIS", r.stdout)
            self.assertNotIn("warning", r.stderr)
        make("uninstall-service", "DESTDIR=" + dest, "PREFIX=/usr")
        self.assertEqual(left_files(dest), [])

    def test_activation_starts_the_installed_ordod(self):
        os.chmod(self.tmp, 0o755)
        prefix = os.path.join(self.tmp, "prefix")
        make("install-service", "PREFIX=" + prefix)
        services = os.path.join(prefix, "share", "dbus-1", "services")
        self.assertEqual(ini(os.path.join(services, "dev.ordo.Bus.service"))["Exec"], os.path.join(prefix, "sbin", "ordod"))
        sock = os.path.join(self.tmp, "bus")
        os.mkdir(sock)
        conf = os.path.join(self.tmp, "bus.conf")
        with open(conf, "w") as f:
            f.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={sock}</listen>
  <auth>EXTERNAL</auth>
  <servicedir>{services}</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
""")
        daemon = spawn(["dbus-daemon", "--config-file=" + conf, "--nofork", "--nopidfile", "--print-address=1"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.addCleanup(stop, daemon)
        address = read_line(daemon.stdout, 10, "the dbus-daemon address")
        env = {**os.environ, "DBUS_SESSION_BUS_ADDRESS": address}
        ctl = os.path.join(prefix, "bin", "ordoctl")
        conn = open_dbus_connection(address)
        self.addCleanup(conn.close)
        dbus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
        has_owner = conn.send_and_get_reply(new_method_call(dbus, "NameHasOwner", "s", ("dev.ordo.Bus",)), timeout=5)
        self.assertEqual(has_owner.body, (False,), "no ordod runs before the first call")
        # No ordod running: the call starts it through activation.
        r = subprocess.run([ctl, "get", "x"], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("dev.ordo.Error.NotFound", r.stderr)
        pid = conn.send_and_get_reply(new_method_call(dbus, "GetConnectionUnixProcessID", "s", ("dev.ordo.Bus",)),
                                      timeout=5).body[0]
        self.assertEqual(os.readlink(f"/proc/{pid}/exe"), os.path.join(prefix, "sbin", "ordod"))
        subprocess.run([ctl, "set", "x=5"], check=True, timeout=30, env=env)
        self.assertEqual(subprocess.run([ctl, "get", "x"], capture_output=True, text=True, timeout=30, env=env).stdout, "int64:5\n")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z":
            self.assertLess(time.monotonic(), deadline, "the activated ordod did not stop on SIGTERM")
            time.sleep(0.05)
        make("uninstall-service", "PREFIX=" + prefix)
        self.assertEqual(left_files(prefix), [])


if __name__ == "__main__":
    harness.main("deploy")
