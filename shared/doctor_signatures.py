"""The failure doctor's knowledge: cause ids, log signatures and the lines that are normal (pure data).

Each :class:`Signature` is one row: the cause id from the fixed vocabulary (:data:`CAUSES`), a compiled
pattern matched against one log line, a weight (how specific the line is: a higher weight wins between
two signatures of the same line), whether the line is an *echo* (what every surviving rank prints after
another rank died: demoted below any root cause), and the public thread where the line was seen.
Adding a signature is adding a row here; ``tui/doctor`` applies the table and never names a pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CAUSES", "FIXES", "NORMAL", "SIGNATURES", "Signature", "is_normal", "match_line"]

#: The documented cause ids and what each means (README's table; scripts and CI act on these ids).
CAUSES: dict[str, str] = {
    "oom.gpu": "CUDA (GPU) out of memory",
    "oom.host": "a rank killed by the kernel's OOM killer or another SIGKILL that ftwiz did not send (exit -9 / 137)",
    "nccl.timeout": "a collective watchdog timeout: some rank stopped taking part (NCCL or Gloo timeout)",
    "rendezvous": "the rendezvous / TCPStore could not be reached, timed out or was closed",
    "port.in_use": "the rendezvous or master port is already taken (address already in use)",
    "net.interface": "the socket interface is wrong, missing or resolves differently (NCCL/Gloo ifname, hostname, address family)",
    "net.peer_lost": "a connection was reset or closed by a peer: another rank died or its node dropped first",
    "p2p.topology": "GPU peer-to-peer / PCIe ACS / IOMMU / InfiniBand transport trouble (NCCL_P2P_DISABLE, NCCL_IB_DISABLE)",
    "version.skew": "driver, CUDA, torch, NCCL or library versions that differ between nodes or are too old for each other",
    "disk.full": "no space left on device (checkpoint or cache writes)",
    "hub.access": "model or dataset not found, gated or unauthorized on the Hugging Face Hub, or offline without a local copy",
    "loss.nan": "loss or gradients became NaN/inf",
    "ddp.usage": "DDP/FSDP usage errors: unused parameters, parameters differing between ranks, wrapping/sharding errors",
    "data.invalid": "the dataset is missing, unreadable or malformed on some node",
    "code.error": "an exception in the training code itself (name file:line and the exception)",
    "slurm.time_limit": "Slurm ended the job at its time limit (or --deadline): every process of it was killed",
    "slurm.node_fail": "Slurm ended the job because a node failed, was set DOWN or did not boot",
    "slurm.preempted": "Slurm preempted the job for a higher-priority one",
    "slurm.cancelled": "the Slurm job was cancelled from outside (scancel by the user or an administrator)",
    "unknown": "none of the above: show the evidence found and say so",
}

#: The generic fix per cause; the doctor replaces it with a computed one where the run record allows.
FIXES: dict[str, str] = {
    "oom.gpu": "lower [job] micro_batch_size (raise grad_accum_steps to keep the global batch), turn on gradient checkpointing, "
    "or switch method to \"qlora\"; `ftwiz --check` shows the estimator's fit per GPU",
    "oom.host": "the node ran out of host RAM: lower micro_batch_size or dataloader workers, add swap or RAM, or run fewer ranks on that node",
    "nccl.timeout": "find the rank that stopped first (the first diagnosis below the timeout, or a stall's stack dump); if rank 0 was "
    "still preparing data, preprocess first or raise ddp_timeout",
    "rendezvous": "make the rendezvous port reachable from every node (firewall: `nft list ruleset` / `ufw status` on the master); "
    "`ftwiz --check` tests it with a listener",
    "port.in_use": "free the port on the master (`ss -ltnp 'sport = :PORT'` names the holder) or set [cluster] rendezvous_port to a free one",
    "net.interface": "set [nccl] socket_ifname to an interface that exists on every node and reaches the master (`ip -br addr`); "
    "`ftwiz --check` resolves it",
    "net.peer_lost": "an echo: another rank died or its node dropped first; look at the earliest failure of the other ranks",
    "p2p.topology": "set NCCL_P2P_DISABLE=1 (PCIe ACS/IOMMU) or NCCL_IB_DISABLE=1 (IB) in [nccl].env to get past it; "
    "then disable ACS / set iommu=pt, or fix the IB port",
    "version.skew": "install the same torch/CUDA/NCCL (and a driver new enough for them) on every node; `ftwiz --check` compares them",
    "disk.full": "free space on the node's output_dir / cache disk, or point [job] output_dir at a larger disk; lower save_total_limit",
    "hub.access": "run `huggingface-cli login` (or set HF_TOKEN) on every node and accept the model's licence, or point [job] model at a local copy",
    "loss.nan": "lower [job] learning_rate, add warm-up and gradient clipping (max_grad_norm), or use bf16 instead of fp16",
    "ddp.usage": "make every parameter take part in the loss, or pass find_unused_parameters=True; build the model the same way on every rank",
    "data.invalid": "make the dataset exist and parse on every node (same path, same file); fix the record the error names",
    "code.error": "fix the exception in the training code at the file and line named",
    "slurm.time_limit": "raise [slurm] time (within the partition's MaxTime), or checkpoint more often and continue with "
    "`ftwiz --launch --resume`",
    "slurm.node_fail": "`sinfo -R` says why the node is out; launch again with --resume, with sbatch_args = [\"--exclude=NODE\"] "
    "until the node is fixed",
    "slurm.preempted": "launch again with --resume; a partition or QOS that is not preemptible keeps the run (ask the admins)",
    "slurm.cancelled": "`sacct -j JOB -o JobID,State,Reason` says who cancelled it; `ftwiz --launch --resume` continues",
    "unknown": "read the evidence lines; rerun with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL for more",
}


@dataclass(frozen=True)
class Signature:
    """One failure line: its cause, pattern, weight, whether it is an echo, and where it was seen."""

    cause: str
    """A cause id from :data:`CAUSES`."""
    pattern: re.Pattern[str]
    """Matched with ``search`` against one log line (rank prefixes already stripped)."""
    weight: int
    """How telling the line is (1 weak .. 10 certain); ties between causes go to the higher weight."""
    echo: bool
    """True when surviving ranks print it after another rank's death (demoted below root causes)."""
    source: str
    """The public thread (or document) where this line was seen."""
    fix: str = ""
    """A fix for this line in particular (else the cause's fix in :data:`FIXES`)."""


def _sig(cause: str, pattern: str, weight: int, source: str, *, echo: bool = False, fix: str = "") -> Signature:
    return Signature(cause, re.compile(pattern, re.IGNORECASE), weight, echo, source, fix)


_NO_GPU_FIX = ("the script asks for NCCL where this node has no GPU (or its torch has no NCCL): use the gloo backend there — "
               "`--backend gloo` for a script that takes it, or init_process_group(\"nccl\" if torch.cuda.is_available() else \"gloo\") "
               "— or run that node's ranks on CPU with `[[nodes]] cpu_ranks = N`")

SIGNATURES: tuple[Signature, ...] = (
    # --- GPU memory
    _sig("oom.gpu", r"CUDA out of memory|OutOfMemoryError: CUDA|CUBLAS_STATUS_ALLOC_FAILED", 10,
         "https://github.com/RLinf/RLinf/issues/255"),
    # --- host memory (the kernel's own words, when a log carries dmesg lines)
    _sig("oom.host", r"Out of memory: Killed process|oom-kill:|Memory cgroup out of memory", 9,
         "https://www.kernel.org/doc/html/latest/admin-guide/cgroup-v2.html (memory.max: the OOM killer is invoked)"),
    _sig("oom.host", r"Detected \d+ oom[-_]kill events?|task \d+: Out Of Memory|JobState=OUT_OF_MEMORY\b", 9,
         "https://github.com/hafs-community/HAFS/issues/101"),
    # --- Slurm ended the job (slurmstepd's words, and ftwiz's runs/<id>/_slurm.log: JobState=...)
    _sig("slurm.time_limit", r"DUE TO TIME LIMIT|JobState=(?:TIMEOUT|DEADLINE)\b", 10,
         "https://github.com/ZettaAI/zetta_utils/issues/671"),
    _sig("slurm.node_fail", r"DUE TO NODE FAILURE|JobState=(?:NODE_FAIL|BOOT_FAIL)\b", 10,
         "https://github.com/aiidateam/aiida-core/pull/5866"),
    _sig("slurm.node_fail", r"error: Node failure on \S+", 9, "https://github.com/nebius/soperator/issues/854"),
    _sig("slurm.preempted", r"DUE TO PREEMPTION|JobState=PREEMPTED\b", 10,
         "https://github.com/SystemsGenetics/GEMmaker/pull/242"),
    _sig("slurm.cancelled", r"JobState=CANCELLED\b|\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ \*\*\*", 6,
         "https://github.com/Snakemake-Profiles/slurm/pull/22"),
    # --- watchdog timeouts (a symptom: some other rank stopped first)
    _sig("nccl.timeout", r"Watchdog caught collective operation timeout", 6,
         "https://github.com/hiyouga/LlamaFactory/issues/7396", echo=True),
    _sig("nccl.timeout", r"\[Rank \d+\] .*timed out|Timed out waiting \d+ms for recv operation|"
         r"Gloo .*timed out|Socket Timeout|NCCL communicator was aborted", 5,
         "https://github.com/pytorch/pytorch/issues/118369", echo=True),
    # --- rendezvous
    _sig("rendezvous", r"RendezvousConnectionError|The connection to the C10d store has failed", 8,
         "https://github.com/pytorch/pytorch/issues/67547"),
    _sig("rendezvous", r"RendezvousTimeoutError|The client socket has timed out after \d+ ?ms while trying to connect|"
         r"connect\(\) timed out\. Original timeout", 8,
         "https://github.com/intel/torch-xpu-ops/issues/2119"),
    _sig("rendezvous", r"RendezvousClosedError", 3, "https://github.com/kubeflow/trainer/issues/1638", echo=True),
    # --- port taken
    _sig("port.in_use", r"errno: 98 - Address already in use|EADDRINUSE|address already in use", 10,
         "https://github.com/meta-pytorch/torchtune/issues/392"),
    # --- interface
    _sig("net.interface", r"no socket interface found|no NCCL_SOCKET_IFNAME interface found|"
         r"is neither AF_INET\(2\) nor AF_INET6\(10\)|Unable to find address for|"
         r"GLOO_SOCKET_IFNAME|Socket creation failed : Address family not supported", 9,
         "https://github.com/NVIDIA/nccl/issues/1837"),
    _sig("net.interface", r"Bootstrap : no socket interface|Cannot assign requested address", 7,
         "https://github.com/NVIDIA/nccl/issues/210"),
    # --- peers gone (echoes)
    _sig("net.peer_lost", r"Connection reset by peer|Connection closed by peer|Broken pipe|"
         r"remote process exited or there was a network error|ncclRemoteError", 2,
         "https://github.com/RVC-Project/Retrieval-based-Voice-Conversion-WebUI/issues/1882", echo=True),
    # --- P2P / IB transport
    _sig("p2p.topology", r"NET/IB ?: Got completion from peer .* status=\d+|ibv_create_qp failed|ibv_modify_qp failed|"
         r"cudaErrorPeerAccess|peer access is not supported|NCCL WARN .*P2P|IO_PAGE_FAULT", 8,
         "https://github.com/NVIDIA/nccl/issues/1129"),
    # --- versions
    _sig("version.skew", r"NVIDIA driver on your system is too old|CUDA driver version is insufficient|"
         r"NCCL version mismatch|version mismatch|was compiled against|undefined symbol: nccl|"
         r"no kernel image is available for execution on the device", 9,
         "https://github.com/lllyasviel/Fooocus/issues/1313"),
    # --- NCCL asked for where there is no GPU (a CPU-only torch, a node without GPUs)
    _sig("version.skew", r"Distributed package doesn't have NCCL built in", 9,
         "torch/distributed/distributed_c10d.py raises it when torch was built without NCCL (CPU-only, Windows, macOS wheels)", fix=_NO_GPU_FIX),
    _sig("code.error", r"ProcessGroupNCCL is only supported with GPUs|NCCL backend requires? (?:a )?GPU", 9,
         "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp raises it for init_process_group('nccl') with no GPU visible", fix=_NO_GPU_FIX),
    # --- disk
    _sig("disk.full", r"No space left on device|\[Errno 28\]|StorageFull|Disk quota exceeded|\[Errno 122\]", 10,
         "https://github.com/hiyouga/LlamaFactory/issues/5155"),
    # --- hub
    _sig("hub.access", r"GatedRepoError|Cannot access gated repo|401 Client Error|403 Client Error|"
         r"RepositoryNotFoundError|is not a valid model identifier|LocalEntryNotFoundError|"
         r"couldn't connect to 'https://huggingface\.co'", 9,
         "https://github.com/ml-explore/mlx-examples/issues/759"),
    # --- loss
    _sig("loss.nan", r"'loss': '?nan'?|'grad_norm': '?nan'?|\bloss[:=]\s*-?(?:nan|inf)\b|Loss is NaN|nan loss|"
         r"detected (?:a )?(?:nan|inf)|found NaN|non-finite loss|\"loss\":\s*(?:null|NaN)", 8,
         "https://github.com/AnswerDotAI/ModernBERT/issues/233"),
    # --- DDP / FSDP usage
    _sig("ddp.usage", r"Expected to have finished reduction in the prior iteration|find_unused_parameters|"
         r"parameters that were not used in producing loss|DDP expects same model across all ranks|"
         r"appears not to match (?:strides|sizes) of the same param|FSDP .* (?:wrap|shard)", 9,
         "https://github.com/pytorch/pytorch/issues/57473"),
    # --- data (the workloads' own error lines, and the usual Python ones when reading a dataset)
    _sig("data.invalid", r"ftwiz: error \(rank \d+\): (?:dataset |[^ ]*\.jsonl? line|record at line)|"
         r"dataset \S+ (?:not found|is a directory|has no records)|\.jsonl? line \d+: not valid JSON|"
         r"DatasetGenerationError|datasets\.exceptions|JSONDecodeError|"
         r"(?:FileNotFoundError|No such file or directory).*\.(?:jsonl?|csv|parquet|arrow|tsv)\b", 8,
         "agent/workloads/data.py (ftwiz's own dataset errors)"),
)

#: Lines that look alarming but are normal: never evidence of a failure.
NORMAL: tuple[re.Pattern[str], ...] = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"NCCL INFO",                           # NCCL_DEBUG=INFO chatter
    r"Gradient overflow\. Skipping step",   # fp16 loss-scale warm-up (apex / deepspeed)
    r"DeprecationWarning|FutureWarning|UserWarning|is deprecated",
    r"Setting OMP_NUM_THREADS environment variable",
    r"^\*{5,}$",
))


def is_normal(text: str) -> bool:
    """Whether ``text`` is a known-normal line (INFO chatter, fp16 warm-up, deprecation warnings)."""
    return any(p.search(text) for p in NORMAL)


def match_line(text: str) -> list[Signature]:
    """Every signature ``text`` matches, strongest first (none for a known-normal line)."""
    if is_normal(text):
        return []
    hits = [s for s in SIGNATURES if s.pattern.search(text)]
    return sorted(hits, key=lambda s: (s.echo, -s.weight))
