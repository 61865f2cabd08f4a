"""``POST /v1/runs/{run_id}/stop`` kills exactly the processes that carry the run id and this node's name."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import httpx
import pytest

from shared.models import RunStopResult

from .conftest import AgentProcess, wait_for


def run_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


NODE = "plain"
"""The session agent's ``--node-name``: the launcher tags every process of a run with ``FTWIZ_NODE`` too."""


def start(argv: list[str], run: str | None, *, new_session: bool = True, node: str = NODE) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key not in ("FTWIZ_RUN_ID", "FTWIZ_NODE")}
    if run is not None:
        env["FTWIZ_RUN_ID"] = run
        env["FTWIZ_NODE"] = node
    return subprocess.Popen(argv, env=env, start_new_session=new_session, stdin=subprocess.DEVNULL)


def environ_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return entry in handle.read().split(b"\0")
    except OSError:
        return False


def stop(client: httpx.Client, run: str) -> RunStopResult:
    response = client.post(f"/v1/runs/{run}/stop")
    assert response.status_code == 200, response.text
    return RunStopResult.model_validate_json(response.content)


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def test_stop_kills_the_run_and_spares_others(client: httpx.Client, processes) -> None:
    run, other = run_id(), run_id()
    target = start(["sleep", "300"], run)
    bystander = start(["sleep", "300"], other)
    unrelated = start(["sleep", "300"], None)
    other_node = start(["sleep", "300"], run, node="another-node")  # same run, another node sharing this PID space
    processes += [target, bystander, unrelated, other_node]
    wait_for(lambda: environ_has(target.pid, f"FTWIZ_RUN_ID={run}".encode()), timeout_s=10, what="the sleep to exec")
    wait_for(lambda: environ_has(other_node.pid, f"FTWIZ_RUN_ID={run}".encode()), timeout_s=10, what="the other node's sleep to exec")
    result = stop(client, run)
    assert result.run_id == run
    assert [(k.pid, k.name, k.signal, k.gone) for k in result.killed] == [(target.pid, "sleep", "SIGTERM", True)]
    assert result.killed[0].cmdline == "sleep 300"
    assert result.remaining == []
    assert target.wait(10) == -15
    assert bystander.poll() is None and unrelated.poll() is None and other_node.poll() is None


def test_stop_reaches_the_whole_process_group(client: httpx.Client, processes) -> None:
    """A launcher-style group: a shell leading children that all carry the run id."""
    run = run_id()
    leader = start(["bash", "-c", "sleep 300 & sleep 300 & wait"], run)
    processes.append(leader)
    children = _two_sleeping_children(leader, run)
    result = stop(client, run)
    assert sorted(k.pid for k in result.killed) == sorted([leader.pid, *children])
    assert all(k.gone for k in result.killed) and result.remaining == []
    leader.wait(10)


def test_stop_rescans_for_a_process_the_first_scan_could_not_read(processes, monkeypatch) -> None:
    """A worker between fork and exec shows no environment to the first scan: the scan after SIGTERM finds it.

    Real processes, in the test's own process (no agent): the first scan is made to miss one of the group."""
    from agent import reaper

    run = run_id()
    leader = start(["bash", "-c", "sleep 300 & sleep 300 & wait"], run)
    processes.append(leader)
    children = _two_sleeping_children(leader, run)
    real, scans = reaper.find_run_processes, []

    def first_misses_one(run_id: str, *, node: str | None = None) -> list[int]:
        found = real(run_id, node=node)
        scans.append(found)
        return [pid for pid in found if pid != children[1]] if len(scans) == 1 else found

    monkeypatch.setattr(reaper, "find_run_processes", first_misses_one)
    result = reaper.stop_run(run, node=NODE, grace_s=5)
    assert len(scans) >= 2
    assert sorted(k.pid for k in result.killed) == sorted([leader.pid, *children])
    assert all(k.gone for k in result.killed) and result.remaining == [], result
    leader.wait(10)


def test_stop_escalates_to_sigkill(agent: AgentProcess, client: httpx.Client, processes) -> None:
    run = run_id()
    stubborn = start([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"], run)
    processes.append(stubborn)
    wait_for(lambda: environ_has(stubborn.pid, f"FTWIZ_RUN_ID={run}".encode()) and _ignores_sigterm(stubborn.pid), timeout_s=20, what="the handler")
    result = stop(client, run)  # the test agent runs with --stop-grace 1
    assert [(k.pid, k.signal, k.gone) for k in result.killed] == [(stubborn.pid, "SIGKILL", True)]
    assert stubborn.wait(10) == -9


def test_process_in_a_shared_group_is_signalled_alone(client: httpx.Client, processes) -> None:
    """A matching process in the test runner's own group: the group must not be signalled."""
    run = run_id()
    child = start(["sleep", "300"], run, new_session=False)
    processes.append(child)
    wait_for(lambda: environ_has(child.pid, f"FTWIZ_RUN_ID={run}".encode()), timeout_s=10, what="the sleep to exec")
    result = stop(client, run)
    assert [k.pid for k in result.killed] == [child.pid]
    assert child.wait(10) == -15  # and pytest, in the same group, is still here to see it


def test_unknown_run_kills_nothing(client: httpx.Client) -> None:
    result = stop(client, run_id())
    assert result.killed == [] and result.remaining == []


def test_the_agent_never_stops_itself(agent_dir) -> None:
    """An agent started inside a run carries the run id too; stopping the run spares it."""
    run = run_id()
    os.environ["FTWIZ_RUN_ID"] = run
    try:
        inside = AgentProcess(agent_dir, node_name="inside", extra_args=["--stop-grace", "1"])
    finally:
        del os.environ["FTWIZ_RUN_ID"]
    try:
        with inside.client() as http:
            result = stop(http, run)
            assert inside.process.pid not in [k.pid for k in result.killed]
            assert http.get("/healthz").status_code == 200
    finally:
        inside.stop()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def _two_sleeping_children(leader: subprocess.Popen, run: str) -> list[int]:
    """The leader's two children once both have exec'd sleep (a child between fork and exec shows no environment:
    the stop's rescan for one is tested apart)."""
    return wait_for(lambda: len(kids := _children(leader.pid)) == 2 and all(_execd_sleep(k, run) for k in kids) and kids,
                    timeout_s=10, what="two children running sleep")


def _execd_sleep(pid: int, run: str) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip() == "sleep" and environ_has(pid, f"FTWIZ_RUN_ID={run}".encode())
    except OSError:
        return False


def _ignores_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << 14))  # bit of signal 15
    return False


def test_worker_samples_carry_the_main_threads_cpu_demand() -> None:
    """``run_ns``/``wait_ns`` of a rank's root process (``/proc/PID/schedstat``): a busy loop is on a CPU or waiting
    for one nearly all the time, a sleeper almost never (your own code's straggler is decided from them)."""
    import time

    from nodeside.procmatch import proc_environ, stat_fields, worker_samples

    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0"}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], env=env)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**env, "RANK": "1"})
    try:
        def demand() -> dict[int, int]:
            rows = worker_samples([(p.pid, proc_environ(p.pid) or {}) for p in (busy, sleeper)])
            return {row["rank"]: row["run_ns"] + row["wait_ns"] for row in rows}

        # the sleeper past its start-up (imports are CPU): asleep, and its demand no longer moving
        wait_for(lambda: (stat_fields(sleeper.pid) or ["?"])[0] == "S" and demand()[1] == demand()[1], timeout_s=60, what="the sleeper asleep")
        first, began = demand(), time.monotonic()
        time.sleep(1.0)  # the span the shares are measured over
        last, wall = demand(), time.monotonic() - began
        assert (last[0] - first[0]) / 1e9 / wall > 0.8  # wanted a CPU, running or runnable, whatever the load
        assert (last[1] - first[1]) / 1e9 / wall < 0.2
    finally:
        busy.kill()
        sleeper.kill()
        busy.wait()
        sleeper.wait()
