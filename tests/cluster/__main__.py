"""``python -m tests.cluster up [N] [--config PATH]``: keep a namespace cluster up for hands-on work.

Prints every node's address, agent URL and ssh command, writes an ``ftwiz.toml`` for it, and tears it
all down on Ctrl-C (or when killed: the watchdog). ``python -m tests.cluster reap`` removes runs whose
owner is gone.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from tests.cluster import reaper
from tests.cluster.harness import Cluster, ClusterError


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build N nodes and keep them until Ctrl-C")
    up.add_argument("n", nargs="?", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--config", default=None, help="write an ftwiz.toml for the cluster here")
    up.add_argument("--no-agent", action="store_true", help="sshd only")
    reap = sub.add_parser("reap", help="remove runs whose owner process is gone")
    reap.add_argument("--all", action="store_true", help="also runs whose owner still runs")
    args = parser.parse_args(argv)
    if args.command == "reap":
        return reaper.main(["reap", *(["--all"] if args.all else [])])
    try:
        cluster = Cluster.create(args.n, agent=not args.no_agent)
    except ClusterError as exc:
        print(f"could not build the cluster: {exc}", file=sys.stderr)
        return 1
    with cluster:
        print(f"cluster {cluster.run_id}: subnet {cluster.subnet}, up in {cluster.setup_seconds['total']:.2f} s")
        print(f"token file {cluster.token_path}; known_hosts {cluster.known_hosts_path}")
        for node in cluster.nodes:
            print(f"  {node.name}  {node.address}  netns {node.netns}  agent {node.agent_url}")
            print(f"      {shlex.join(node.ssh_argv())}")
        if args.config:
            print(f"config written to {cluster.write_config(args.config)}")
        print("Ctrl-C tears it down.", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("tearing down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
