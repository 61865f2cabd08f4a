"""Entry point: ``python -m ftwiz_workloads --spec job.json`` on every rank (torchrun starts it).

    python -m torch.distributed.run <opts> -m ftwiz_workloads --spec RUNDIR/job.json [--resume auto]
    python -m ftwiz_workloads --spec job.json              # one process, no torchrun (rank 0 of 1)
    python -m ftwiz_workloads --make-tiny-model DIR
    python -m ftwiz_workloads --make-tiny-dataset FILE [--records N]

Exit codes: 0 ok, 2 bad input (one clear ``error`` line, no traceback), 3 all-reduce verification
failed, 1 unexpected (``error`` line, then the traceback on stderr).
"""

from __future__ import annotations

import argparse
import traceback

from .dist import (
    destroy_process_group,
    die_with_parent,
    exit_without_teardown,
    init_process_group,
    ranks_from_env,
    register_stack_dump,
)
from .errors import WorkloadError, report_error
from .spec import load_spec


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the workload or the tiny-model/dataset builder."""
    parser = argparse.ArgumentParser(prog="python -m ftwiz_workloads", description="ftwiz's built-in workloads (run under torchrun).")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--spec", metavar="PATH", help="the job spec JSON written by the launcher")
    what.add_argument("--make-tiny-model", metavar="DIR", help="write the tiny test Llama and its tokenizer to DIR")
    what.add_argument("--make-tiny-dataset", metavar="FILE", help="write a tiny JSONL dataset to FILE")
    parser.add_argument("--resume", choices=["auto"], help='continue from the latest checkpoint (overrides the spec\'s "resume")')
    parser.add_argument("--records", type=int, default=300, help="records for --make-tiny-dataset (default 300)")
    args = parser.parse_args(argv)
    if args.make_tiny_model:
        from .tiny import main as tiny_main

        return tiny_main(["model", args.make_tiny_model])
    if args.make_tiny_dataset:
        from .tiny import main as tiny_main

        return tiny_main(["dataset", args.make_tiny_dataset, "--records", str(args.records)])
    return run_spec(args.spec, resume=args.resume)


def run_spec(path: str, *, resume: str | None = None) -> int:
    """Run the workload the spec names on this rank; every failure ends as an ``error`` line and a code."""
    register_stack_dump()
    die_with_parent()
    ranks = ranks_from_env()
    try:
        spec = load_spec(path)
        if resume:
            spec.resume = resume
        plan = None
        if spec["workload"] == "sft":
            from . import sft

            plan = sft.preflight(spec)  # before the rendezvous: a bad input must not leave peers waiting
        backend = init_process_group(ranks, workload=spec["workload"], timeout_s=spec.dist_timeout_s)
        if spec["workload"] == "allreduce":
            from . import allreduce

            code = allreduce.run(spec, ranks, backend)
        elif spec["sharding"] == "fsdp" or spec["balance"] == "auto":
            from . import fsdp_train

            assert plan is not None, "preflight ran for every sft workload above"
            code = fsdp_train.run(spec, ranks, plan)
        else:
            assert plan is not None, "preflight ran for every sft workload above"
            code = sft.run(spec, ranks, plan)
    except WorkloadError as exc:
        report_error(exc.message, rank=ranks.rank)
        return exc.exit_code
    except Exception as exc:  # a bug or an environment failure: keep the traceback, it is needed to fix it
        report_error(f"unexpected {type(exc).__name__}: {exc}", rank=ranks.rank)
        traceback.print_exc()
        return 1
    if code == 0:
        destroy_process_group()
    return code


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown once the rank's work and its last line are out.

    A rank that trained to the end and printed ``done`` was seen killed by SIGABRT while exiting, about one run
    in a few hundred under load (tests/workloads/test_fsdp_cluster.py); see ``dist.exit_without_teardown``.
    """
    import logging

    logging.shutdown()
    exit_without_teardown(code)


if __name__ == "__main__":
    exit_now(main())
