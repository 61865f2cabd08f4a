"""The doctor's reasoning on small logs: time order across nodes, echoes demoted, the record and kernel.

The log lines below are *constructed* in the shapes ftwiz writes (``node/rank | text``) and torch prints
(glog stamps, torchrun's "failed (exitcode: -9)" line); the real shapes are exercised by the quoted
corpus (test_corpus.py) and the induced failures (test_induced.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from shared.doctor_signatures import CAUSES, SIGNATURES, is_normal, match_line
from tui.doctor import as_json, diagnose_files, diagnose_run, format_first, format_text
from tui.doctor.logs import parse_time, read_log


def _write(tmp: Path, name: str, lines: list[str]) -> Path:
    path = tmp / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_signature_names_a_documented_cause_and_a_source():
    for sig in SIGNATURES:
        assert sig.cause in CAUSES and sig.source and 1 <= sig.weight <= 10


def test_normal_lines_are_never_evidence():
    assert is_normal("node0:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>")
    assert is_normal("[deepspeed] OVERFLOW! Gradient overflow. Skipping step, loss scale: 65536 -> 32768")
    assert match_line("FutureWarning: `tokenizer` is deprecated and will be removed") == []
    assert match_line("Connection reset by peer")[0].cause == "net.peer_lost"


def test_times_from_protocol_glog_and_iso(tmp_path):
    assert parse_time('{"ftwiz":"heartbeat","rank":1,"step":3,"time":1763800000.5}', year=2026) == 1763800000.5
    glog = parse_time("E1122 06:12:24.825000 21357 torch/distributed/elastic/multiprocessing/api.py:1002] failed", year=2026)
    iso = parse_time("  time      : 2026-11-22_06:12:24", year=2000)
    assert glog is not None and iso is not None and abs(glog - iso - 0.825) < 1e-3
    path = _write(tmp_path, "node1.log", ["node1/2 | no time here", 'node1/2 | {"ftwiz":"heartbeat","rank":2,"time":1763800000.0}', "node1/2 | after"])
    os.utime(path, (1763800009.0, 1763800009.0))
    lines = read_log(path)
    # unstamped lines take the next stamp below them, else the file's last write
    assert [(line.node, line.rank, line.time) for line in lines] == [("node1", 2, 1763800000.0), ("node1", 2, 1763800000.0), ("node1", 2, 1763800009.0)]


def test_the_first_failure_in_time_wins_and_resets_are_echoes(tmp_path):
    node0 = _write(tmp_path, "node0.log", [
        'node0/0 | {"ftwiz":"heartbeat","rank":0,"step":5,"time":1000.0}',
        'node0/0 | {"ftwiz":"heartbeat","rank":0,"step":6,"time":1009.0}',
        "node0/0 | RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.3]:3456",
    ])
    node2 = _write(tmp_path, "node2.log", [
        'node2/2 | {"ftwiz":"heartbeat","rank":2,"step":5,"time":1001.0}',
        "node2/2 | Traceback (most recent call last):",
        'node2/2 |   File "/home/me/train.py", line 41, in <module>',
        "node2/2 |     step(batch)",
        'node2/2 |   File "/home/me/train.py", line 17, in step',
        "node2/2 |     raise ValueError('bad batch')",
        "node2/2 | ValueError: bad batch",
    ])
    found = diagnose_files([node0, node2])
    assert [d.cause for d in found] == ["code.error", "net.peer_lost"]
    first = found[0]
    assert (first.node, first.rank) == ("node2", 2)
    assert "train.py:17" in first.explanation and "ValueError: bad batch" in first.explanation
    assert any(e.file == "node2.log" and e.line == 7 for e in first.evidence)
    assert found[1].echo and "code.error on node2/rank 2" in found[1].fix


def test_earlier_root_cause_beats_a_later_one_across_files(tmp_path):
    late = _write(tmp_path, "node0.log", ["node0/0 | 2026-01-01 10:00:09 OSError: [Errno 28] No space left on device"])
    early = _write(tmp_path, "node1.log", ["node1/1 | 2026-01-01 10:00:02 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert [d.cause for d in diagnose_files([late, early])] == ["oom.gpu", "disk.full"]


def test_a_healthy_log_gives_nothing(tmp_path):
    path = _write(tmp_path, "node0.log", [
        "node0/- | Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
        'node0/0 | {"ftwiz":"progress","rank":0,"step":10,"loss":2.31,"time":1.0}',
        "node0/0 | node0:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE",
        'node0/0 | {"ftwiz":"done","rank":0,"status":"ok","time":2.0}',
    ])
    assert diagnose_files([path]) == []
    assert format_text([]).startswith("no diagnosis") and format_first([]) == ""
    assert as_json([]) == {"diagnoses": []}


def test_a_parameter_named_in_a_dump_or_a_performance_note_and_a_retried_socket_are_no_evidence(tmp_path):
    """Healthy runs print DDP's flag in config dumps and launcher command lines, reducer.cpp's note that the flag found
    nothing to do, and c10d's W lines while a client retries the store (behind whatever prefix the launcher adds)."""
    path = _write(tmp_path, "node0.log", [
        "[2024-03-24 04:07:20,231] [INFO] [runner.py:568:main] cmd = /opt/conda/bin/python3.10 -u -m deepspeed.launcher.launch "
        "--master_port=29500 src/train_bash.py --ddp_timeout 1800000 --ddp_find_unused_parameters False --fp16 True",
        "ddp_find_unused_parameters=None,",
        "[W reducer.cpp:1346] Warning: find_unused_parameters=True was specified in DDP constructor, but did not find any "
        "unused parameters in the forward pass. This flag results in an extra traversal of the autograd graph every iteration, "
        "which can adversely affect performance. (function operator())",
        "trainer/0 [1]:[W socket.cpp:558] [c10d] The client socket has failed to connect to [::ffff:10.0.0.5]:40323 "
        "(errno: 111 - Connection refused).",
        "[W416 15:12:21.131066630 socket.cpp:933] [c10d] The server socket on [::ffff:10.0.0.13]:38405 has timed out, will retry.",
        "{'loss': 1.0887, 'learning_rate': 2.809917355371901e-06, 'epoch': 0.87}",
    ])
    assert diagnose_files([path]) == []
    # the errors themselves still speak: DDP's unused-parameter error and c10d's E line (in seconds or milliseconds)
    assert match_line("RuntimeError: ... You can enable unused parameter detection by passing the keyword argument "
                      "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`")[0].cause == "ddp.usage"
    assert match_line("[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to "
                      "(GPU03, 29500).")[0].cause == "rendezvous"


def test_a_wait_in_the_store_barrier_that_completed_is_no_evidence(tmp_path):
    waiting = ("INFO:root:Waiting in store based barrier to initialize process group for rank: 1, key: "
               "store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)")
    done = _write(tmp_path, "node0.log", [waiting, "INFO:root:Rank 1: Completed store-based barrier for key:store_based_barrier_key:1 with 2 nodes."])
    assert diagnose_files([done]) == []
    stuck = _write(tmp_path, "node1.log", [waiting, "INFO:root:Added key: store_based_barrier_key:1 to store for rank: 1"])
    assert [d.cause for d in diagnose_files([stuck])] == ["rendezvous"]


def test_a_library_only_warned_about_is_no_evidence_unless_the_process_then_dies(tmp_path):
    """TensorFlow probes optional libraries (TensorRT, cudart on a CPU host) and says so at W level; cuDNN prints
    'Could not load library'. The run goes on. The same line is the cause when the process then dies of it (a FATAL
    line, an abort); an ImportError/OSError on a missing library is the run failing on it."""
    warned = [
        "2023-05-12 05:26:28.924714: W tensorflow/compiler/xla/stream_executor/platform/default/dso_loader.cc:64] Could not "
        "load dynamic library 'libnvinfer.so.7'; dlerror: libnvinfer.so.7: cannot open shared object file: No such file or directory",
        "2023-05-12 05:26:28.924774: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: Cannot dlopen some "
        "TensorRT libraries.",
        "Could not load library libnvrtc.so.11.2. Error: libnvrtc.so.11.2: cannot open shared object file: No such file or directory",
        "Epoch 0:   0%|  | 2/2500 [00:04<1:36:38,  0.43it/s, loss=1.540, lr=0.000]",
    ]
    assert diagnose_files([_write(tmp_path, "fine.log", warned)]) == []
    died = diagnose_files([_write(tmp_path, "died.log", [*warned, "2023-05-12 05:26:31.871503: F tensorflow/compiler/"
                                                         "tf2tensorrt/stub/nvinfer_stub.cc:49] getInferLibVersion symbol not found.",
                                                         "Aborted (core dumped)"])])
    assert [d.cause for d in died][:1] == ["version.skew"] and "libnvinfer.so.7" in died[0].evidence[0].text
    failed = diagnose_files([_write(tmp_path, "import.log", [
        "Traceback (most recent call last):",
        '  File "/app/app.py", line 6, in <module>',
        "    import torch",
        "ImportError: libnccl.so.2: cannot open shared object file: No such file or directory",
    ])])
    assert [d.cause for d in failed] == ["version.skew"]


def test_bitsandbytes_built_without_gpu_support_is_no_evidence_unless_the_run_then_fails(tmp_path):
    """bitsandbytes says it was compiled without GPU support when imported (a WARNING log line, or its ``warn(...)``
    source line under the UserWarning) and the app goes on; the same line is the cause when the run then fails."""
    warned = [
        "2025-08-03 16:25:57 WARNING  The installed version of bitsandbytes was compiled without GPU support.   cextension.py:282",
        " UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit "
        "multiplication, and GPU quantization are unavailable.",
        '  warn("The installed version of bitsandbytes was compiled without GPU support. "',
        "model_names=['flux-dev', 'flux-schnell']",
    ]
    assert diagnose_files([_write(tmp_path, "fine.log", warned)]) == []
    failed = diagnose_files([_write(tmp_path, "failed.log", [
        *warned,
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 40, in <module>',
        "    optimizer.step()",
        "AttributeError: 'NoneType' object has no attribute 'cadam32bit_grad_fp32'",
    ])])
    assert [d.cause for d in failed][:1] == ["version.skew"] and "compiled without GPU support" in failed[0].evidence[0].text


def test_an_import_error_an_availability_probe_caught_is_no_evidence(tmp_path):
    """xformers imports triton in ``_is_triton_available`` and logs the caught traceback as a WARNING; the program goes
    on without it. The same ImportError raised by the training script itself is still the run failing."""
    probed = [
        "WARNING  A matching Triton is not available, some optimizations will not be enabled   __init__.py:61",
        "Traceback (most recent call last):",
        '  File "/venv/lib/site-packages/xformers/__init__.py", line 55, in _is_triton_available',
        "    from xformers.triton.softmax import softmax as triton_softmax  # noqa",
        '  File "/venv/lib/site-packages/xformers/triton/softmax.py", line 11, in <module>',
        "    import triton",
        "ModuleNotFoundError: No module named 'triton'",
        "steps:  10%|██        | 780/7800 [05:04<45:36,  2.57it/s, loss=0.117]",
    ]
    assert diagnose_files([_write(tmp_path, "fine.log", probed)]) == []
    crashed = diagnose_files([_write(tmp_path, "crashed.log", [
        *probed,
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 3, in <module>',
        "    import triton",
        "ModuleNotFoundError: No module named 'triton'",
    ])])
    assert [d.cause for d in crashed] == ["code.error"] and "train.py:3" in crashed[0].explanation


def test_an_exception_python_ignored_at_shutdown_is_no_evidence(tmp_path):
    """'Exception ignored in: <function X.__del__>' and an atexit handler's traceback: Python printed them and went on
    (a DataLoader iterator or a logger torn down after the work was done). A real failure in the same log still speaks."""
    ignored = [
        "Epochs 5/15. Running Loss: 0.0001: 100%",
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f4972feac10>",
        "Traceback (most recent call last):",
        '  File "/env/lib/python3.8/site-packages/torch/utils/data/dataloader.py", line 1328, in __del__',
        '  File "/env/lib/python3.8/site-packages/torch/utils/data/dataloader.py", line 1262, in _shutdown_workers',
        "AttributeError: 'NoneType' object has no attribute 'python_exit_status'",
        "Error in atexit._run_exitfuncs:",
        "Traceback (most recent call last):",
        '  File "/env/lib/python3.7/site-packages/wandb/lib/redirect.py", line 161, in _redirect',
        "    fp.close()",
        "AttributeError: 'TeeHandler' object has no attribute 'close'",
        "Exception ignored in: <function WeakValueDictionary.__init__.<locals>.remove at 0x7f34966fc9d8>",
        "TypeError: 'NoneType' object is not callable",
    ]
    assert diagnose_files([_write(tmp_path, "node0.log", ignored)]) == []
    crashed = diagnose_files([_write(tmp_path, "node1.log", [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 12, in <module>',
        "    loss = model(batch)",
        "ValueError: shapes (3,) and (4,) not aligned",
        *ignored[1:],
    ])])
    assert [d.cause for d in crashed] == ["code.error"] and "train.py:12" in crashed[0].explanation


def test_a_queue_feeder_threads_broken_pipe_is_no_evidence_and_its_other_errors_still_speak(tmp_path):
    """A multiprocessing queue's feeder thread prints the BrokenPipeError it met when the reading end had gone, and the
    process goes on (MLOPTPSU/FedTorch#4: 'I still can get a result'). The same thread failing to write a tensor to a
    full /dev/shm is still the run's failure; a broken pipe outside a feeder thread is still a peer gone."""
    feeder = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.8/multiprocessing/queues.py", line 245, in _feed',
        "    send_bytes(obj)",
        '  File "/usr/lib/python3.8/multiprocessing/connection.py", line 368, in _send',
        "    n = write(self._handle, buf)",
    ]
    step = "Round 12: train loss 0.4131, test accuracy 0.8120"
    for error in ("BrokenPipeError: [Errno 32] Broken pipe", "ConnectionResetError: [Errno 104] Connection reset by peer"):
        assert diagnose_files([_write(tmp_path, "fine.log", [*feeder, error, step])]) == [], error
    shm = diagnose_files([_write(tmp_path, "shm.log", [*feeder[:2], "    obj = _ForkingPickler.dumps(obj)",
                                                       "RuntimeError: unable to write to file </torch_739_144252761_4>: "
                                                       "No space left on device (28)"])])
    assert [d.cause for d in shm][:1] == ["disk.full"]
    peer = diagnose_files([_write(tmp_path, "peer.log", [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 88, in <module>',
        "    dist.all_reduce(t)",
        "BrokenPipeError: [Errno 32] Broken pipe"])])
    assert [d.cause for d in peer][:1] == ["net.peer_lost"]


def test_a_cuda_toolkit_accepted_by_the_op_builder_is_no_evidence_and_a_refused_one_is_version_skew(tmp_path):
    """DeepSpeed's op builder accepts a minor-version difference between the system CUDA and torch's and goes on
    (deepspeedai/DeepSpeed#3105); a major-version difference it refuses, and so does torch's cpp_extension check."""
    accepted = [
        "Installed CUDA version 11.1 does not match the version torch was compiled with 11.7 but since the APIs are "
        "compatible, accepting this combination",
        "[WARNING]  DeepSpeed Op Builder: Installed CUDA version 12.1 does not match the version torch was compiled with "
        "11.8.Detected `DS_SKIP_CUDA_CHECK=1`: Allowing this combination of CUDA, but it may result in unexpected behavior.",
        "Using /root/.cache/torch_extensions/py39_cu118 as PyTorch extensions root...",
        "{'loss': 1.9411, 'learning_rate': 2e-05, 'epoch': 0.01}",
    ]
    assert diagnose_files([_write(tmp_path, "fine.log", accepted)]) == []
    for refused in ("Exception: >- DeepSpeed Op Builder: Installed CUDA version 12.1 does not match the version torch was "
                    "compiled with 11.8, unable to compile cuda/cpp extensions without a matching cuda version.",
                    "deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: Installed CUDA version "
                    "12.2 does not match the version torch was compiled with 11.7, unable to compile cuda/cpp extensions "
                    "without a matching cuda version.",
                    "  The detected CUDA version (12.1) mismatches the version that was used to compile"):
        found = diagnose_files([_write(tmp_path, "refused.log", [*accepted[2:3], refused])])
        assert [d.cause for d in found][:1] == ["version.skew"], refused


def test_a_hub_server_error_the_client_raised_is_hub_access_and_a_retried_one_is_not(tmp_path):
    """huggingface_hub retries a 5xx and a read timeout with a WARNING and goes on when a retry succeeds
    (huggingface/datasets#7440: the Trainer logs eval_loss after them); the HfHubHTTPError it raises once it gives up
    is the run failing to fetch the model (marin-community/marin#2514)."""
    retried = [
        "[2025-03-10 18:07:37 WARNING] HTTP Error 503 thrown while requesting HEAD "
        "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json",
        "[2025-03-10 18:07:37 WARNING] Retrying in 1s [Retry 1/5].",
        "{'eval_loss': 5.276012420654297, 'epoch': 0.09}",
    ]
    assert diagnose_files([_write(tmp_path, "fine.log", retried)]) == []
    raised = diagnose_files([_write(tmp_path, "failed.log", [
        "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):",
        '  File "/venv/lib/python3.11/site-packages/huggingface_hub/utils/_http.py", line 475, in hf_raise_for_status',
        "    raise _format(HfHubHTTPError, str(e), response) from e",
        "huggingface_hub.errors.HfHubHTTPError: 504 Server Error: Gateway Time-out for url: "
        "https://huggingface.co/api/models/stanford-crfm/marin-tokenizer"])])
    assert [d.cause for d in raised][:1] == ["hub.access"]


def test_an_exception_raised_inside_a_data_file_reader_is_data_invalid_and_one_in_the_training_code_is_code_error(tmp_path):
    """A KeyError or ValueError raised by the function that reads the records of a jsonl/csv file (xturing's
    ``from_jsonl``, the datasets json builder's ``_generate_tables``) is the data not being what the loader needs; the
    same exception raised in the training code itself is still code.error, naming its file and line."""
    reader = diagnose_files([_write(tmp_path, "data.log", [
        "Traceback (most recent call last):",
        '  File "/content/main.py", line 8, in <module>',
        "    dataset = InstructionDataset('./dataset/tasks.jsonl')",
        '  File "/usr/local/lib/python3.10/dist-packages/xturing/datasets/instruction_dataset.py", line 89, in from_jsonl',
        '    data["text"].append(json_line["text"])',
        "KeyError: 'text'"])])
    assert [d.cause for d in reader][:1] == ["data.invalid"] and "from_jsonl" in reader[0].explanation
    code = diagnose_files([_write(tmp_path, "code.log", [
        "Traceback (most recent call last):",
        '  File "/content/main.py", line 8, in <module>',
        '    batch = collate(records["text"])',
        "KeyError: 'text'"])])
    assert [d.cause for d in code] == ["code.error"] and "main.py:8" in code[0].explanation


def _killed_run(tmp_path: Path, **record_extra) -> tuple[Path, dict]:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    _write(run, "node1.log", [
        'node1/2 | {"ftwiz":"started","rank":2,"pid":4242,"time":1763800000.0}',
        "node1/- | E1122 06:12:24.825000 21357 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 4242) of binary: /venv/bin/python",
    ])
    _write(run, "node0.log", ["node0/0 | RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:1"])
    record = {"status": "failed", "ranks": {"2": {"node": "node1", "pid": 4242}}, **record_extra}
    (run / "run.json").write_text(json.dumps(record))
    return run, record


def test_sigkill_is_oom_host_confirmed_only_by_the_kernel(tmp_path):
    run, _ = _killed_run(tmp_path)
    asked = []

    def kernel_yes(node, pid, at):
        asked.append((node, pid))
        assert at is not None  # the kill's time goes to the agent: only a record near it counts
        return "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:221368kB"

    confirmed = diagnose_run(run, kernel=kernel_yes)
    assert confirmed[0].cause == "oom.host" and confirmed[0].confirmed is True and (confirmed[0].node, confirmed[0].rank) == ("node1", 2)
    assert asked == [("node1", 4242)] and confirmed[0].evidence[0].file == "node1:kernel"
    unconfirmed = diagnose_run(run, kernel=lambda node, pid, at: None)
    assert unconfirmed[0].cause == "oom.host" and unconfirmed[0].confirmed is False
    assert "not the OOM killer" in unconfirmed[0].explanation
    assert "confirmed" not in as_json(diagnose_run(run))["diagnoses"][0]  # nobody asked: neither


def test_a_sigkill_after_ftwiz_began_stopping_is_ftwizs_own(tmp_path):
    run, _ = _killed_run(tmp_path)
    stamp = read_log(run / "node1.log")[1].time  # the kill line's own time (its year from the line above)
    assert stamp is not None
    run, _ = _killed_run(tmp_path / "again", stop_requested_at=stamp - 10, stop_reason="rank 3 failed")
    assert [d.cause for d in diagnose_run(run)] == ["net.peer_lost"]


def test_json_document_shape(tmp_path):
    path = _write(tmp_path, "node3.log", ["[rank5]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB."])
    doc = as_json(diagnose_files([path], record={"config": {"job": {"micro_batch_size": 4, "grad_accum_steps": 2, "method": "lora"}}}))
    item = doc["diagnoses"][0]
    assert set(item) == {"cause", "node", "rank", "evidence", "explanation", "fix"}
    assert (item["cause"], item["node"], item["rank"]) == ("oom.gpu", "node3", 5)
    assert item["evidence"] == [{"file": "node3.log", "line": 1, "text": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB."}]
    assert "micro_batch_size 4 -> 2" in item["fix"] and "grad_accum_steps 2 -> 4" in item["fix"]


def test_the_headless_printer_ends_a_failed_run_with_the_first_diagnosis():
    import io

    from tui.doctor.hook import WHY_PREFIX, why_note
    from tui.launch.commands import HeadlessPrinter
    from tui.launch.events import RunFinished, RunNote, RunResult
    from tui.runs.status import RunStatus

    out, err = io.StringIO(), io.StringIO()
    printer = HeadlessPrinter(out, err)
    why = "why: oom.host — the kernel's OOM killer killed pid 7 on node1 (rank 2)"
    printer(RunNote(why, "error"))
    printer(RunFinished(RunResult("r1", RunStatus.FAILED, 1, reason="rank 2 failed", failed_node="node1", failed_rank=2)))
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("ftwiz: run r1 FAILED") and lines[-2] == f"ftwiz: {why}" and lines[-1].endswith("ftwiz --why r1")
    assert why.startswith(WHY_PREFIX) and why_note([("info", "x"), ("error", why)]) == why


def test_differing_versions_lead_when_the_log_shows_only_a_socket_error(tmp_path):
    from tui.doctor import diagnose_lines
    from tui.doctor.logs import read_log
    from tui.doctor.versions import versions_from_reports

    class Software:  # the shape of shared.models.SoftwareVersions
        def __init__(self, torch, nccl):
            self.torch, self.torch_cuda, self.nccl, self.python = torch, "12.1", nccl, "3.11.7"

    class Report:
        def __init__(self, torch, nccl):
            self.software, self.driver_version = Software(torch, nccl), "550.54.15"

    versions = versions_from_reports({"node0": Report("2.3.0", "2.20.5"), "node1": Report("2.3.0", "2.20.5"), "node2": Report("2.1.2", "2.18.1")})
    path = _write(tmp_path, "node0.log", ["node0/0 | RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.3]:3"])
    found = diagnose_lines(read_log(path), record={"versions": versions})
    assert [d.cause for d in found] == ["version.skew", "net.peer_lost"]
    assert found[0].node == "node2" and "torch, nccl differ" in found[0].explanation and "node2" in found[0].fix
    assert found[0].evidence[0].text == "versions.torch: node0=2.3.0, node1=2.3.0, node2=2.1.2"
    # A real root cause in the log stays first; the skew follows it.
    oom = _write(tmp_path, "node1.log", ["node1/1 | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert [d.cause for d in diagnose_lines(read_log(oom), record={"versions": versions})] == ["oom.gpu", "version.skew"]
    same = versions_from_reports({"a": Report("2.3.0", "2.20.5"), "b": Report("2.3.0", "2.20.5")})
    assert [d.cause for d in diagnose_lines(read_log(path), record={"versions": same})] == ["net.peer_lost"]


def test_a_rendezvous_error_after_workers_ran_is_an_echo(tmp_path):
    node0 = _write(tmp_path, "node0.log", [
        'node0/1 | {"ftwiz":"heartbeat","rank":1,"step":5,"time":1763800000.0}',
        "node0/1 | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    ])
    node1 = _write(tmp_path, "node1.log", [
        'node1/2 | {"ftwiz":"heartbeat","rank":2,"step":5,"time":1763799990.0}',
        "node1/- | torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.",
        'node1/2 | {"ftwiz":"heartbeat","rank":2,"step":6,"time":1763799995.0}',
    ])
    found = diagnose_files([node0, node1])
    assert [(d.cause, d.echo) for d in found] == [("oom.gpu", False), ("rendezvous", True)]


def test_a_checklist_warning_the_run_went_past_is_cited():
    from tui.doctor.checklist import cite_checklist
    from tui.doctor.model import Diagnosis

    diag = Diagnosis(cause="port.in_use", node="node0", rank=None, evidence=[], explanation="The port is taken.", fix="free it")
    echo = Diagnosis(cause="net.peer_lost", node="node1", rank=1, evidence=[], explanation="A peer went away.", fix="-", echo=True)
    record = {"checklist": [
        {"id": "rendezvous.port_free", "status": "fail", "node": "node0", "detail": "port 29500 held by pid 77 (python3)"},
        {"id": "net.mtu", "status": "warn", "node": "node1", "detail": "eth0 MTU 1400 on node1"},
        {"id": "gpu.present", "status": "pass", "node": "node0", "detail": "fine"},
    ]}
    cited = cite_checklist([diag, echo], record)
    assert "rendezvous.port_free FAIL on node0: port 29500 held by pid 77" in cited[0].explanation
    assert "--force" in cited[0].explanation and "net.mtu" not in cited[0].explanation
    assert cited[1].explanation == "A peer went away."  # echoes cite nothing


def test_unknown_names_the_first_error_of_the_first_failing_rank_not_the_launchers_summary(tmp_path):
    path = _write(tmp_path, "node0.log", [
        "node0/1 | step 3 loss 1.25",
        "node0/2 | [2026-11-22 06:12:20] worker ready",
        "node0/2 | [2026-11-22 06:12:21] xformers.ops.fmha.common.NotSupportedInputError: No operator found for `memory_efficient_attention_forward`",
        "node0/1 | [2026-11-22 06:12:22] SomeLibError: a later one on another rank",
        "node0/- | E1122 06:12:24.825000 21357 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 2 (pid: 77)",
        "node0/- | torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ])
    first = diagnose_files([path])[0]
    assert (first.cause, first.node, first.rank) == ("unknown", "node0", 2)
    assert first.evidence[0].line == 3 and "NotSupportedInputError" in first.explanation


def test_ftwizs_own_error_lines_are_the_diagnosis_naming_the_file(tmp_path):
    missing = ('train.py not found in /srv/run/code: [job].command resolves inside the shipped code_dir (or the node\'s '
               'workdir when code_dir = ""); fix the path or code_dir')
    path = _write(tmp_path, "node1.log", [
        "node1/3 | " + json.dumps({"ftwiz": "error", "rank": 3, "message": missing, "time": 1763800000.0}),
        "node1/- | torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ])
    first = diagnose_files([path])[0]
    assert (first.cause, first.node, first.rank) == ("code.error", "node1", 3)
    assert "train.py not found in /srv/run/code" in first.explanation and first.fix == "fix the path or code_dir"
    data = _write(tmp_path / "d", "node0.log", ["ftwiz: error (rank 0): data/train.jsonl line 7: not valid JSON (Expecting value at column 1); "
                                                "each line must be an object"]) if (tmp_path / "d").mkdir() is None else None
    assert data is not None and diagnose_files([data])[0].cause == "data.invalid"
    package = _write(tmp_path, "node2.log", ['node2/0 | {"ftwiz": "error", "rank": 0, "message": "ModuleNotFoundError: No module named \'peft\'"}'])
    assert diagnose_files([package])[0].cause == "version.skew"
    oom = _write(tmp_path, "node3.log", ['node3/1 | {"ftwiz": "error", "rank": 1, "message": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"}'])
    assert diagnose_files([oom])[0].cause == "oom.gpu"


def test_nccl_asked_for_on_a_node_without_a_gpu_says_gloo_or_cpu_ranks(tmp_path):
    for text in ("RuntimeError: Distributed package doesn't have NCCL built in",
                 "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"):
        path = _write(tmp_path, "node0.log", ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
                                              '    dist.init_process_group("nccl")', text])
        first = diagnose_files([path])[0]
        assert "--backend gloo" in first.fix and "cpu_ranks = N" in first.fix, first


def test_a_slurm_reason_line_outranks_an_earlier_generic_cancelled_line(tmp_path):
    path = _write(tmp_path, "node0.log", [
        "slurmstepd: error: *** STEP 4242.0 ON n1 CANCELLED AT 2024-01-05T14:27:50 ***",
        "slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2024-01-05T14:27:51 DUE TO PREEMPTION ***",
    ])
    assert [d.cause for d in diagnose_files([path])][:2] == ["slurm.preempted", "slurm.cancelled"]
    alone = _write(tmp_path, "node1.log", ["slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2024-01-05T14:27:50 ***"])
    assert diagnose_files([alone])[0].cause == "slurm.cancelled"  # scancel, and nothing else said


def test_an_nccl_warn_line_beats_the_louder_peer_closed_noise(tmp_path):
    path = _write(tmp_path, "node0.log", [
        "host1:2999605:3004403 [0] NCCL INFO comm 0x55 rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE",
        "host1:2999605:3004403 [0] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'",
        "[rank0]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error",
        "[rank1]: RuntimeError: Connection closed by peer [10.0.0.2]:4242",
    ])
    assert diagnose_files([path])[0].cause == "oom.gpu"


def test_a_notebook_traceback_is_read_whole(tmp_path):
    path = _write(tmp_path, "node0.log", [
        "ValueError                                Traceback (most recent call last)",
        "Cell In[8], line 1",
        "----> 1 trainer_stats = trainer.train()",
        "",
        "File ~/work/train_helpers.py:36, in train(self, resume_from_checkpoint)",
        "     35 batch = next(loader)",
        "---> 36 check(batch)",
        "",
        "ValueError: batch 3 has no labels",
    ])
    first = diagnose_files([path])[0]
    assert first.cause == "code.error" and "train_helpers.py:36" in first.explanation, first
