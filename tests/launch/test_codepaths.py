"""Paths into the shipped copy of the user's code mapped back to code_dir (pure)."""

from __future__ import annotations

from shared.codepaths import CodePathMap

TRACEBACK = ('  File "/srv/a/ftwiz/runs/r1/code/train.py", line 12, in <module>\n'
             '  File "/srv/b/ftwiz/runs/r1/code/lib/model.py", line 3, in forward\n'
             '  File "/usr/lib/python3.11/runpy.py", line 291, in run_path\n')


def test_tracebacks_from_every_node_name_the_users_files():
    paths = CodePathMap.for_run(["/srv/a/ftwiz/runs/r1", "/srv/b/ftwiz/runs/r1/", None], "/home/me/proj/")
    mapped = paths.map(TRACEBACK)
    assert '"/home/me/proj/train.py", line 12' in mapped and '"/home/me/proj/lib/model.py", line 3' in mapped
    assert "/usr/lib/python3.11/runpy.py" in mapped  # not the user's code: unchanged
    assert paths.map("/srv/a/ftwiz/runs/r1/codex/x.py") == "/srv/a/ftwiz/runs/r1/codex/x.py"


def test_nothing_shipped_maps_nothing_and_the_record_gives_the_same_map():
    assert CodePathMap.for_run(["/srv/a/ftwiz/runs/r1"], None).map(TRACEBACK) == TRACEBACK
    record = {"nodes": {"a": {"rundir": "/srv/a/ftwiz/runs/r1"}, "b": {"rundir": "/srv/b/ftwiz/runs/r1"}},
              "code": {"root": "/home/me/proj", "shipped_to": "<rundir>/code"}}
    assert CodePathMap.from_record(record) == CodePathMap.for_run(["/srv/b/ftwiz/runs/r1", "/srv/a/ftwiz/runs/r1"], "/home/me/proj")
    assert CodePathMap.from_record({"nodes": {}, "code": {"root": None}}).map(TRACEBACK) == TRACEBACK


def test_the_shipped_directory_itself_maps_too():
    paths = CodePathMap.for_run(["/w/runs/r1"], "/home/me/proj")
    assert paths.map("trian.py not found in /w/runs/r1/code: did you mean train.py?") == \
        "trian.py not found in /home/me/proj: did you mean train.py?"
