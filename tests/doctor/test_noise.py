"""Healthy noise against the failure it resembles: fp16 loss-scale warm-up, a nan grad norm in the first logged steps,
c10d's W lines, the NCCL watchdog's 'failed or timed out' report.

Each test holds both sides of one family: the noise of a run that worked gives no diagnosis, and the real failure of
that cause still speaks. The noise lines are *constructed* in the shapes mmocr, the HF Trainer, fairseq and c10d
print; the failures that must still speak are also read from tuning-set cases of the corpus (never held-out ones).
"""

from __future__ import annotations

from pathlib import Path

from tests.doctor.corpus import load_corpus
from tui.doctor import diagnose_files


def _first(tmp: Path, lines: list[str], name: str = "node0.log") -> str | None:
    path = tmp / name
    path.write_text("\n".join(lines) + "\n")
    found = diagnose_files([path])
    return found[0].cause if found else None


def _tuning_case(case_id: str) -> list[str]:
    case = next(c for c in load_corpus() if c.id == case_id)
    assert not case.held_out, f"{case_id} is held out: tests never read held-out cases"
    return case.excerpt.splitlines()


def test_a_nan_grad_norm_in_the_first_logged_steps_is_warmup_when_finite_values_follow(tmp_path):
    mmocr = ("2021-11-22 01:31:40,121 - mmocr - INFO - Epoch [1][{step}/62598]\tlr: 1.000e-03, time: 0.539, "
             "loss: {loss}, grad_norm: {norm}")
    assert _first(tmp_path, [mmocr.format(step=100, loss="1.9091", norm="nan"),
                             mmocr.format(step=200, loss="0.9186", norm="3.9772")]) is None
    trainer = "{{'loss': {loss}, 'grad_norm': {norm}, 'learning_rate': {lr}, 'epoch': {epoch}}}"
    assert _first(tmp_path, [trainer.format(loss="2.3011", norm="nan", lr="0.0", epoch="0.01"),
                             trainer.format(loss="2.2871", norm="inf", lr="2e-06", epoch="0.02"),
                             trainer.format(loss="2.1057", norm="1.8125", lr="4e-06", epoch="0.03")]) is None
    # an eval metric or a perplexity that is inf is no training loss
    assert _first(tmp_path, ["{'eval_loss': nan, 'eval_perplexity': inf, 'epoch': 1.0}", "Epoch 1: val_loss=nan, ppl=inf"]) is None
    # the failure still speaks: nan after finite values (even if it recovers once), nan that never recovers
    assert _first(tmp_path, [mmocr.format(step=100, loss="1.9091", norm="3.1"), mmocr.format(step=200, loss="nan", norm="nan"),
                             mmocr.format(step=300, loss="0.9186", norm="3.9772")]) == "loss.nan"
    assert _first(tmp_path, [trainer.format(loss="0.2051", norm="nan", lr="9.77e-06", epoch="0.53"),
                             trainer.format(loss="0.0", norm="nan", lr="9.77e-06", epoch="0.53")]) == "loss.nan"
    assert _first(tmp_path, ["Epoch[1/20][6200/30477] lr: 5.000e-05, grad_scale: 4.000, total_loss: 0.166",
                             "Epoch[1/20][6300/30477] lr: 5.000e-05, grad_scale: 2.000, total_loss: nan"]) == "loss.nan"
    assert _first(tmp_path, _tuning_case("JeffWang987-DriveDreamer-23-1")) == "loss.nan"


def test_tensorboards_nan_or_inf_warning_is_no_evidence_and_a_nan_loss_still_speaks(tmp_path):
    """tensorboardX's warning names no scalar: in the tuning set it is only in runs that worked (beside a finite loss at
    every logging step, lm-sys/FastChat#2378; fp16 warm-up, ChenRocks/UNITER#28; a one-element tensor's std,
    allenai/allennlp#3116). A loss that does turn nan is logged as nan."""
    warmup = ["Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0",
              "Warning: NaN or Inf found in input tensor.",
              "Epoch: 1 | step 20 | loss: 6.8008 | grad_norm: 2.31"]
    assert _first(tmp_path, warmup) is None
    every_step = ["WARNING:root:NaN or Inf found in input tensor.",
                  "{'loss': 3.0489, 'learning_rate': 5.9999999999999995e-05, 'epoch': 0.01}",
                  "WARNING:root:NaN or Inf found in input tensor.",
                  "{'loss': 2.8812, 'learning_rate': 5.9999999999999995e-05, 'epoch': 0.02}",
                  "WARNING:root:NaN or Inf found in input tensor."]
    assert _first(tmp_path, every_step) is None
    assert _first(tmp_path, ["Epoch: 15 | step 8000 | loss: 0.1499 | grad_norm: 0.42",
                             "Warning: NaN or Inf found in input tensor."]) is None
    assert _first(tmp_path, [*every_step, "{'loss': nan, 'learning_rate': 6e-05, 'epoch': 0.03}"]) == "loss.nan"


def test_a_nan_grad_norm_alone_is_a_step_the_run_went_past_and_one_on_every_step_is_divergence(tmp_path):
    """Megatron's guard skipping one step (epfLLM/Megatron-LLM#34) and an overflow among finite losses
    (ZYang2077/DAOcc#25) log one non-finite grad norm; a diverged run logs it on every step (AnswerDotAI/ModernBERT#233)."""
    finite = " iteration     3633/    8000 | lm loss: 2.1E+00 | loss scale: 1.0 | grad norm: 0.794 | number of skipped iterations:   0 |"
    skipped = [finite, "***WARNING*** Bad grad_norm detected (grad_norm=nan)",
               " iteration     3634/    8000 | loss scale: 1.0 | number of skipped iterations:   1 |"]
    assert _first(tmp_path, skipped) is None
    assert _first(tmp_path, ["Epoch [1][50/30895]\tlr: 7.973e-05, loss/occ/loss_occ: 2.4932, loss: 267.1156, grad_norm: nan"]) is None
    diverged = ["{'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.774074342405685e-06, 'epoch': 0.53}",
                "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.773696745450087e-06, 'epoch': 0.53}"]
    assert _first(tmp_path, diverged) == "loss.nan"
    assert _first(tmp_path, [finite, *diverged]) == "loss.nan"
    # a nan loss speaks alone: only the grad norm has to repeat
    assert _first(tmp_path, [finite, "step 3634 | total_loss: nan | grad_norm: 0.8"]) == "loss.nan"


def test_a_sentence_about_nan_losses_is_not_a_nan_loss(tmp_path):
    amp_check = ["AMP: running Automatic Mixed Precision (AMP) checks with YOLOv8n...",
                 "AMP: checks failed . Anomalies were detected with AMP on your system that may lead to NaN losses or "
                 "zero-mAP results, so AMP will be disabled during training.",
                 "Starting training for 500 epochs..."]
    assert _first(tmp_path, amp_check) is None
    assert _first(tmp_path, ["step 300: nan loss, stopping"]) == "loss.nan"


def test_fairseqs_loss_scale_notes_are_warmup_until_the_scale_reaches_its_floor(tmp_path):
    assert _first(tmp_path, [
        "2020-08-01 12:39:16 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 1024.0",
        "2020-08-01 12:39:39 | INFO | train_inner | epoch 001:   3615 / 6547 loss=0.439, nll_loss=0.001, loss_scale=1399",
    ]) is None
    # a run that lives near a scale of 1 dips below it and grows back while its loss improves
    assert _first(tmp_path, [
        "| epoch 012 | loss 3.902 | nll_loss 2.231 | ppl 4.69 | num_updates 3050 | gnorm 0.311 | loss_scale 1.000",
        "| WARNING: overflow detected, setting loss scale to: 1.0",
        "| WARNING: overflow detected, setting loss scale to: 0.5",
        "| WARNING: overflow detected, setting loss scale to: 0.25",
    ]) is None
    assert _first(tmp_path, ["| WARNING: overflow detected, setting loss scale to: 0.0001220703125"]) == "loss.nan"
    assert _first(tmp_path, ["| WARNING: overflow detected, setting loss scale to: 0.03125"]) == "loss.nan"
    assert _first(tmp_path, ["FloatingPointError: Minimum loss scale reached (0.0001)."]) == "loss.nan"
    assert _first(tmp_path, _tuning_case("facebookresearch-fairseq-512-1")) == "loss.nan"


def test_c10d_warning_lines_of_a_run_that_worked_are_noise_and_a_watchdog_timeout_still_speaks(tmp_path):
    assert _first(tmp_path, [
        "[W Utils.hpp:135] Warning: Environment variable NCCL_ASYNC_ERROR_HANDLING is deprecated; use "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING instead (function getCvarInt)",
        "[rank0]:[W1016 08:12:20.338018212 ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 0] using GPU 0 to perform "
        "barrier as devices used by this process are currently unknown. This can potentially cause a hang if this rank to "
        "GPU mapping is incorrect.",
        "I1016 08:12:20.338 4030959 ProcessGroupNCCL.cpp:980] [PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL environments: "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING: 3, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, TIMEOUT(ms): 1800000",
        "[rank0]:[W730 15:32:17.841273251 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not "
        "called before program exit, which can leak resources. (function operator())",
        '[rank7]:[W624 12:52:07.296197118 ProcessGroupNCCL.cpp:1659] [PG ID 0 PG GUID 0 Rank 7] Failed to check the '
        '"should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Broken pipe',
    ]) is None
    # the store's own W line is no c10d warning of that kind: a rank that lost the master still speaks
    assert _first(tmp_path, _tuning_case("qibin0506-Cortex-17-1")) == "net.peer_lost"
    assert _first(tmp_path, [
        "[rank1]:[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800549 milliseconds before timing out.",
    ]) == "nccl.timeout"


def test_the_watchdogs_failed_or_timed_out_report_defers_to_the_error_it_names(tmp_path):
    report = ("[rank5]:[E207 19:37:09.983540349 ProcessGroupNCCL.cpp:681] [Rank 5] Some NCCL operations have failed or "
              "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
              "corrupted/incomplete data.")
    assert _first(tmp_path, [report, "ncclRemoteError: A call failed possibly due to a network error or a remote process "
                             "exiting prematurely.", "socketProgressOpt: Call to recv from 10.1.2.3<49901> failed : Broken pipe"]
                  ) == "net.peer_lost"
    assert _first(tmp_path, _tuning_case("hiyouga-LlamaFactory-6849-1")) == "net.peer_lost"
    # a real timeout: the watchdog's own timeout line comes first and still speaks
    assert _first(tmp_path, [
        "[rank5]:[E207 19:07:09.1 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=20879, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800088 milliseconds before timing out.",
        report,
    ]) == "nccl.timeout"
    # a headless watchdog log (the family: the report without the timeout headline) is still a timeout
    assert _first(tmp_path, [report, "[rank5]:[E207 19:37:09.983555114 ProcessGroupNCCL.cpp:695] [Rank 5] To avoid data "
                             "inconsistency, we are taking the entire process down."]) == "nccl.timeout"


def test_an_evaluation_loss_spelt_with_a_space_that_is_nan_is_no_training_loss(tmp_path):
    # an empty or label-less evaluation set: the validation loss divides by zero tokens while training runs on
    mlx = ["Epoch 1: Iter 1: Val loss nan, Val took 0.002s",
           "Iter 10: Train loss 2.987, Learning Rate 2.000e-04, It/sec 0.028",
           "Epoch 50: Iter 50: Val loss nan, Val took 0.000s"]
    assert _first(tmp_path, mlx) is None
    assert _first(tmp_path, ["| epoch 004 | valid on 'valid' subset | valid loss nan | valid ppl inf",
                             "Validation loss: nan", "eval loss = nan", "Test loss: inf", "dev loss nan"]) is None
    # the failure still speaks: the training loss itself, spelt the same way, after finite values
    assert _first(tmp_path, ["Iter 10: Train loss 2.987, Learning Rate 2.000e-04",
                             "Iter 20: Train loss nan, Learning Rate 2.000e-04"]) == "loss.nan"
    assert _first(tmp_path, ["Epoch 3 | loss 0.812 | val loss 0.9", "Epoch 4 | loss nan | val loss nan"]) == "loss.nan"
    assert _first(tmp_path, _tuning_case("JeffWang987-DriveDreamer-23-1")) == "loss.nan"


def test_the_shells_killed_report_is_a_sigkill_in_any_of_its_spellings_and_killing_words_are_not(tmp_path):
    step = "iter 144: image-id:0254212, time:1.722(sec), regular_loss: 0.248765, total-loss 0.5882"
    for killed in ("Killed", "> Killed", "**Killed**", "[1]+  Killed                  python train.py --cfg a.yaml",
                   "./run.sh: line 3: 48213 Killed                  python train.py"):
        assert _first(tmp_path, [step, killed]) == "oom.host", killed
    assert _first(tmp_path, _tuning_case("CharlesShang-FastMaskRCNN-172-1")) == "oom.host"
    # words about killing that are no SIGKILL report of this run give no diagnosis
    assert _first(tmp_path, [step, "Killed 3 stale dataloader workers from the previous epoch", step,
                             "INFO: the watchdog killed nothing", step]) is None


def test_slurms_non_fatal_notes_worded_as_errors_are_noise_and_a_killed_step_still_speaks(tmp_path):
    # the memory accounting's note (logged even when the step was not killed), and a client ignoring a bad option
    assert _first(tmp_path, ["slurmstepd: error: Exceeded step memory limit at some point. Step may have been partially "
                             "swapped out to disk.", "done"]) is None
    assert _first(tmp_path, ["$ SBATCH_EXCLUSIVE=true sbatch --wrap 'hostname'",
                             "sbatch: error: \"SBATCH_EXCLUSIVE=true\" -- invalid value, ignoring...",
                             "Submitted batch job 1152535"]) is None
    # the step killed for its memory, and a task that failed, still speak
    assert _first(tmp_path, ["slurmstepd: error: Exceeded step memory limit at some point.",
                             "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0. Some of your processes "
                             "may have been killed by the cgroup out-of-memory handler."]) == "oom.host"
    assert _first(tmp_path, ["srun: error: node7: task 0: Exited with exit code 1"]) == "unknown"


def test_torchruns_failed_rendezvous_shutdown_at_exit_is_noise_and_a_store_that_cannot_be_reached_still_speaks(tmp_path):
    # recorded here: a two-node run of the built-in recipe that trained to its last step (test_induced's healthy
    # scenario, torch 2.13.0); node1's torchrun closed the rendezvous after node0's torchrun, the store's host, had exited
    node1 = [
        "[W1128 15:28:25.911799630 TCPStore.cpp:115] [c10d] recvVector failed on SocketImpl(fd=3, addr=[e0de:4a04:ff7f:0:93f7"
        ":4542:6455:0]:1098, remote=[fdff:ffff:0:0:1::]:16959): Failed to recv, got 0 bytes. Connection was likely closed. "
        "Did the remote server shutdown or crash?",
        "W1128 15:28:25.621000 8367 .venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/"
        "dynamic_rendezvous.py:1298] The node 'localhost_8367_0' has failed to shutdown the rendezvous 'ok' due to an error "
        "of type RendezvousConnectionError.",
        # the same race in the keep-alive thread (recorded in test_induced's disk scenario, same torch)
        "W1128 15:29:08.139000 8932 .venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/"
        "dynamic_rendezvous.py:1346] The node 'localhost_8932_0' has failed to send a keep-alive heartbeat to the "
        "rendezvous 'disk' due to an error of type RendezvousConnectionError.",
    ]
    (tmp_path / "node0.log").write_text("step 1 loss: 1.2498\nstep 2 loss: 1.1762\nstep 3 loss: 1.1163\n")
    assert _first(tmp_path, node1, name="node1.log") is None
    assert diagnose_files([tmp_path / "node0.log", tmp_path / "node1.log"]) == []
    # the store that cannot be reached when the run starts still speaks
    assert _first(tmp_path, _tuning_case("pytorch-pytorch-67547-1")) == "rendezvous"


def test_a_cancelled_feeder_thread_at_the_end_of_a_run_is_no_error_and_a_real_one_still_speaks(tmp_path):
    """TensorFlow's enqueue thread raises CancelledError when the session closes after training (DeepLabCut/DeepLabCut
    #955, #683: 'This is fine'): a cancellation is a stop something else asked for, never a cause nor the first error."""
    cancelled = ["iteration: 1030000 loss: 0.0007 lr: 0.001",
                 "Exception in thread Thread-1:",
                 "Traceback (most recent call last):",
                 '  File "/env/lib/python3.6/site-packages/tensorflow_core/python/client/session.py", line 1365, in _do_call',
                 "    return fn(*args)",
                 "tensorflow.python.framework.errors_impl.CancelledError: Enqueue operation was cancelled"]
    assert _first(tmp_path, cancelled) is None
    assert _first(tmp_path, [*cancelled, "Traceback (most recent call last):", '  File "/work/train.py", line 9, in <module>',
                             "ValueError: could not broadcast input array"]) == "code.error"


def test_a_json_log_record_without_a_training_loss_is_no_nan(tmp_path):
    """``null`` is a field the step did not log (LLaMA-Factory's trainer_log.jsonl closes with one); Python's json
    writes a nan as ``NaN``, which is the divergence."""
    record = ('{{"current_steps": {step}, "total_steps": 900, "loss": {loss}, "eval_loss": null, "learning_rate": {lr}, '
              '"epoch": {epoch}, "percentage": {pct}}}')
    assert _first(tmp_path, [record.format(step=890, loss="0.4127", lr="1.2e-07", epoch="2.97", pct="98.89"),
                             record.format(step=900, loss="null", lr="null", epoch="3.0", pct="100.0")]) is None
    assert _first(tmp_path, [record.format(step=10, loss="1.873", lr="2e-05", epoch="0.03", pct="1.11"),
                             record.format(step=20, loss="NaN", lr="2e-05", epoch="0.07", pct="2.22")]) == "loss.nan"


def test_round_eleven_families_speak_and_their_neighbours_do_not(tmp_path):
    """The families the tuning-side corpus_m added (constructed lines in the shapes those threads show)."""
    assert _first(tmp_path, ["OutOfMemoryError                          Traceback (most recent call last)",
                             "----> 1 trainer.train()"]) == "oom.gpu"  # a notebook's header, its message not pasted
    assert _first(tmp_path, ["ModuleNotFoundError: No module named 'transformers.models.gemma2'"]) == "version.skew"
    assert _first(tmp_path, ["TypeError: Accelerator.__init__() got an unexpected keyword argument 'logging_dir'"]) == "version.skew"
    assert _first(tmp_path, ["ImportError: Using the `Trainer` with `PyTorch` requires `accelerate>=0.20.1`"]) == "version.skew"
    assert _first(tmp_path, ["datasets.arrow_writer.SchemaInferenceError: Please pass `features` or at least one example "
                             "when writing data"]) == "data.invalid"
    assert _first(tmp_path, ["FileNotFoundError: [Errno 2] No such file or directory: './data_files/traindata_1313.pt'"]) == "data.invalid"
    # a model under a /data mount is no dataset; a module of the user's own is no library's
    assert _first(tmp_path, ["FileNotFoundError: [Errno 2] No such file or directory: '/data/models/llama/model.safetensors'"]) != "data.invalid"
    for model_file in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"):
        assert _first(tmp_path, [f"FileNotFoundError: [Errno 2] No such file or directory: 'llama/{model_file}'"]) != "data.invalid"
    assert _first(tmp_path, ["FileNotFoundError: [Errno 2] No such file or directory: 'data/train.json'"]) == "data.invalid"
    for not_data in ("/opt/venv/lib/python3.11/site-packages/torch-2.4.0.dist-info/METADATA", "ckpt/step_500/.metadata"):
        assert _first(tmp_path, [f"FileNotFoundError: [Errno 2] No such file or directory: '{not_data}'"]) != "data.invalid"
    assert _first(tmp_path, ["  File \"/opt/conda/lib/python3.10/site-packages/transformers/trainer.py\", line 2368, in _save_checkpoint",
                             "    metric_value = metrics[metric_to_check]", "KeyError: 'eval_accuracy'"]) == "code.error"
    assert _first(tmp_path, ["ModuleNotFoundError: No module named 'mytrain.utils'"]) != "version.skew"
    assert _first(tmp_path, ["[rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] waitForInput: socket "
                             "SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:29500) timed out after 1800000ms",
                             "torch.distributed.DistStoreError: wait timeout after 1800000ms"]) == "rendezvous"


def test_round_twelve_families_speak_and_their_neighbours_do_not(tmp_path):
    """Families from corpus_n.jsonl (tuning side), each beside a line that must not trigger it."""
    # peer access refused: too many peers, an unmappable peer BAR, multi-node NVLink without IMEX; UCX's IB retries
    assert _first(tmp_path, ["CUDA error: peer mapping resources exhausted", "Aborted (core dumped)"]) == "p2p.topology"
    assert _first(tmp_path, ["[0] allocator.cc:89 (ncclMemAlloc) NCCL WARN Cuda failure 205 'mapping of buffer object failed'"]) == "p2p.topology"
    assert _first(tmp_path, ["[1] mnnvl.cc:67 NCCL WARN MNNVL (cliqueSize 8) is available but not working on this system. "
                             "Check the IMEX channel configuration"]) == "p2p.topology"
    assert _first(tmp_path, ["[master:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB"]) == "p2p.topology"
    # NCCL's own INFO chatter about a transport it chose is no evidence
    assert _first(tmp_path, ["host:1:2 [1] NCCL INFO Could not enable P2P between dev 1(=1b000) and dev 0(=1a000)",
                             "host:1:2 [1] NCCL INFO Channel 00 : 1[1b000] -> 0[1a000] via direct shared memory"]) is None
    # an address no interface holds (gloo), an empty master address (DeepSpeed's runner)
    assert _first(tmp_path, ["RuntimeError: [enforce fail at gloo/transport/tcp/device.cc:212] ifa != nullptr. "
                             "Unable to find interface for: [0.0.0.189]"]) == "net.interface"
    assert _first(tmp_path, ["[INFO] [runner.py:417:main] Using IP address of  for node ddp-0.svc"]) == "net.interface"
    assert _first(tmp_path, ["[INFO] [runner.py:417:main] Using IP address of 10.0.0.4 for node ddp-0.svc"]) is None
    # an empty dataset, a column the data lacks, a path under a dataset folder (not a model's file there)
    assert _first(tmp_path, ["ValueError: num_samples should be a positive integer value, but got num_samples=0"]) == "data.invalid"
    assert _first(tmp_path, ["ValueError: Column 'text' not in the dataset. Current columns in the dataset: ['prompt']"]) == "data.invalid"
    assert _first(tmp_path, ["FileNotFoundError: [Errno 2] No such file or directory: '/work/proj/dataset/train_p=-2'"]) == "data.invalid"
    assert _first(tmp_path, ["FileNotFoundError: [Errno 2] No such file or directory: '/datasets/llama/config.json'"]) != "data.invalid"
    # the model's output and its labels disagree: the code's shapes
    assert _first(tmp_path, ["ValueError: Expected input batch_size (60) to match target batch_size (10)."]) == "code.error"
    # a loss scale driven to nothing in dllogger's words, an average loss gone nan, ignite's TerminateOnNan
    assert _first(tmp_path, ["DLL 2020-06-04 01:04:46 - PARAMETER loss_scale : 1.4551915228366852e-11"]) == "loss.nan"
    assert _first(tmp_path, ["DLL 2020-06-04 01:04:46 - PARAMETER loss_scale : 65536.0"]) is None
    assert _first(tmp_path, ["Training Iteration: 2933  average_loss : nan  step_loss : 1.07"]) == "loss.nan"
    assert _first(tmp_path, ["TerminateOnNan: Output '{'loss_generators': nan, 'loss_d': 0.06}' contains NaN or Inf. "
                             "Stop training"]) == "loss.nan"
    # xformers built for another torch: a warning in a run that goes on, the cause in one that dies
    warning = ["WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:",
               "    PyTorch 2.6.0+cu124 with CUDA 1204 (you have 2.6.0+cpu)"]
    assert _first(tmp_path, [*warning, "{'loss': 1.2, 'epoch': 1.0}"]) is None
    assert _first(tmp_path, [*warning, "Traceback (most recent call last):", "RuntimeError: boom"]) == "version.skew"
    # git's 'fatal:' from a script recording its commit outside a repository is no failure; a glog FATAL still is one
    assert _first(tmp_path, ["fatal: not a git repository (or any parent up to mount point /home/user)",
                             "Stopping at filesystem boundary (GIT_DISCOVERY_ACROSS_FILESYSTEM not set).",
                             "2022-01-06 23:08:41,239 - mmgen - INFO - FID: Adopt Inception in pytorch style"]) is None
    # host memory in Ray's and torch.multiprocessing.spawn's words; fp16 scale collapse in icefall's
    assert _first(tmp_path, ["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."]) == "oom.host"
    assert _first(tmp_path, ["Exception: process 3 terminated with signal SIGKILL"]) == "oom.host"
    assert _first(tmp_path, ["RuntimeError: grad_scale is too small, exiting: 8.6e-05"]) == "loss.nan"
    # NCCL connecting to an address the peer advertised (older NCCL's words)
    assert _first(tmp_path, ["host:1:2 [0] include/socket.h:403 NCCL WARN Connect to fe80::c4eb:49ff:fe04:e32d%6<57335> "
                             "failed : Network is unreachable"]) == "net.interface"
    # the communicator's id never came through the store (torch's own spelling varied: 'retreiving')
    assert _first(tmp_path, ["RuntimeError: [1] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d "
                             "key-value store by key '0', but store->get('0') got error: Socket Timeout"]) == "rendezvous"
    # a model's remote code older than transformers' gradient-checkpointing call
    assert _first(tmp_path, ["TypeError: QWenPreTrainedModel._set_gradient_checkpointing() got an unexpected keyword "
                             "argument 'enable'"]) == "version.skew"
    # kohya's progress bar carries the running loss as 'avr_loss='
    assert _first(tmp_path, ["steps: 100%|████| 3300/3300 [2:41:46<00:00,  2.94s/it, avr_loss=0.11]",
                             "steps: 100%|████| 3300/3300 [2:41:46<00:00,  2.94s/it, avr_loss=nan]"]) == "loss.nan"


def test_round_thirteen_families_speak_and_their_neighbours_do_not(tmp_path):
    """Families from corpus_p.jsonl and corpus_q.jsonl (tuning side) and RCCL's IOMMU warning (corpus_d's and corpus_n's
    ROCm threads), each beside a line that must not trigger it."""
    # a sample that cannot be read, raised in a DataLoader worker; a data file a recipe names as missing
    assert _first(tmp_path, ["FileNotFoundError: Caught FileNotFoundError in DataLoader worker process 0."]) == "data.invalid"
    assert _first(tmp_path, ["KeyError: Caught KeyError in DataLoader worker process 3."]) == "data.invalid"
    assert _first(tmp_path, ["ValueError: File data/mllm_demo.json not found."]) == "data.invalid"
    assert _first(tmp_path, ["UnicodeDecodeError: 'utf-8' codec can't decode byte 0x92 in position 7047: invalid start byte"]) == "data.invalid"
    assert _first(tmp_path, ["ValueError: --caption_column' value 'text' needs to be one of: image"]) == "data.invalid"
    # a programming error's line with no traceback is the code's; a call written for another version is not said to be
    assert _first(tmp_path, ["NameError: name 'math' is not defined"]) == "code.error"
    assert _first(tmp_path, ["[rank0]: AssertionError: Sequence len must be multiple of mini batch size."]) == "code.error"
    assert _first(tmp_path, ["RuntimeError: The size of tensor a (11) must match the size of tensor b (10) at non-singleton dimension 0"]) == "code.error"
    assert _first(tmp_path, ["TypeError: __init__() got an unexpected keyword argument 'forward_prefetch'"]) == "unknown"
    assert _first(tmp_path, ["ValueError: Attempting to unscale FP16 gradients."]) == "unknown"
    # RCCL's IOMMU warning; a plain transport INFO line is nothing
    assert _first(tmp_path, ['host:402:402 [0] /src/rccl/hipify/src/init.cc:179 NCCL WARN Missing "iommu=pt" from kernel '
                             'command line which can lead to system instablity or hang!']) == "p2p.topology"
    assert _first(tmp_path, ["host:461:461 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.2<0>"]) is None
    # argparse refusing the command line
    assert _first(tmp_path, ["usage: run_clm_sft_with_peft.py [-h] [--seed SEED]",
                             "run_clm_sft_with_peft.py: error: argument --seed: expected one argument"]) == "code.error"
    # gpt-neox's overflow monitor ends the run; submitit's task timed out without a requeue
    assert _first(tmp_path, ["Exception: Skipped 50 iterations in a row due to Overflow - Exiting training."]) == "loss.nan"
    assert _first(tmp_path, ["submitit.core.utils.UncompletedJobError: Job not requeued because: timed-out and not "
                             "checkpointable."]) == "slurm.time_limit"
