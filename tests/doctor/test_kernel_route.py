"""``GET /v1/kernel/oom/{pid}`` on a real agent: a real OOM kill in a memory cgroup is found, an outside
SIGKILL is not, and the route wants the token like every other one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from agent.routers.kernel import find_oom_kill
from tests.agent.conftest import AgentProcess, agent, agent_dir  # noqa: F401  (fixtures)
from tests.doctor.cgroup import MemoryCgroup, require_cgroups

# Lines as this machine's kernel (6.18) logged a cgroup OOM kill, recorded here with /dev/kmsg.
_RECORDED = [
    "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/doctor-probe,task_memcg=/doctor-probe,task=python3,pid=7082,uid=0",
    "Memory cgroup out of memory: Killed process 7082 (python3) total-vm:221368kB, anon-rss:65280kB, file-rss:6644kB, shmem-rss:0kB, UID:0 pgtables:196kB oom_score_adj:0",
]

_HOG = "import os, sys; sys.stdin.readline(); x = bytearray(512 << 20); print('survived', flush=True)"


def test_find_oom_kill_on_recorded_lines():
    assert find_oom_kill(_RECORDED, 7082) == _RECORDED[2]
    assert find_oom_kill(_RECORDED[:2], 7082) == _RECORDED[1]  # the summary line alone also names it
    assert find_oom_kill(_RECORDED, 708) is None and find_oom_kill(_RECORDED, 70821) is None


def test_route_needs_the_token(agent):  # noqa: F811
    import httpx

    answer = httpx.get(agent.url + "/v1/kernel/oom/1", timeout=10, trust_env=False)
    assert answer.status_code == 401


def test_a_cgroup_oom_kill_is_found_and_an_outside_sigkill_is_not(agent):  # noqa: F811
    require_cgroups()
    with MemoryCgroup(64 << 20) as cgroup:
        hog = subprocess.Popen([sys.executable, "-c", _HOG], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        cgroup.add(hog.pid)
        assert hog.stdin is not None
        hog.stdin.write("go\n")
        hog.stdin.flush()
        assert hog.wait(60) == -signal.SIGKILL
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(other.pid, signal.SIGKILL)
    other.wait(10)
    with agent.client() as http:
        oom = http.get(f"/v1/kernel/oom/{hog.pid}").json()
        plain = http.get(f"/v1/kernel/oom/{other.pid}").json()
    assert oom["found"] is True and f"Killed process {hog.pid} " in oom["line"] and oom["source"] == "/dev/kmsg", oom
    assert plain["found"] is False and plain["error"] is None, plain
