"""torchrun without the traceback wall: ``python -m ftwiz_workloads.launch <torchrun args>``.

Plain torchrun ends every failed run with a ~25-line Python traceback of its own (ChildFailedError), even
when a worker already said exactly what was wrong (a bad dataset line, QLoRA on CPU). This wrapper runs
the same ``torch.distributed.run`` code and turns its end states into short messages:

- a worker failed → torchrun's failure summary (rank, exit code, signal) without the traceback, and the exit
  code of the first failed worker when it exited with one (2 = bad input, 3 = verification), else 1;
- the agent was signalled (the launcher's stop) → one line, exit 128 + signal;
- the rendezvous failed → one line naming the endpoint and the usual causes, exit 1.

Arguments are torchrun's, unchanged, e.g.::

    python -m ftwiz_workloads.launch --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d \\
        --rdzv-endpoint=10.0.0.1:29500 --rdzv-id=RUN -m ftwiz_workloads --spec RUNDIR/job.json
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with ``argv``; return an exit code instead of raising."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import parse_args, run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        print(exc.format_msg(), file=sys.stderr, flush=True)
        print(f"ftwiz: worker rank {rank} failed first (exit code {failure.exitcode}); its own error line is above", file=sys.stderr, flush=True)
        return failure.exitcode if failure.exitcode > 0 else 1
    except SignalException as exc:
        print(f"ftwiz: torchrun stopped by {exc.sigval.name}; its workers were stopped with it", file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    except RendezvousError as exc:
        endpoint = getattr(args, "rdzv_endpoint", "") or f"{args.master_addr}:{args.master_port}"
        print(f"ftwiz: rendezvous at {endpoint} failed: {type(exc).__name__}: {exc}. Check that every node reaches that "
              "port, and that each node's --local-addr is its own address (the master with --rdzv-conf=is_host=true)",
              file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
