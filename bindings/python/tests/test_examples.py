"""examples/python run against a real ordod, with the installed package."""
import os
import subprocess
import sys

from conftest import ROOT

EXAMPLES = os.path.join(ROOT, "examples", "python")


def run(env, *args):
    e = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=env.address)
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, env=e)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_package_is_the_installed_one():
    import ordo
    assert os.path.join("bindings", "python", "src") not in ordo.__file__


def test_client_example(env):
    out = run(env, os.path.join(EXAMPLES, "ordo_client.py"))
    assert "Notify txn=0 changed=[] values={}" in out
    assert ("Notify txn=1 changed=['doc.title', 'doc.count', 'doc.ratio'] "
            "values={'doc.title': 'Songs', 'doc.count': 3, 'doc.ratio': 0.5}") in out
    assert "Notify txn=2 changed=['doc.count', 'doc.selection'] values={'doc.count': 4}" in out
    assert "doc.count = 4, counter 2" in out
    assert "as expected: dev.ordo.Error.NotFound" in out


def test_writer_example(env):
    out = run(env, os.path.join(EXAMPLES, "ordo_writer.py"), "--demo")
    assert "completed txn=1 writes={'user.name': ('s', 'ada lovelace')}" in out
    assert "committed txn=1; user.name='ada lovelace' counter=1" in out
    assert "calls=1 completed=1 refused=0" in out


def test_devtools_example(env):
    out = run(env, os.path.join(EXAMPLES, "ordo_devtools.py"))
    lines = out.splitlines()
    assert lines[0] == ("txn 1: normalize-title called because doc.title wrote doc.title, word-count called because "
                        "doc.text wrote doc.words, window-title called because doc.title, status-line called because "
                        "doc.title/doc.words wrote ui.status, status-bar called because ui.status, undo-log called "
                        "because doc.title/doc.text/doc.words/ui.status")
    assert lines[1].startswith("txn 2: word-count called because doc.text wrote doc.words, status-line called")
    assert "status: Songs: 4 words" in lines


def test_schema_example(library):
    e = dict(os.environ, ORDO_LIBRARY=library)
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ordo_schema.py")], capture_output=True, text=True,
                       timeout=60, env=e)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "mode before any write: list (stored: False)"
    assert out[1:3] == ["header: Songs, 448 s (txn 1)", "header: Songs, 518 s (txn 2)"]
    assert 'refused: keypath "playlist.titel" is not declared in the schema; did you mean "playlist.title"?' in out
    assert ('refused: keypath "playlist.tracks.t1.duration": the value -5 is below min 0 in the schema '
            '(declared as "playlist.tracks.*.duration")') in out
