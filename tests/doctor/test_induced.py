"""Real failures induced with real torchrun (gloo, CPU), each diagnosed with its evidence line.

Each scenario runs in its own network namespace (tests/doctor/induce.py) so they run side by side: the
module starts them all at once and each test checks one. The oom.host cases need the agents and the
launcher and live in test_induced_cluster.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster.fixtures import skip_or_fail
from tests.doctor.induce import Namespace, NodeSpec, netns_problem, run_nodes
from tui.cli import main as ftwiz_main
from tui.doctor import Diagnosis, diagnose_files

PORT = 29400
# One worker runs every scenario once (the module fixture); split over two, each ran all of them (~2 min each).
pytestmark = pytest.mark.xdist_group("induced")


def _require() -> None:
    skip_or_fail(netns_problem(), "the induced-failure tests")


def _two_nodes(*args: str, node1_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> list[NodeSpec]:
    """node0 with ranks 0-1 (the rendezvous host), node1 with one rank (rank 2 once it joins)."""
    return [NodeSpec("node0", 2, True, args=args, env=env or {}),
            NodeSpec("node1", 1, False, args=node1_args or args, env=env or {})]


def _healthy(ns: Namespace, d: Path) -> None:
    run_nodes(ns, d, PORT, _two_nodes("--steps", "3"), run_id="ok")


def _code(ns: Namespace, d: Path) -> None:
    # node1 joins last so it holds rank 2: start it a moment after node0 via the rendezvous order.
    run_nodes(ns, d, PORT, _two_nodes("--fail", "code"), run_id="code")


def _nan(ns: Namespace, d: Path) -> None:
    run_nodes(ns, d, PORT, _two_nodes("--fail", "nan"), run_id="nan")


def _data(ns: Namespace, d: Path) -> None:
    present = d / "data" / "train.jsonl"
    present.parent.mkdir(parents=True)
    present.write_text('{"text": "hello"}\n')
    run_nodes(ns, d, PORT, _two_nodes("--data", str(present), node1_args=("--data", str(d / "node1-data" / "train.jsonl"))), run_id="data")


def _disk(ns: Namespace, d: Path) -> None:
    tiny = d / "tiny"
    tiny.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tiny)], check=True)
    try:
        run_nodes(ns, d, PORT, _two_nodes("--fail", "disk", "--out", str(tiny), "--steps", "2"), run_id="disk")
    finally:
        subprocess.run(["umount", "-l", str(tiny)], check=False)


def _port(ns: Namespace, d: Path) -> None:
    holder = ns.popen(["python3", "-c", f"import socket,time; s=socket.socket(); s.bind(('0.0.0.0',{PORT})); s.listen(); print('held', flush=True); time.sleep(300)"],
                      stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        run_nodes(ns, d, PORT, [NodeSpec("node0", 2, True)], run_id="port", timeout=90)
    finally:
        holder.kill()
        holder.wait(10)


def _iface(ns: Namespace, d: Path) -> None:
    run_nodes(ns, d, PORT, _two_nodes("--steps", "2", env={"GLOO_SOCKET_IFNAME": "nosuch0"}), run_id="iface")


def _rendezvous(ns: Namespace, d: Path) -> None:
    # node1 reaches the master at 127.0.0.2; the firewall drops that address's rendezvous port only.
    rules = (f"table inet ftwiz_doctor {{\n chain input {{\n  type filter hook input priority 0;\n"
             f"  ip daddr 127.0.0.2 tcp dport {PORT} drop\n }}\n}}\n")
    ns.run(["nft", "-f", "-"], input=rules, text=True, check=True)
    nodes = [NodeSpec("node0", 2, True, rdzv_extra="join_timeout=25"),
             NodeSpec("node1", 1, False, endpoint="127.0.0.2", rdzv_extra="read_timeout=8,join_timeout=25")]
    run_nodes(ns, d, PORT, nodes, run_id="rdzv", timeout=90)


SCENARIOS: dict[str, Callable[[Namespace, Path], None]] = {
    "healthy": _healthy, "code": _code, "nan": _nan, "data": _data, "disk": _disk, "port": _port, "iface": _iface, "rendezvous": _rendezvous,
}


@pytest.fixture(scope="module")
def induced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run every scenario (three at a time), each in its own namespace; their log folders by name."""
    _require()
    base = tmp_path_factory.mktemp("induced")

    def one(name: str) -> Path:
        folder = base / name
        folder.mkdir()
        with Namespace() as ns:
            SCENARIOS[name](ns, folder)
        return folder

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(SCENARIOS, pool.map(one, SCENARIOS), strict=True))


def _diagnose(folder: Path) -> list[Diagnosis]:
    return diagnose_files(sorted(folder.glob("node*.log")))


def _evidence(diag: Diagnosis) -> str:
    return "\n".join(f"{e.file}:{e.line}: {e.text}" for e in diag.evidence)


def test_healthy_run_says_nothing_is_wrong(induced, capsys):
    logs = sorted(str(p) for p in induced["healthy"].glob("node*.log"))
    assert "step 3 loss:" in "".join(Path(p).read_text() for p in logs)
    assert ftwiz_main(["--why-log", *logs]) == 0
    assert capsys.readouterr().out.startswith("no diagnosis")


def test_code_error_on_rank_2_names_file_and_line_and_demotes_the_resets(induced):
    found = _diagnose(induced["code"])
    first = found[0]
    assert (first.cause, first.node, first.rank) == ("code.error", "node1", 2), [d.as_dict() for d in found]
    assert "train.py:27 in check_batch" in first.explanation and "ValueError: batch on rank 2 has no labels" in first.explanation
    assert any(e.text == "ValueError: batch on rank 2 has no labels" for e in first.evidence)
    echoes = found[1:]
    assert echoes and all(d.echo and d.cause == "net.peer_lost" and d.node == "node0" for d in echoes), [d.as_dict() for d in echoes]


def test_nan_loss(induced):
    first = _diagnose(induced["nan"])[0]
    assert first.cause == "loss.nan", _evidence(first)
    assert any("loss: inf" in e.text or "loss: nan" in e.text for e in first.evidence)


def test_dataset_missing_on_one_node(induced):
    first = _diagnose(induced["data"])[0]
    assert (first.cause, first.node) == ("data.invalid", "node1"), _evidence(first)
    assert any("node1-data/train.jsonl" in e.text for e in first.evidence)


def test_checkpoint_on_a_full_tmpfs(induced):
    first = _diagnose(induced["disk"])[0]
    assert (first.cause, first.node, first.rank) == ("disk.full", "node0", 0), _evidence(first)
    assert any("No space left on device" in e.text for e in first.evidence)


def test_rendezvous_port_held_by_another_listener(induced):
    first = _diagnose(induced["port"])[0]
    assert (first.cause, first.node) == ("port.in_use", "node0"), _evidence(first)
    assert str(PORT) in first.fix and "address already in use" in _evidence(first).lower()


def test_missing_socket_interface(induced):
    first = _diagnose(induced["iface"])[0]
    assert first.cause == "net.interface", _evidence(first)
    assert "Unable to find address for: nosuch0" in _evidence(first)


def test_firewalled_rendezvous_port(induced):
    found = _diagnose(induced["rendezvous"])
    first = found[0]
    assert (first.cause, first.node) == ("rendezvous", "node1"), [d.as_dict() for d in found]
