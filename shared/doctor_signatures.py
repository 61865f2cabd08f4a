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
    until: re.Pattern[str] | None = None
    """For a wait or a retry: a later line of the same log that says it succeeded (the line is then no evidence)."""
    needs: re.Pattern[str] | None = None
    """For a line that is only a warning unless the run then dies of it: a later line of the same log that shows
    the death (without one the line is no evidence)."""
    recovered: re.Pattern[str] | None = None
    """For a value that may blip in a run's first logged steps (a nan grad norm while the fp16 loss scale settles): a
    line of the same log showing the value finite. A match before any such line is warm-up, no evidence once a finite
    value follows; a match after the run has shown finite values is evidence even if the value recovers."""
    repeats: bool = False
    """A match that stands alone in its log (after warm-up is set aside) is no evidence: a one-off that the run goes
    past (a skipped step), where the failure repeats on every step."""


def _sig(cause: str, pattern: str, weight: int, source: str, *, echo: bool = False, fix: str = "", until: str = "",
         needs: str = "", recovered: str = "", repeats: bool = False) -> Signature:
    return Signature(cause, re.compile(pattern, re.IGNORECASE), weight, echo, source, fix,
                     re.compile(until, re.IGNORECASE) if until else None, re.compile(needs) if needs else None,
                     re.compile(recovered, re.IGNORECASE) if recovered else None, repeats)


#: The process died without an exception of its own: a glog/absl FATAL line (``F0105 11:48:25.52 123 file.cc:65]``,
#: TensorFlow's ``2020-12-01 15:51:57.87: F tensorflow/...cc:49]``), an abort or a crash of the interpreter.
_PROCESS_DIED = (r"(?:^|[\s\[:>])F(?:\d{3,4} [\d:.]+(?: +\d+)?)? (?:\S+/)?[\w.-]+\.\w+:\d+\]|Aborted \(core dumped\)|"
                 r"Segmentation fault|Fatal Python error")


#: The process died of an exception (a traceback, an exception line), or of :data:`_PROCESS_DIED`'s crash; bitsandbytes'
#: missing 8-bit kernels (``'NoneType' object has no attribute 'cadam32bit_grad_fp32'``) count as its failing too.
_PYTHON_DIED = (r"Traceback \(most recent call last\)|^\s*[A-Za-z_][\w.]*(?:Error|Exception)\b|cadam32bit|" + _PROCESS_DIED)


_NO_GPU_FIX = ("the script asks for NCCL where this node has no GPU (or its torch has no NCCL): use the gloo backend there — "
               "`--backend gloo` for a script that takes it, or init_process_group(\"nccl\" if torch.cuda.is_available() else \"gloo\") "
               "— or run that node's ranks on CPU with `[[nodes]] cpu_ranks = N`")

#: A training loss or grad norm as logs name it: ``loss``, ``'grad_norm'``, ``grad norm``, ``total_loss``, ``lm loss``,
#: kohya's progress-bar ``avr_loss=`` (kohya-ss/musubi-tuner#26)
#: (an ``eval_loss``, a ``val_loss`` or a ``loss_cls`` component is not: no word boundary before or after ``loss``;
#: nor is an evaluation loss spelt with a space, ``Val loss nan``, ``valid loss``, ``eval loss``, ``test loss``: an
#: empty or label-less evaluation set gives nan there while training is fine, instructlab/taxonomy#785).
#: A data file's name ends so: a table or JSON Lines file, or a ``.json`` that is none of a model's own files
#: (``config.json``, ``tokenizer.json``, ``model.safetensors.index.json``).
_DATA_FILE = (r"(?:\.(?:jsonl|csv|parquet|arrow|tsv)\b|"
              r"(?<!config)(?<!tokenizer)(?<!special_tokens_map)(?<!vocab)(?<!added_tokens)(?<!\.index)\.json\b)")
_TRAINING = (r"(?<!val )(?<!dev )(?<!eval )(?<!test )(?<!valid )(?<!validation )(?<!evaluation )"
             r"\b(?:(?:total|train|training|lm|avg|avr|average|mean|step)_)?")
_TRAINING_LOSS = _TRAINING + r"loss\b"
_GRAD_NORM = r"\bgrad[ _]norm\b"
_LOGGED_LOSS = _TRAINING + r"(?:loss|grad[ _]norm)\b"
#: Then a non-finite value, quoted or not: ``loss: nan``, ``'grad_norm': inf``, ``grad_norm=nan``.
_NON_FINITE = r"['\"]?\s*[:=]?\s*['\"]?-?(?:nan|inf)\b"
#: Then a finite one.
_FINITE = r"['\"]?\s*[:=]?\s*['\"]?-?\d"

SIGNATURES: tuple[Signature, ...] = (
    # --- GPU memory
    _sig("oom.gpu", r"(?:CUDA|HIP|GPU|XPU) out of memory|OutOfMemoryError: (?:CUDA|HIP)|torch\.(?:cuda\.)?OutOfMemoryError|"
         r"CUBLAS_STATUS_ALLOC_FAILED|CUDA error: out of memory|cudaErrorMemoryAllocation|hipErrorOutOfMemory|"
         r"CUDA_ERROR_OUT_OF_MEMORY|OOM when allocating tensor|RESOURCE_EXHAUSTED: Out of memory", 10,
         "https://github.com/RLinf/RLinf/issues/255; ROCm/TheRock#1054, salesforce/CodeGen2#3 (HIP's words)"),
    # a notebook's traceback names the exception in its header line, 'OutOfMemoryError   Traceback (most recent call
    # last)', and its message may lie beyond what was pasted (torch's OutOfMemoryError is the accelerator's; the host's
    # is MemoryError)
    _sig("oom.gpu", r"^\s*(?:torch\.(?:cuda\.)?)?OutOfMemoryError\s{2,}Traceback \(most recent call last\)", 10,
         "unslothai/unsloth#3373, bitsandbytes-foundation/bitsandbytes#340 (Kaggle and Jupyter notebooks)"),
    # NCCL's own allocations (``NCCL WARN Cuda failure 2 'out of memory'``), often beside louder follow-on errors
    _sig("oom.gpu", r"Cuda failure \d* ?'out of memory'|Cuda failure 2\b", 9,
         "NVIDIA/TensorRT-LLM#1670, NVIDIA-NeMo/Megatron-Bridge#771, huggingface/peft#1703"),
    # --- host memory (the kernel's own words, when a log carries dmesg lines)
    _sig("oom.host", r"Out of memory: Killed process|oom-kill:|Memory cgroup out of memory", 9,
         "https://www.kernel.org/doc/html/latest/admin-guide/cgroup-v2.html (memory.max: the OOM killer is invoked)"),
    _sig("oom.host", r"Detected \d+ oom[-_]kill events?|task \d+: Out Of Memory|JobState=OUT_OF_MEMORY\b", 9,
         "https://github.com/hafs-community/HAFS/issues/101"),
    _sig("oom.host", r"invoked oom-killer|oom_reaper: reaped process|Killed process \d+ \(", 8,
         "mozilla/DeepSpeech#2055 (the kernel's OOM-killer report in syslog)"),
    # --- host memory in the allocator's or the launcher's words
    _sig("oom.host", r"std::bad_alloc|memory allocation of \d+ bytes failed|Cannot allocate memory|"
         r"DataLoader worker \(pid \d+\) is killed by signal: Killed", 8,
         "bakwc/JamSpell#43, reachsumit/deep-unet-for-satellite-image-segmentation#18, hezhangsprinter/DCPDN#12"),
    _sig("oom.host", r"exits with return code = -9|exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\) received by PID|"
         r"died with <Signals\.SIGKILL: 9>|exit (?:code|status) 137\b|non-zero exit status -9\b|\bOOMKilled\b|error code -9\b|"
         r"process \d+ terminated with signal SIGKILL", 7,
         "liucongg/ChatGLM-Finetuning#102 (DeepSpeed launcher), lzhxmu/CPPO#6, apple/ml-recurrent-drafter#5 (torchrun summary); "
         "shenyunhang/DRN-WSOD-pytorch#11 (torch.multiprocessing.spawn's report)"),
    # Ray's memory monitor killing a worker when the node's RAM passes its threshold (verl, OpenRLHF on Ray)
    _sig("oom.host", r"ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory|"
         r"Workers \(tasks / actors\) killed due to memory pressure", 8, "verl-project/verl#4995"),
    # the shell's own report of a SIGKILLed child: a bare 'Killed' line (also as pasted into an issue: '> Killed',
    # '**Killed**'), bash job control ('[1]+  Killed   python train.py') and a script's ('run.sh: line 3: 4242 Killed')
    _sig("oom.host", r"^[\s>*`_]*Killed[\s.!*`_]*$|^\[\d+\][+-]?\s+Killed\s+\S|^\S*: line \d+:\s+\d+ Killed\b", 7,
         "CharlesShang/FastMaskRCNN#172 ('Killed' after the last iteration, no traceback), GNU bash job-control and "
         "wait-status reports"),
    # --- Slurm ended the job (slurmstepd's words, and ftwiz's runs/<id>/_slurm.log: JobState=...)
    _sig("slurm.time_limit", r"DUE TO TIME LIMIT|JobState=(?:TIMEOUT|DEADLINE)\b", 10,
         "https://github.com/ZettaAI/zetta_utils/issues/671"),
    # submitit's words for a task Slurm timed out and submitit could not requeue (it names no JobState)
    _sig("slurm.time_limit", r"UncompletedJobError: Job not requeued because: timed-out", 9,
         "facebookincubator/submitit#1775"),
    _sig("slurm.node_fail", r"DUE TO NODE FAILURE|JobState=(?:NODE_FAIL|BOOT_FAIL)\b", 10,
         "https://github.com/aiidateam/aiida-core/pull/5866"),
    _sig("slurm.node_fail", r"error: Node failure on \S+", 9, "https://github.com/nebius/soperator/issues/854"),
    _sig("slurm.preempted", r"DUE TO PREEMPTION|JobState=PREEMPTED\b", 10,
         "https://github.com/SystemsGenetics/GEMmaker/pull/242"),
    _sig("slurm.cancelled", r"JobState=CANCELLED\b", 6, "https://github.com/Snakemake-Profiles/slurm/pull/22"),
    # A generic CANCELLED line (no DUE TO reason) is also what srun prints when a task failed first: an echo that
    # never outranks a root cause (a reason line, the task's own error).
    _sig("slurm.cancelled", r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ \*\*\*", 2,
         "https://github.com/Snakemake-Profiles/slurm/pull/22; pytorch/pytorch#116974 (srun cancels the step after a task failed)",
         echo=True),
    # --- watchdog timeouts (a symptom: some other rank stopped first)
    _sig("nccl.timeout", r"Watchdog caught collective operation timeout", 6,
         "https://github.com/hiyouga/LlamaFactory/issues/7396", echo=True),
    # ('Some NCCL operations have failed or timed out' is the watchdog's report of any NCCL error, a timeout or not:
    # its own signature below, which yields to the error it names)
    _sig("nccl.timeout", r"\[Rank \d+\] (?!Some NCCL operations have failed or timed out).*timed out|"
         r"Timed out waiting \d+ms for recv operation|"
         r"Gloo .*timed out|Socket Timeout|NCCL communicator was aborted", 5,
         "https://github.com/pytorch/pytorch/issues/118369", echo=True),
    # the watchdog's stack frames without its headline line, and Horovod's stall report
    _sig("nccl.timeout", r"ncclCommWatchdog|WorkNCCL::checkTimeout|"
         r"\[missing ranks: [\d, ]+\]|watchdog got stuck|Heartbeat monitor timed out", 4,
         "the watchdog's own stack frames; horovod/horovod#457 (its stall report)", echo=True),
    # the watchdog's report of a failed or timed-out collective: a timeout (the headless form of a watchdog log), unless
    # the same log then names the NCCL error behind it, which speaks instead (hiyouga/LLaMA-Factory#6849: the report,
    # then 'NCCL error: remote process exited or there was a network error' and ncclRemoteError)
    _sig("nccl.timeout", r"Some NCCL operations have failed or timed out", 4,
         "hiyouga/LLaMA-Factory#6849", echo=True,
         until=r"NCCL error:? (?!.*tim(?:ed|e) ?out)|nccl(?:Remote|System|Internal|UnhandledCuda)Error|ncclInvalid(?:Usage|Argument)"),
    # --- rendezvous
    _sig("rendezvous", r"RendezvousConnectionError|The connection to the C10d store has failed", 8,
         "https://github.com/pytorch/pytorch/issues/67547"),
    _sig("rendezvous", r"RendezvousTimeoutError|The client socket has timed out after \d+ ?m?s while trying to connect|"
         r"The client socket has failed to connect to|"
         r"connect\(\) timed out\. Original timeout", 8,
         "https://github.com/intel/torch-xpu-ops/issues/2119; hpcaitech/ColossalAI#4009 (c10d's E line in seconds: 'after 60s')"),
    # a store read that waited out its timeout (c10d's W line, then the exception): the key a peer should have set never
    # came — rank 0 still tokenizing, or the store's host unreachable
    _sig("rendezvous", r"\[c10d\] waitForInput: socket .* timed out after \d+ ?ms", 7,
         "axolotl-ai-cloud/axolotl#2684, modelscope/ms-swift#3343"),
    # the NCCL communicator's id, exchanged through the same store, never came: the store read behind it timed out
    # (rank 0 still busy before its first collective). A read that lost its peer ('got error: Connection reset by peer')
    # is another rank gone: that stays net.peer_lost's
    _sig("rendezvous", r"retr(?:ie|ei)ving ncclUniqueId from \[\d+\] via c10d key-value store .*got error: (?:Socket )?Timeout", 7,
         "axolotl-ai-cloud/axolotl#809, zai-org/ChatGLM-6B#1232"),
    _sig("rendezvous", r"RendezvousClosedError", 3, "https://github.com/kubeflow/trainer/issues/1638", echo=True),
    _sig("rendezvous", r"\(errno: 11[13] - (?:Connection refused|No route to host)\)|[Ww]ait timeout after \d+ ?ms, keys:", 7,
         "c10d's TCPStore: the store's port refuses or cannot be routed to, or a key never arrives during init"),
    _sig("rendezvous", r"DistStoreError: Timed out after \d+ seconds waiting for clients|"
         r"Timed out initializing process group in store based barrier", 8,
         "OpenRLHF/OpenRLHF#1040, Liuziyu77/Visual-RFT#123 (the store waits for clients that never join)"),
    # still waiting in init_process_group's store barrier when the log ends: a rank never joined (or two jobs share a store)
    _sig("rendezvous", r"Waiting in store based barrier to initialize process group", 4,
         "Lightning-AI/pytorch-lightning#4420, ultralytics/yolov5#4574 (worker_count never reaches world_size)",
         until=r"Completed store-based barrier"),
    # --- port taken
    _sig("port.in_use", r"errno: 98 - Address already in use|EADDRINUSE|address already in use", 10,
         "https://github.com/meta-pytorch/torchtune/issues/392"),
    # --- interface
    _sig("net.interface", r"no socket interface found|no NCCL_SOCKET_IFNAME interface found|"
         r"is neither AF_INET\(2\) nor AF_INET6\(10\)|Unable to find address for|"
         r"GLOO_SOCKET_IFNAME|Socket creation failed : Address family not supported|"
         r"Unable to find interface for", 9,
         "https://github.com/NVIDIA/nccl/issues/1837; gpustack/gpustack#4128 (gloo's device.cc: no interface holds the "
         "address the hostname resolved to)"),
    # DeepSpeed's multi-node runner found no address for the first host: the launch goes on with an empty --master_addr
    _sig("net.interface", r"Using IP address of\s+for node", 8, "deepspeedai/DeepSpeed#2612 (pdsh runner on Kubernetes pods)"),
    _sig("net.interface", r"Bootstrap : no socket interface|Cannot assign requested address", 7,
         "https://github.com/NVIDIA/nccl/issues/210"),
    # a hostname that does not resolve (the Hub's own name is hub.access, below, with a higher weight)
    _sig("net.interface", r"Name or service not known|Temporary failure in name resolution|getaddrinfo failed", 6,
         "README's net.interface: hostname resolution"),
    # gloo connecting to a loopback address: the hostname resolves to 127.0.1.1 on that node
    _sig("net.interface", r"connect \[127\.\d+\.\d+\.\d+\]:\d+: Connection refused", 8, "pytorch/pytorch#15592"),
    # NCCL's bootstrap cannot connect to the address a peer advertised (a docker bridge, a wrong NIC)
    _sig("net.interface", r"NCCL WARN (?:Call to connect timeout|(?:socketStartConnect: )?Connect to \S+ failed)", 6,
         "horovod/horovod#584, NVIDIA/nccl#929; wenet-e2e/wenet#1891 (a peer advertised its IPv6 link-local address)"),
    # --- peers gone (echoes)
    _sig("net.peer_lost", r"Connection reset by peer|Connection closed by (?:remote )?peer|Broken pipe|"
         r"remote process exited or there was a network error|ncclRemoteError", 2,
         "https://github.com/RVC-Project/Retrieval-based-Voice-Conversion-WebUI/issues/1882", echo=True),
    # --- P2P / IB transport
    _sig("p2p.topology", r"NET/IB ?: Got completion from peer .* (?:status=|with error )\d+|ibv_create_qp failed|ibv_modify_qp failed|"
         r"cudaErrorPeerAccess|peer access is not supported|NCCL WARN .*P2P|IO_PAGE_FAULT|cudaIpcOpenMemHandle|"
         r"IBV_WC_\w+_ERR|transport retry count(?:er)? exceeded|Call to ibv_\w+ failed|ibv_reg_mr failed|"
         r"NET/IB ?: .*(?:async event|port error|local access violation)|ACSCtl:\s*SrcValid\+", 8,
         "https://github.com/NVIDIA/nccl/issues/1129; openucx/ucx#5199 (UCX's 'Transport retry count exceeded')"),
    # peer access refused by the driver or the platform: too many peers for one GPU's mappings (CUDA's
    # CUDA_ERROR_TOO_MANY_PEERS), a peer BAR that cannot be mapped (CUDA error 205, cudaErrorMapBufferObjectFailed: a
    # P2P-patched driver, a PCIe switch or IOMMU in the way), and multi-node NVLink whose IMEX channels are not set up
    _sig("p2p.topology", r"peer mapping resources exhausted|CUDA_ERROR_TOO_MANY_PEERS|Unable to enable peer access|"
         r"mapping of buffer object failed|cudaErrorMapBufferObjectFailed|MNNVL .*not working|IMEX channel", 8,
         "ggml-org/llama.cpp#21883, tensorflow/tensorflow#30887 (too many peers); tinygrad/open-gpu-kernel-modules#29, "
         "aikitoria/open-gpu-kernel-modules#38 (error 205); NVIDIA/nccl#1925 (MNNVL without IMEX)"),
    # RCCL warning that the IOMMU is not in passthrough mode, which AMD's multi-GPU guide asks for (without it P2P between
    # the cards hangs or fails). (NCCL's INFO trace of an error code coming up from the IB transport, 'transport/net_ib.cc:282
    # -> 2', stays unread with every INFO line: NVIDIA/nccl#1332 shows only that.)
    _sig("p2p.topology", r"NCCL WARN Missing \"iommu=pt\"", 7, "ROCm/vllm#390, ROCm/rccl#1026 (iommu=pt missing)"),
    # consumer GPUs refusing P2P/IB: accelerate's check names the variables to set
    _sig("p2p.topology", r"doesn't support faster communication broadband via P2P or IB|Please set `?NCCL_P2P_DISABLE", 9,
         "tabularis-ai/be_great#54"),
    # --- versions
    _sig("version.skew", r"NVIDIA driver on your system is too old|CUDA driver version is insufficient|"
         r"NCCL version mismatch|version mismatch|was compiled against|undefined symbol: nccl|"
         r"no kernel image is available for execution on the device", 9,
         "https://github.com/lllyasviel/Fooocus/issues/1313; IEIT-Yuan/Yuan-2.0#65 (driver too old, as a UserWarning)"),
    _sig("version.skew", r"cannot import name '\w+' from '[\w.]+'", 7,
         "an API that moved between library versions (transformers, peft, accelerate, torch)"),
    # the same moves seen from the other side: a module of an installed library that this version does not have (older:
    # a model added later; newer: a module removed), and a library class refusing an argument its other versions take
    _sig("version.skew", r"No module named '(?:torch|transformers|accelerate|peft|trl|deepspeed|datasets|bitsandbytes|"
         r"diffusers|lightning|pytorch_lightning|vllm|xformers|flash_attn|triton|megatron|apex)\.[\w.]+'|"
         r"\b(?:Trainer|Seq2SeqTrainer|SFTTrainer|DPOTrainer|GRPOTrainer|PPOTrainer|RewardTrainer|TrainingArguments|"
         r"Seq2SeqTrainingArguments|SFTConfig|DPOConfig|GRPOConfig|Accelerator|LoraConfig|PeftConfig|BitsAndBytesConfig|"
         r"DeepSpeedEngine)\.__init__\(\) got an unexpected keyword argument|"
         r"_set_gradient_checkpointing\(\) got an unexpected keyword argument", 8,
         "zjunlp/OntoProtein#3, huggingface/transformers#12036 (transformers.deepspeed moved), unslothai/unsloth#741 "
         "(transformers.models.gemma2); jbohnslav/deepethogram#145 (Lightning 2's Trainer without gpus=), "
         "bmaltais/kohya_ss#1053 (accelerate's Accelerator without logging_dir=); QwenLM/Qwen#661 (a model's remote code older "
         "than transformers' gradient-checkpointing call)"),
    _sig("version.skew", r"undefined symbol: |hipErrorNoBinaryForGpu|Cannot retrieve Static function, error: 218|"
         r"CUDA Setup failed despite GPU being available|Required library version not found: libbitsandbytes|"
         r"Torch not compiled with CUDA enabled|is not compatible with the current PyTorch installation|"
         r"invalid device function|version `GLIBC_[\d.]+' not found|"
         r"requires? `?(?:torch|transformers|accelerate|deepspeed|peft|trl|bitsandbytes)\s*>=\s*\d", 8,
         "facebookresearch/bitsandbytes#21, bitsandbytes-foundation/bitsandbytes#1522, #138, ROCm/rocm-systems#2805"),
    # bitsandbytes built without GPU support says so when imported (as a WARNING log line, or the ``warn(...)`` source
    # line under a UserWarning) and the program goes on: an app or a run that never asks for 8-bit kernels works. It is
    # the cause when the run then fails: an exception, an abort, or the missing kernels themselves (cadam32bit_*).
    _sig("version.skew", r"compiled without GPU support", 8,
         "facebookresearch/bitsandbytes#21, georgesung/llm_qlora#2 (the run then failed); cocktailpeanut/fluxgym#411, "
         "SAI990323/TALLRec#27 (the warning alone, in apps that ran)", needs=_PYTHON_DIED),
    # xformers built for another torch (a CUDA build under a CPU or ROCm torch): a warning, and xformers is optional,
    # so it is the cause only when the run then dies
    _sig("version.skew", r"xFormers can't load C\+\+/CUDA extensions", 8,
         "kohya-ss/musubi-tuner#184, unslothai/unsloth#11639", needs=_PYTHON_DIED),
    # A shared library that is missing: the run fails on it when importing it raises, or the dynamic linker refuses to
    # start a binary without it.
    _sig("version.skew", r"(?-i:\b[A-Z]\w*(?:Error|Exception)):.*cannot open shared object file|error while loading shared libraries", 8,
         "shouxieai/tensorRT_Pro#171, whyisyoung/CADE#2, pinokiocomputer/pinokio#193, torchsmoke/Python3-Wheels#5 "
         "(ImportError/OSError: libcudnn/libnccl/libmpi .so: cannot open shared object file)"),
    # The same library only reported as not loadable (TensorFlow's W-level dso_loader lines, cuDNN's 'Could not load
    # library'): frameworks probe optional libraries (TensorRT, cudart on a CPU host) and go on. Evidence only when the
    # process then dies without an exception of its own.
    _sig("version.skew", r"Could not load (?:dynamic )?library|cannot open shared object file|Cannot dlopen", 7,
         "ClickHouse/ClickHouse#49813, yekaizhou/duet#9, deepspeedai/DeepSpeed#1018 (W-level dso_loader lines in runs that "
         "worked); the brief of round 3 (a missing library is the cause when the run then dies of it)", needs=_PROCESS_DIED),
    # an extension builder refusing a CUDA toolkit whose major version differs from torch's build (DeepSpeed's op builder,
    # torch.utils.cpp_extension): the run or the install stops. DeepSpeed accepts a minor-version difference ('but since
    # the APIs are compatible, accepting this combination') and DS_SKIP_CUDA_CHECK ('Allowing this combination'): no
    # evidence, the pattern asks for the refusal itself
    _sig("version.skew", r"does not match the version torch was compiled with [\d.]+, unable to\b|CUDAMismatchException|"
         r"The detected CUDA version \([\d.]+\) mismatches the version that was used to compile", 9,
         "deepspeedai/DeepSpeed#3223, JIA-Lab-research/MGM#91, bytedance/lightseq#158 (op builders); deepspeedai/DeepSpeed#3436 "
         "(torch.utils.cpp_extension's check); deepspeedai/DeepSpeed#3105 (the accepted minor-version difference)"),
    # cuDNN missing, too old for the build or the driver (TensorFlow's and JAX's words)
    _sig("version.skew", r"Possibly insufficient driver version|DNN library is not found|"
         r"Loaded runtime CuDNN library: \S+ but source was compiled with", 8,
         "leondgarse/Keras_insightface#130, google-research/multinerf#14, apapiu/guided-diffusion-keras#8"),
    # ROCm's rocBLAS without Tensile kernels for this GPU's architecture (an unsupported or overridden gfx target)
    _sig("version.skew", r"rocBLAS error: Cannot read \S.*TensileLibrary\w*\.dat|Could not initialize Tensile host", 8,
         "ROCm/rocBLAS#1339, brknsoul/ROCmLibs#4, githubcto/FramePack-ZLUDA#4"),
    # --- NCCL asked for where there is no GPU (a CPU-only torch, a node without GPUs)
    _sig("version.skew", r"Distributed package doesn't have NCCL built in", 9,
         "torch/distributed/distributed_c10d.py raises it when torch was built without NCCL (CPU-only, Windows, macOS wheels)", fix=_NO_GPU_FIX),
    _sig("code.error", r"ProcessGroupNCCL is only supported with GPUs|NCCL backend requires? (?:a )?GPU", 9,
         "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp raises it for init_process_group('nccl') with no GPU visible", fix=_NO_GPU_FIX),
    # --- disk
    _sig("disk.full", r"No space left on device|\[Errno 28\]|StorageFull|Disk quota exceeded|\[Errno 122\]|"
         r"Not enough (?:free )?disk space", 10,
         "https://github.com/hiyouga/LlamaFactory/issues/5155"),
    # a worker killed by SIGBUS: /dev/shm full (DataLoader workers in a container with the default 64 MB)
    _sig("disk.full", r"Signal 7 \(SIGBUS\) received|exitcode\s*:\s*-7\b|failed \(exitcode: -7\)|\bBus error\b", 6,
         "pangeo-data/pangeo-docker-images#258 (bus error in DataLoader workers: shared memory)"),
    # torch.save's writer failing (a full disk), and a full /dev/shm (DataLoader workers, NCCL's segments)
    _sig("disk.full", r"PytorchStreamWriter failed writing file|insufficient shared memory \(shm\)|"
         r"failed to extend /dev/shm|Error while creating shared memory segment|unable to write to file </torch_", 9,
         "SWivid/F5-TTS#458, hkust-nlp/simpleRL-reason#19, pangeo-data/pangeo-docker-images#258, NVIDIA/nccl-tests#166"),
    # --- hub
    _sig("hub.access", r"GatedRepoError|Cannot access gated repo|401 Client Error|403 Client Error|"
         r"RepositoryNotFoundError|is not a valid model identifier|LocalEntryNotFoundError|"
         r"couldn't connect to 'https://huggingface\.co'|HFValidationError|Repo id must (?:use alphanumeric|be in the form)|"
         r"OfflineModeIsEnabled|gated repo|Access to model \S+ is restricted|Repository Not Found for url|"
         r"Invalid (?:user )?token|Invalid credentials in Authorization header|"
         r"huggingface\.co.*(?:Max retries exceeded|NameResolutionError|ConnectTimeout|ReadTimeout)", 9,
         "https://github.com/ml-explore/mlx-examples/issues/759; chflame163/ComfyUI_LayerStyle_Advance#110 (repo id validation)"),
    # the Hub answering a request with a server error (5xx) that the client raised, after its own retries: the model or
    # tokenizer could not be fetched. A retried request only warns ('HTTP Error 503 thrown while requesting ... Retrying
    # in 1s'), which this does not match
    _sig("hub.access", r"HfHubHTTPError: 5\d\d Server Error|5\d\d Server Error: .*for url: https?://(?:[\w-]+\.)*(?:huggingface|hf)\.co\b", 9,
         "marin-community/marin#2514 (504 Gateway Time-out while loading a tokenizer; fixed by retrying)"),
    # --- loss
    # a logged loss or grad norm that is nan/inf (a training loss: ``total_loss``, ``lm loss``; never ``eval_loss`` or a
    # perplexity). In the first logged steps, before any finite value, it is the fp16 loss scale settling (a skipped step
    # logs a nan grad norm) when a finite value follows: mmocr's 'grad_norm: nan' at step 100 then 3.98 (JiaquanYe/
    # TableMASTER-mmocr#32, 'normal if the loss can converge'). After finite values it is divergence, even if it recovers.
    _sig("loss.nan", _TRAINING_LOSS + _NON_FINITE, 8,
         "JeffWang987/DriveDreamer#23 (total_loss: nan after finite steps)", recovered=_LOGGED_LOSS + _FINITE),
    # The same for a grad norm, which a run also logs non-finite on a single step it goes past: a mixed-precision
    # overflow mid-run, a step the framework's guard skipped (epfLLM/Megatron-LLM#34: 'Bad grad_norm detected
    # (grad_norm=nan)', then 'number of skipped iterations: 1'; ZYang2077/DAOcc#25, one nan among finite losses).
    # Divergence repeats on every step (AnswerDotAI/ModernBERT#233, bigscience-workshop/Megatron-DeepSpeed#396,
    # OpenBMB/MiniCPM-V#212): a nan grad norm that stands alone in its log is no evidence.
    _sig("loss.nan", _GRAD_NORM + _NON_FINITE, 8,
         "https://github.com/AnswerDotAI/ModernBERT/issues/233; bigscience-workshop/Megatron-DeepSpeed#396",
         recovered=_LOGGED_LOSS + _FINITE, repeats=True),
    # ('nan loss', never 'NaN losses': a sentence about them, as ultralytics/ultralytics#1348's AMP check warns
    # that AMP "may lead to NaN losses" and turns it off. A JSON log's '"loss": NaN' is Python's json writing a nan; a
    # '"loss": null' is a step that logged no training loss — an evaluation or the closing summary record.)
    _sig("loss.nan", r"Loss is NaN|nan loss(?!es)|"
         r"detected (?:a )?(?:nan|inf)|found NaN|non-finite loss|\"loss\":\s*NaN|Loss became infinite or NaN|"
         r"loss is not finite|returned nan values in its \d+th output|TerminateOnNan: Output .*\bnan\b|"
         r"contains NaN or Inf\. Stop training|grad_scale is too small|the gradient scale is too small|"
         r"iterations in a row due to overflow", 8,
         "hpcaitech/ColossalAI#3439; pytorch/ignite#2569 (ignite's TerminateOnNan handler); k2-fsa/icefall#2069 (its fp16 "
         "scale collapsed); EleutherAI/gpt-neox#482 (its overflow monitor: 'Skipped 50 iterations in a row due to Overflow')"),
    # (tensorboardX's 'NaN or Inf found in input tensor' is no evidence: it names no scalar, and the tuning set has it
    # only in runs that worked — beside a finite loss at every logging step, lm-sys/FastChat#2378,
    # NVlabs/Deep_Object_Pose#368 and #403; a one-element tensor's std, allenai/allennlp#3116; fp16 warm-up,
    # ChenRocks/UNITER#28. A loss that does turn nan is logged as nan, which the signatures above read.)
    # the fp16 loss scale driven to its floor: not warm-up any more (fairseq: 'setting loss scale to: 0.000122', then
    # FloatingPointError: Minimum loss scale reached). fairseq starts at 128 and a healthy run may live near 1, dipping
    # to 0.5 and growing back while its loss improves: a fairseq scale is evidence below 0.1 (its floor is 1e-4).
    _sig("loss.nan", r"Current loss scale already at minimum|Minimum loss scale reached|"
         r"(?:reducing|setting) loss scale to:? (?:0\.0\d*|\d(?:\.\d+)?e-\d+|0(?![.\d]))|"
         r"reducing (?:loss scale )?to [0-4](?:\.0+)?(?!\.?\d)|loss_scale\s*:\s*\d(?:\.\d+)?e-(?:0?[2-9]|[1-9]\d)\b", 9,
         "yangjianxin1/Firefly#68, hiyouga/LLaMA-Factory#251 (DeepSpeed), NVIDIA/apex#834, #318 (apex), "
         "facebookresearch/fairseq#512 (fairseq's words); a scale halved down "
         "to 4 or less is past any warm-up (which starts at 2**16 or 2**32): ymcui/Chinese-LLaMA-Alpaca#534; a dllogger "
         "'PARAMETER loss_scale : 1.45e-11' (NVIDIA/DeepLearningExamples#543)"),
    # --- DDP / FSDP usage
    # (the bare parameter name is no evidence: config dumps and launcher command lines print ddp_find_unused_parameters)
    _sig("ddp.usage", r"Expected to have finished reduction in the prior iteration|keyword argument .?find_unused_parameters=True|"
         r"parameters that were not used in producing loss|DDP expects same model across all ranks|"
         r"appears not to match (?:strides|sizes) of the same param|FSDP .* (?:wrap|shard)", 9,
         "https://github.com/pytorch/pytorch/issues/57473"),
    # DDP's follow-on lines (reentrant checkpointing, shared parameters) and FSDP's flattening
    _sig("ddp.usage", r"Expected to mark a variable ready only once|marked (?:as )?ready twice|did not receive grad for rank|"
         r"Must flatten tensors with uniform dtype|Detected mismatch between collectives on ranks", 9,
         "FlagOpen/FlagEmbedding#1155, huggingface/transformers#23728, pytorch/pytorch#70099, huggingface/peft#484"),
    # --- a launcher/script mismatch: torch >= 2.0 passes --local-rank, an old script only takes --local_rank
    _sig("code.error", r"error: unrecognized arguments: --local[-_]rank", 9,
         "skycrapers/TecoGAN-PyTorch#31, XPixelGroup/BasicSR#626, lmy98129/VLPD#6, FudanNLP/CPT#65",
         fix="the launcher passes --local-rank=N (torch >= 2.0) but the script's argparse does not take it: accept both "
         "(parser.add_argument(\"--local-rank\", \"--local_rank\", type=int)) or read LOCAL_RANK from the environment"),
    # any other argparse refusal of the command line the script was started with (a value missing after a flag, a
    # required argument not given, an argument it does not take)
    _sig("code.error", r"\S\.py: error: (?:argument \S+: |the following arguments are required|unrecognized arguments)", 8,
         "ymcui/Chinese-LLaMA-Alpaca-3#42 ('argument --seed: expected one argument'); docs.python.org/3/library/argparse.html",
         fix="the command line does not fit the script's arguments (the error names the one): fix the job's command or args"),
    # a single-GPU library (unsloth) started with several GPUs visible: it refuses the setup itself
    _sig("code.error", r"does not support multi GPU setups|Multiple CUDA devices detected but we require a single device", 8,
         "unslothai/unsloth#1142",
         fix="this library trains on one GPU only: set CUDA_VISIBLE_DEVICES to one GPU per process, or use a multi-GPU method"),
    # the Trainer looking up metric_for_best_model (load_best_model_at_end defaults it to eval_loss) among metrics the
    # evaluation did not return: compute_metrics misses it, or the evaluation set has no labels
    _sig("code.error", r"KeyError: '?eval_[\w.-]+'?$|metric_for_best_model\b.*not found in the evaluation metrics", 8,
         "huggingface/transformers#22027, modelscope/ms-swift#4323",
         fix="metric_for_best_model names a metric the evaluation does not return: make compute_metrics return it (the "
         "Trainer adds the eval_ prefix) or change metric_for_best_model; eval_loss needs labels in the evaluation set"),
    # the model's output and the labels disagree in batch size: a bug in the model or its loss (the shapes are the
    # code's), e.g. a forward that returns one row per input of a multi-input model
    _sig("code.error", r"Expected input batch_size \(\d+\) to match target batch_size \(\d+\)|"
         r"mat1 and mat2 shapes cannot be multiplied", 7, "pytorch/pytorch#139031"),
    # --- data (the workloads' own error lines, and the usual Python ones when reading a dataset)
    _sig("data.invalid", r"ftwiz: error \(rank \d+\): (?:dataset |[^ ]*\.jsonl? line|record at line)|"
         r"dataset \S+ (?:not found|is a directory|has no records)|\.jsonl? line \d+: not valid JSON|"
         r"DatasetGenerationError|datasets\.exceptions|JSONDecodeError|"
         r"(?:FileNotFoundError|No such file or directory).*" + _DATA_FILE, 8,
         "agent/workloads/data.py (ftwiz's own dataset errors); a model's own .json files (config.json, "
         "tokenizer.json, model.safetensors.index.json) are no dataset"),
    # the datasets library given no example at all (a filter, a column mapping or a template left nothing), and a data
    # file or directory that is not there: the name's last part says data ('dataset2', 'traindata_….pt'; not metadata: a
    # package's dist-info METADATA, a checkpoint's .metadata), or it lies under a dataset folder
    # ('/notebooks/proj/dataset/train_p=-2') and is no model's own file
    _sig("data.invalid", r"SchemaInferenceError|"
         r"(?:FileNotFoundError|No such file or directory)\b.*['\"](?:[^'\"]*[/\\])?[^'\"/\\]*(?<!meta)data[^'\"/\\]*['\"]|"
         r"(?:FileNotFoundError|No such file or directory)\b.*['\"][^'\"]*[/\\]datasets?[/\\][^'\"]*"
         r"(?<!\.safetensors)(?<!\.bin)(?<!config\.json)(?<!tokenizer\.json)['\"]", 8,
         "modelscope/ms-swift#1918, huggingface/trl#917 (SchemaInferenceError); YubiaoYue/MedMamba#4, "
         "deepspeedai/DeepSpeedExamples#558, junyuchen-cjy/DTTNet-Pytorch#2 (a data path not found)"),
    # an empty dataset reaching the sampler (a data folder in the wrong place, a filter that left nothing), a recipe's
    # own 'no valid sample' error, and a column the data file does not have (the datasets library's and AutoNLP's words)
    _sig("data.invalid", r"num_samples should be a positive integer(?:al)? value, but got num_samples=0|"
         r"Cannot find valid samples|Columns? '[^']+' (?:could not be found in the provided file|not in the dataset)|"
         r"_column' value '[^']*' needs to be one of", 8,
         "dulucas/siMLPe#2, jongchyisu/mvcnn_pytorch#16, bmaltais/kohya_ss#2660 (num_samples=0); hiyouga/LlamaFactory#2577; "
         "huggingface/autotrain-advanced#101; modelscope/facechain#218 (diffusers' training scripts: '--caption_column' "
         "value 'text' needs to be one of: image')"),
    # a dataset's file that is not there or a record that lacks a key, raised in a DataLoader worker (the Dataset's
    # __getitem__ reading a sample), a text file in another encoding, and a data file a recipe could not find in its
    # own words
    _sig("data.invalid", r"Caught (?:FileNotFoundError|KeyError|UnicodeDecodeError|UnidentifiedImageError|EOFError) "
         r"in DataLoader worker process|UnicodeDecodeError: '[\w-]+' codec can't decode|"
         r"\bFile ['\"]?[^'\"\s]*" + _DATA_FILE + r"['\"]? (?:not found|does not exist)", 8,
         "open-mmlab/mmcv#2894, tianzhi0549/FCOS#363, JusperLee/Conv-TasNet#63 (DataLoader workers); hiyouga/LlamaFactory#6191; "
         "ml5js/training-charRNN#5 (a text file in another encoding)"),
    # Arrow/JSON parse errors from the datasets loader
    _sig("data.invalid", r"ArrowInvalid|JSON parse error|Failed to (?:load|read) (?:JSON from )?file .* with error|ArrowTypeError|"
         r"Couldn't cast array", 8,
         "ShishirPatil/gorilla#371, hiyouga/LLaMA-Factory#412, modelscope/ms-swift#3981, oobabooga/text-generation-webui#4325"),
)

#: Lines that look alarming but are normal: never evidence of a failure.
NORMAL: tuple[re.Pattern[str], ...] = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"NCCL INFO",                           # NCCL_DEBUG=INFO chatter
    # fp16 loss-scale warm-up (apex / deepspeed), until the scale falls below 1 (then it is loss.nan)
    r"Gradient overflow\.\s+Skipping step(?!.*reducing loss scale to (?:0\.|\d(?:\.\d+)?e-|[0-4](?:\.0+)?(?!\.?\d)))",
    r"OVERFLOW! Rank \d+ Skipping step\.(?!.*reducing to [0-4](?:\.0+)?(?!\.?\d))",
    r"Setting OMP_NUM_THREADS environment variable",
    # c10d's socket warnings (W, not E): a client retrying the store before the master is up, whatever prefix the launcher
    # puts before them (``[rank0]:``, torchx's ``trainer/0 [1]:``); a failure ends in an E line or an exception
    r"\[?W(?:\d{4} [\d:.]+(?: +\d+)?)? (?:\S+/)?socket\.cpp:\d+\] \[c10d\] "
    r"(?:The client socket has (?:timed out|failed to connect)|The hostname of the client socket|The server socket .* will retry)",
    # DDP's performance note on a flag that found nothing to do (the run goes on): reducer.cpp's W line
    r"find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters",
    # torchrun's agent closing the rendezvous as it exits, or its keep-alive thread beating once more, after its workers
    # ended (success or failure): the store lives in the master's torchrun, which may have exited first
    # (dynamic_rendezvous.py's shutdown and keep-alive, W lines). Seen on a run that trained to its last step
    # (tests/doctor/test_induced.py's healthy scenario); a store lost mid-run shows in the workers' own errors.
    r"has failed to (?:shutdown|send a keep-alive heartbeat to) the rendezvous '[^']*' due to an error of type",
    r"^\*{5,}$",
    # Slurm's non-fatal notes worded as errors: the memory accounting's 'Exceeded step memory limit at some point' (logged
    # even when the step was not killed: galaxyproject/galaxy#1426; a kill is its own line, 'Detected N oom-kill events'
    # or 'Exceeded job memory limit' without 'at some point'), and a client rejecting an option or variable and going on
    # without it ('sbatch: error: "SBATCH_EXCLUSIVE=true" -- invalid value, ignoring...', then 'Submitted batch job')
    r"slurmstepd(?:-[\w.-]+)?: error: Exceeded (?:step|job) memory limit at some point\b",
    r"\b(?:sbatch|srun|salloc): error: .*\bignoring\b",
    # git asked for the commit by a script that records it, outside a repository: its 'fatal:' is git's, not the run's
    # (open-mmlab/mmgeneration#206, a run that went on)
    r"(?-i:^fatal: (?:not a git repository|No names found|ambiguous argument 'HEAD')|^Stopping at filesystem boundary)",
))
#: Warnings: normal unless they carry a certain signature (weight >= :data:`WARNING_OVERRIDE`), as a
#: ``UserWarning: CUDA initialization: The NVIDIA driver on your system is too old`` does.
#: c10d's own W lines (``[W ProcessGroupNCCL.cpp:1250]``, ``[rank0]:[W624 12:52:07.29 ProcessGroupNCCL.cpp:1659]``,
#: ``[W Utils.hpp:135]``) are warnings too: a process group not destroyed at exit, a deprecated variable, a barrier's
#: guessed device, the heartbeat monitor finding the store already closed ('Failed to check the "should dump" flag on
#: TCPStore ... Broken pipe'). A watchdog timeout is an E line; a W line counts only with a certain signature. (The
#: store's own W line, ``[W TCPStore.cpp:125] ... recvValue failed ... Connection reset by peer``, stays evidence:
#: qibin0506/Cortex#17's ranks lost the master that way.)
WARNINGS: re.Pattern[str] = re.compile(r"DeprecationWarning|FutureWarning|UserWarning|is deprecated|"
                                       r"\[W(?:\d{3,4} [\d:.]+(?: +\d+)?)? (?:\S+/)?(?:ProcessGroup\w*|NCCLUtils|Utils)\.[ch]pp:\d+\]",
                                       re.IGNORECASE)
WARNING_OVERRIDE = 9


def is_normal(text: str) -> bool:
    """Whether ``text`` is a known-normal line (INFO chatter, fp16 warm-up, a warning no certain signature matches)."""
    return any(p.search(text) for p in NORMAL) or (bool(WARNINGS.search(text)) and not match_line(text))


def match_line(text: str) -> list[Signature]:
    """Every signature ``text`` matches, strongest first (none for a known-normal line)."""
    if any(p.search(text) for p in NORMAL):
        return []
    hits = [s for s in SIGNATURES if s.pattern.search(text)]
    if hits and WARNINGS.search(text):
        hits = [s for s in hits if s.weight >= WARNING_OVERRIDE]
    return sorted(hits, key=lambda s: (s.echo, -s.weight))
