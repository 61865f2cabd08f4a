"""Wire contract between `ftwiz-agent` (on every node) and the `ftwiz` controller.

Pure pydantic models, no I/O. Every hardware field is optional: ``None`` means "not reported by
this node", never an error. Bump ``SCHEMA_VERSION`` on any incompatible change; the controller
marks a node whose major schema differs as *incompatible* instead of misreading it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = "1.0"
"""Major.minor of the wire schema. A different major is incompatible."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


# --------------------------------------------------------------------------- GPUs


class GpuProcess(_Model):
    """A compute process holding memory on a GPU (nvmlDeviceGetComputeRunningProcesses)."""

    pid: int = Field(description="Process id on the node.")
    name: Optional[str] = Field(None, description="Process name (from /proc), if readable.")
    used_memory_bytes: Optional[int] = Field(None, description="GPU memory held by the process.")


class GpuLink(_Model):
    """Topology between this GPU and another GPU on the same node."""

    peer_index: int = Field(description="Index of the other GPU.")
    link: Literal["nvlink", "same_board", "same_pcie_switch", "multi_pcie_switch", "host_bridge", "system", "unknown"] = Field(
        description="Closest common ancestor, as NVML's topology levels and NVLink report it."
    )


class GpuInfo(_Model):
    """One GPU as NVML sees it."""

    index: int = Field(description="NVML index (matches CUDA_VISIBLE_DEVICES order with CUDA_DEVICE_ORDER=PCI_BUS_ID).")
    uuid: Optional[str] = Field(None, description="GPU UUID, e.g. GPU-xxxxxxxx-….")
    name: Optional[str] = Field(None, description="Marketing name, e.g. 'NVIDIA H100 80GB HBM3'.")
    memory_total_bytes: Optional[int] = Field(None, description="Framebuffer memory in bytes.")
    memory_used_bytes: Optional[int] = Field(None, description="Used framebuffer memory in bytes.")
    memory_free_bytes: Optional[int] = Field(None, description="Free framebuffer memory in bytes.")
    utilization_percent: Optional[float] = Field(None, description="GPU utilization over the last sample period.")
    memory_utilization_percent: Optional[float] = Field(None, description="Memory controller utilization.")
    temperature_c: Optional[float] = Field(None, description="Core temperature in degrees Celsius.")
    power_draw_w: Optional[float] = Field(None, description="Current power draw in watts.")
    power_limit_w: Optional[float] = Field(None, description="Enforced power limit in watts.")
    ecc_volatile_uncorrected: Optional[int] = Field(None, description="Uncorrected ECC errors since the last driver load.")
    retired_pages_pending: Optional[bool] = Field(None, description="Page retirement pending (pre-Ampere).")
    remapped_rows_pending: Optional[bool] = Field(None, description="Row remap pending a GPU reset (Ampere and later).")
    remapped_rows_failure: Optional[bool] = Field(None, description="A row remap failed: the GPU needs service.")
    pcie_gen_current: Optional[int] = Field(None, description="Current PCIe link generation.")
    pcie_gen_max: Optional[int] = Field(None, description="Maximum PCIe generation of GPU and slot.")
    pcie_width_current: Optional[int] = Field(None, description="Current PCIe link width (lanes).")
    pcie_width_max: Optional[int] = Field(None, description="Maximum PCIe link width.")
    nvlink_active_links: Optional[int] = Field(None, description="NVLink links in the active state.")
    throttle_reasons: list[str] = Field(default_factory=list, description="Active clock throttle reasons, by NVML name.")
    compute_processes: list[GpuProcess] = Field(default_factory=list, description="Compute processes on this GPU.")
    topology: list[GpuLink] = Field(default_factory=list, description="Links to the other GPUs of the node.")
    compute_capability: Optional[str] = Field(None, description="CUDA compute capability, e.g. '9.0'.")


# --------------------------------------------------------------------------- host


class DiskInfo(_Model):
    """Free space where the node will write (workdir, checkpoints, HF cache)."""

    path: str = Field(description="The configured path as given.")
    exists: bool = Field(description="Whether the path (or its nearest existing parent) was found.")
    total_bytes: Optional[int] = Field(None, description="Filesystem size.")
    free_bytes: Optional[int] = Field(None, description="Bytes available to unprivileged users.")
    error: Optional[str] = Field(None, description="Why the path could not be measured.")


class NicAddress(_Model):
    """One address of a network interface."""

    family: Literal["ipv4", "ipv6"] = Field(description="Address family.")
    address: str = Field(description="The address, without prefix.")
    prefixlen: Optional[int] = Field(None, description="Prefix length, e.g. 24.")


class NicInfo(_Model):
    """A network interface (psutil + sysfs)."""

    name: str = Field(description="Kernel interface name, e.g. eth0, enp65s0f0, ib0.")
    addresses: list[NicAddress] = Field(default_factory=list, description="IPv4/IPv6 addresses with prefix.")
    mtu: Optional[int] = Field(None, description="MTU in bytes.")
    speed_mbps: Optional[int] = Field(None, description="Link speed in Mbit/s; None when the driver reports none.")
    is_up: Optional[bool] = Field(None, description="Administratively and operationally up.")
    is_loopback: bool = Field(False, description="The loopback interface (never usable across nodes).")
    default_route: bool = Field(False, description="Holds the IPv4 default route.")


class IbPort(_Model):
    """An InfiniBand/RoCE port from /sys/class/infiniband."""

    device: str = Field(description="HCA device, e.g. mlx5_0.")
    port: int = Field(description="Port number, from 1.")
    state: Optional[str] = Field(None, description="Logical state, e.g. 'ACTIVE', 'DOWN', 'INIT'.")
    phys_state: Optional[str] = Field(None, description="Physical state, e.g. 'LinkUp', 'Polling'.")
    rate: Optional[str] = Field(None, description="Rate as the kernel reports it, e.g. '200 Gb/sec (4X HDR)'.")
    link_layer: Optional[str] = Field(None, description="'InfiniBand' or 'Ethernet' (RoCE).")
    netdev: Optional[str] = Field(None, description="Associated network interface, when known.")


class SoftwareVersions(_Model):
    """What the training interpreter sees. ``None`` for a package means it is not installed."""

    python_executable: str = Field(description="The interpreter that was probed.")
    python: Optional[str] = Field(None, description="Python version, e.g. '3.11.7'.")
    torch: Optional[str] = Field(None, description="torch.__version__.")
    torch_cuda: Optional[str] = Field(None, description="torch.version.cuda (None on a CPU build).")
    cuda_available: Optional[bool] = Field(None, description="torch.cuda.is_available().")
    nccl: Optional[str] = Field(None, description="torch.cuda.nccl.version(), dotted.")
    cudnn: Optional[str] = Field(None, description="torch.backends.cudnn.version().")
    transformers: Optional[str] = Field(None, description="transformers.__version__.")
    peft: Optional[str] = Field(None, description="peft.__version__.")
    bitsandbytes: Optional[str] = Field(None, description="bitsandbytes.__version__.")
    accelerate: Optional[str] = Field(None, description="accelerate.__version__.")
    error: Optional[str] = Field(None, description="Why the probe failed (interpreter missing, timeout, crash).")
    probed_at: Optional[float] = Field(None, description="Unix time of the probe.")


class HostInfo(_Model):
    """CPU, memory, OS and uptime (psutil)."""

    os: Optional[str] = Field(None, description="OS pretty name, e.g. 'Ubuntu 24.04 LTS'.")
    kernel: Optional[str] = Field(None, description="Kernel release.")
    uptime_s: Optional[float] = Field(None, description="Seconds since boot.")
    cpu_model: Optional[str] = Field(None, description="CPU model name.")
    cpu_cores: Optional[int] = Field(None, description="Logical CPUs.")
    boot_id: Optional[str] = Field(
        None, max_length=64, description="The kernel's boot id: nodes that report the same one run on one host (containers, "
        "network namespaces) and share its CPUs.")
    load_avg: Optional[list[float]] = Field(None, description="1, 5, 15 minute load averages.")
    cpu_percent: Optional[float] = Field(None, description="CPU utilization over the last sample, all cores.")
    memory_total_bytes: Optional[int] = Field(None, description="Physical memory.")
    memory_available_bytes: Optional[int] = Field(None, description="Memory available without swapping.")


class NodeReport(_Model):
    """Everything one agent reports about its node; the body of ``GET /v1/report``."""

    schema_version: str = Field(SCHEMA_VERSION, description="Wire schema version of the agent.")
    node_name: str = Field(description="The node's configured name (--node-name).")
    hostname: str = Field(description="The kernel hostname.")
    agent_version: str = Field(description="ftwiz-agent version.")
    time_unix: float = Field(description="Agent's wall clock when the report was served (clock-skew check).")
    sampled_at: Optional[float] = Field(None, description="When the hardware sample was taken.")
    host: HostInfo = Field(default_factory=HostInfo, description="CPU, memory, OS.")
    disks: list[DiskInfo] = Field(default_factory=list, description="Free space at each configured path.")
    gpus: list[GpuInfo] = Field(default_factory=list, description="GPUs; empty when NVML is absent.")
    driver_version: Optional[str] = Field(None, description="NVIDIA driver version.")
    cuda_driver_version: Optional[str] = Field(None, description="Highest CUDA version the driver supports, e.g. '12.4'.")
    nvml_error: Optional[str] = Field(None, description="Why no GPU is reported (no driver, no library, no device).")
    gpu_source: Optional[str] = Field(None, description="Where GPU values came from when not live NVML (fixtures say so).")
    nics: list[NicInfo] = Field(default_factory=list, description="Network interfaces.")
    ib_ports: list[IbPort] = Field(default_factory=list, description="InfiniBand/RoCE ports.")
    nvidia_peermem_loaded: Optional[bool] = Field(None, description="nvidia_peermem (GPUDirect RDMA) module loaded.")
    software: Optional[SoftwareVersions] = Field(None, description="Training interpreter's versions.")


class Health(_Model):
    """``GET /healthz`` (no token)."""

    status: Literal["ok"] = "ok"
    version: str = Field(description="ftwiz-agent version.")
    node_name: str = Field(description="The node's configured name.")
    schema_version: str = Field(SCHEMA_VERSION, description="Wire schema version.")


# --------------------------------------------------------------------------- probes


class ConnectProbeRequest(_Model):
    """``POST /v1/probe/connect``: a TCP connect from this node."""

    model_config = ConfigDict(extra="forbid")
    host: str = Field(min_length=1, max_length=253, description="Host name or address to connect to.")
    port: int = Field(ge=1, le=65535, description="TCP port.")
    timeout_s: float = Field(3.0, gt=0, le=10, description="Connect timeout in seconds (at most 10).")


class ConnectProbeResult(_Model):
    """Result of a TCP connect probe."""

    host: str
    port: int
    reachable: bool = Field(description="The TCP handshake completed.")
    latency_ms: Optional[float] = Field(None, description="Handshake time in milliseconds.")
    resolved: Optional[str] = Field(None, description="The address the host resolved to on this node.")
    error: Optional[str] = Field(None, description="Why it failed: refused, timed out, unresolvable.")


class ConnectTarget(_Model):
    """One address of a batch connect probe (a nested ``"port": true`` or ``"80"`` is bad input, not 1 or 80)."""

    model_config = ConfigDict(extra="forbid")
    host: str = Field(min_length=1, max_length=253, pattern=r"^[!-~]+$",
                      description="Host name or address to connect to (printable ASCII, no spaces).")
    port: int = Field(ge=1, le=65535, description="TCP port.")

    @field_validator("port", mode="before")
    @classmethod
    def _number_only(cls, value: Any) -> Any:
        if isinstance(value, (bool, str)):
            raise ValueError("port must be a number, not a boolean or a string")
        return value


class ConnectManyRequest(_Model):
    """``POST /v1/probe/connect-many``: TCP connects from this node to many peers (the mesh's all-pairs latency)."""

    model_config = ConfigDict(extra="forbid")
    targets: list[ConnectTarget] = Field(min_length=1, max_length=100,
                                         description="Peers to connect to (at most 100: the body stays under the agent's 64 KiB limit).")
    tries: int = Field(3, ge=1, le=5, description="Connects per target, one after the other; the best time counts.")
    timeout_s: float = Field(3.0, gt=0, le=10, description="Connect timeout in seconds per try (at most 10).")


class ConnectManyResult(_Model):
    """One :class:`ConnectProbeResult` per target, in the request's order (``latency_ms`` the best of the tries)."""

    results: list[ConnectProbeResult]


class ListenProbeRequest(_Model):
    """``POST /v1/probe/listen``: hold a temporary TCP listener."""

    model_config = ConfigDict(extra="forbid")
    port: int = Field(ge=1, le=65535, description="TCP port to bind on all addresses.")
    ttl_s: float = Field(30.0, gt=0, le=120, description="Seconds to keep listening (at most 120).")


class ListenProbeResult(_Model):
    """The listener the agent now holds."""

    port: int
    listening: bool
    expires_at: float = Field(description="Unix time when the listener closes.")
    accepted: int = Field(0, description="Connections accepted so far (useful on a repeat call).")


class BandwidthProbeRequest(_Model):
    """``POST /v1/probe/bandwidth``: stream to a peer agent's ``/v1/sink``."""

    model_config = ConfigDict(extra="forbid")
    peer_url: str = Field(min_length=8, max_length=300, pattern=r"^https?://", description="Base URL of the peer agent.")
    seconds: float = Field(3.0, gt=0, le=10, description="Seconds to stream (at most 10).")


class BandwidthProbeResult(_Model):
    """Measured throughput to the peer."""

    peer_url: str
    bytes_sent: int
    seconds: float
    gbit_per_s: float
    error: Optional[str] = None


class SinkResult(_Model):
    """``POST /v1/sink``: what the sink received."""

    bytes_received: int
    seconds: float


class ComputeProbeRequest(_Model):
    """``POST /v1/probe/compute``: a short matmul in the training interpreter, on the GPUs or the CPU a rank will use."""

    model_config = ConfigDict(extra="forbid")
    device: Literal["cuda", "cpu"] = Field(description="cuda: every GPU in `gpus` (bf16, fp16 without bf16); cpu: float32 on the CPU.")
    gpus: list[Annotated[int, Field(ge=0, le=1023)]] = Field(
        default_factory=list, max_length=64, description="GPU indices (NVML order) as CUDA_VISIBLE_DEVICES; empty with device cpu.")
    threads: Optional[int] = Field(None, ge=1, le=4096, description="cpu: torch threads, as each CPU rank gets (its OMP_NUM_THREADS).")
    budget_s: float = Field(0.5, gt=0, le=5, description="Seconds of timed matmuls per device.")
    timeout_s: float = Field(60.0, gt=0, le=300, description="Stop the interpreter after this long (importing torch on a cold cache is slow).")
    fresh: bool = Field(False, description="Measure again even when this agent holds a result for the same interpreter and devices.")

    @field_validator("gpus", "threads", "budget_s", "timeout_s", "fresh", mode="before")
    @classmethod
    def _no_coercion(cls, value: Any, info: Any) -> Any:
        """``"threads": true``, ``"gpus": ["1"]`` or ``"fresh": 0`` is bad input, not 1, [1] or false."""
        items = value if isinstance(value, list) else [value]
        if info.field_name == "fresh":
            if not isinstance(value, bool):
                raise ValueError("fresh must be true or false")
        elif any(isinstance(v, (bool, str)) for v in items):
            raise ValueError(f"{info.field_name} must be a number, not a boolean or a string")
        return value


class ComputeDevice(_Model):
    """One device's matmul rate."""

    index: Optional[int] = Field(None, description="GPU index (NVML order); None for the CPU.")
    name: str = Field("", description="Device name as torch sees it.")
    tflops: float = Field(description="Dense matmul TFLOP/s measured.")


class ComputeProbeResult(_Model):
    """The matmul rate of each device, as the training interpreter measured it; cached by the agent per interpreter
    and device set."""

    python: str = Field(description="The training interpreter that ran it.")
    device: Literal["cuda", "cpu"]
    dtype: str = Field("", description="bfloat16, float16 or float32.")
    threads: Optional[int] = Field(None, description="cpu: torch threads used.")
    devices: list[ComputeDevice] = Field(default_factory=list)
    seconds: float = Field(0.0, description="Wall time of the probe, interpreter start included.")
    measured_at: float = Field(0.0, description="Unix time the measurement started.")
    cached: bool = Field(False, description="Answered from this agent's cache (no interpreter started).")
    error: Optional[str] = Field(None, description="Why no figure: no torch, no CUDA, timed out.")


class RefreshResult(_Model):
    """``POST /v1/refresh``."""

    refreshed: bool
    software: Optional[SoftwareVersions] = None


class KilledProcess(_Model):
    """A process the agent signalled for a run."""

    pid: int
    name: Optional[str] = None
    cmdline: Optional[str] = None
    signal: str = Field(description="The last signal sent (SIGTERM or SIGKILL).")
    gone: bool = Field(description="Whether the process is gone now.")


class RunStopResult(_Model):
    """``POST /v1/runs/{run_id}/stop``: the processes that carried ``FTWIZ_RUN_ID=run_id``."""

    run_id: str
    killed: list[KilledProcess] = Field(default_factory=list)
    remaining: list[int] = Field(default_factory=list, description="Pids still alive after SIGKILL.")


class KernelOomRecord(_Model):
    """``GET /v1/kernel/oom/{pid}``: whether this node's kernel logged an OOM kill of ``pid``."""

    pid: int
    found: bool = Field(description="True when the kernel log holds an OOM-killer record of this pid.")
    line: Optional[str] = Field(None, description="The kernel's line naming the pid (\"Killed process N (...)\").")
    source: str = Field("", description="Where it was read: /dev/kmsg or journalctl -k.")
    error: Optional[str] = Field(None, description="Why the kernel log could not be read (then found is false and means 'unknown').")


class ErrorBody(_Model):
    """Error responses: ``{"detail": ...}``."""

    detail: str
