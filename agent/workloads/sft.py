"""The sft recipe: full, LoRA or QLoRA fine-tuning under torchrun: the HF Trainer (DDP), or FSDP2 (``fsdp_train``).

Order matters for failing well: :func:`preflight` checks everything a user can get wrong (method vs.
hardware, dataset records, model path, output dir) before the process group starts, so a bad input ends
every rank at once with one clear message instead of leaving peers waiting in a rendezvous.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .checkpoint import checkpoint_steps
from .data import PaddingCollator, TokenDataset, read_records, tokenize_records
from .dist import Ranks, peak_memory
from .errors import WorkloadError, note
from .protocol import emit
from .spec import Spec

OPTIMIZERS = {"adamw": "adamw_torch", "adamw_8bit": "adamw_bnb_8bit", "paged_adamw_8bit": "paged_adamw_8bit"}
HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
QLORA_ON_CPU = 'QLoRA needs a CUDA GPU (bitsandbytes 4-bit): use method = "lora" on CPU'


@dataclass
class Plan:
    """What preflight decided: inputs resolved, precision and optimizer after hardware fallbacks."""

    model: str
    model_is_local: bool
    dataset: Path
    records: list
    output_dir: Path
    cuda: bool
    bf16: bool
    fp16: bool
    optim: str
    notes: list[str]


def preflight(spec: Spec) -> Plan:
    """Check the inputs against this machine; raise WorkloadError with the fix. Loads no model."""
    import torch

    cuda = torch.cuda.is_available()
    notes: list[str] = []
    if spec.job.get("sharding_reason"):
        notes.append(f'sharding = "auto" -> {spec["sharding"]}: {spec.job["sharding_reason"]}')
    if spec["method"] == "qlora" and not cuda:
        raise WorkloadError(QLORA_ON_CPU)
    model, is_local = resolve_model(spec)
    dataset = spec.input_path(spec["dataset"])
    records = read_records(dataset)
    output_dir = spec.output_path(spec["output_dir"])
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkloadError(f"cannot create output_dir {output_dir}: {exc.strerror}; point [job] output_dir at a writable place") from None
    bf16, fp16 = _precision(spec["precision"], cuda, notes)
    optim = OPTIMIZERS[spec["optimizer"]]
    if not cuda and optim != "adamw_torch":
        notes.append(f'optimizer = "{spec["optimizer"]}" needs a CUDA GPU (bitsandbytes 8-bit): using adamw_torch on CPU')
        optim = "adamw_torch"
    for name in unused_libraries(spec["method"], optim):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    return Plan(model, is_local, dataset, records, output_dir, cuda, bf16, fp16, optim, notes)


def unused_libraries(method: str, optim: str) -> tuple[str, ...]:
    """The installed libraries this rank never uses, which :func:`preflight` keeps out of it.

    transformers and peft import them whenever they are installed; a ``None`` in ``sys.modules`` makes their
    availability checks (``importlib.util.find_spec``) answer "not installed". ``datasets`` (and pandas under it):
    the built-in recipe reads its own JSONL into a torch dataset, 1.6 of the 9.5 s of CPU a LoRA rank spent
    starting; bitsandbytes: needed only for QLoRA's 4-bit weights or an 8-bit optimizer, 2.5 s more (both measured
    on this project's 2-core machine). A user's own code is never run here, so it keeps every library it imports.
    """
    unused = ["datasets"]
    if method != "qlora" and optim == "adamw_torch":
        unused.append("bitsandbytes")
    return tuple(unused)


def resolve_model(spec: Spec) -> tuple[str, bool]:
    """``(model, is_local)``: a local save_pretrained directory, or a Hugging Face model id."""
    raw = spec["model"]
    local = spec.input_path(raw)
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise WorkloadError(f"model directory {local} has no config.json: point [job] model at a directory written by save_pretrained")
        return str(local), True
    if local.exists():
        raise WorkloadError(f"model {local} is a file: [job] model must be a model directory or a Hugging Face id")
    if raw.startswith(("/", ".", "~")) or not HF_ID.fullmatch(raw):
        raise WorkloadError(f"model directory {local} not found: check [job] model (the directory must exist on every node)")
    return raw, False


def _precision(wanted: str, cuda: bool, notes: list[str]) -> tuple[bool, bool]:
    import torch

    if not cuda:
        if wanted != "fp32":
            notes.append(f'no CUDA GPU: training in fp32 (precision = "{wanted}" applies on GPUs)')
        return False, False
    if wanted == "bf16" and not torch.cuda.is_bf16_supported():
        notes.append('this GPU has no bf16: training in fp16 mixed precision instead of precision = "bf16"')
        return False, True
    return wanted == "bf16", wanted == "fp16"


def run(spec: Spec, ranks: Ranks, plan: Plan) -> int:
    """Train with the HF Trainer (DDP); return the exit code. The process group is already up.

    ``sharding = "fsdp"`` and ``balance = "auto"`` runs go to :func:`.fsdp_train.run` instead (see ``__main__``).
    """
    quiet_libraries()
    import torch
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from . import synctime
    from .callbacks import ProtocolCallback
    from .node_weights import NodeLocalWeights

    for message in plan.notes:
        if ranks.is_main:
            note(message, rank=ranks.rank)
    tokenizer = _load_tokenizer(plan)
    examples = tokenize_records(plan.records, tokenizer, int(spec["seq_len"]))
    model = _load_model(spec, plan, ranks)
    compute = torch.bfloat16 if plan.bf16 else torch.float16 if plan.fp16 else torch.float32
    if ranks.is_main:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        print(f"ftwiz: {spec['method']} on {plan.model}: {trainable:,} of {total:,} parameters trainable, "
              f"{len(examples)} examples, compute {str(compute).replace('torch.', '')}, optimizer {plan.optim}", flush=True)
    resume_from = _resume_checkpoint(spec, plan.output_dir, ranks)
    args = _training_arguments(spec, plan)
    callback = ProtocolCallback(ranks, plan.output_dir)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=TokenDataset(examples),
        data_collator=PaddingCollator(tokenizer.pad_token_id),
        callbacks=[callback, NodeLocalWeights()],
    )
    # times DDP's gradient all-reduce per step: sync_s in the progress lines, compute_s/sync_s in each rank's heartbeat
    callback.sync = synctime.attach(trainer)
    trainer.remove_callback(PrinterCallback)  # our ProtocolCallback replaces HF's prints and tqdm
    trainer.remove_callback(ProgressCallback)
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    final = _save_final(trainer, tokenizer, plan.output_dir, spec.run_id)
    done: dict[str, Any] = {"status": "ok", **peak_memory("nccl" if plan.cuda else "gloo")}
    if ranks.is_main:
        done.update(adapter_path=str(final), step=trainer.state.global_step)
    emit("done", rank=ranks.rank, **done)
    if ranks.is_main:
        what = "adapter" if spec["method"] != "full" else "model"
        print(f"ftwiz: trained to step {trainer.state.global_step}; {what} written to {final}", flush=True)
    return 0


def quiet_libraries() -> None:
    """Silence the library chatter a user cannot act on (bitsandbytes' CPU warning, HF progress bars, v6 deprecations)."""
    import transformers

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=r".*deprecated and will be removed in v6.*", category=FutureWarning)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _training_arguments(spec: Spec, plan: Plan):
    """HF TrainingArguments from the job: DDP, our callback instead of HF's printing, no trackers."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(plan.output_dir),
        per_device_train_batch_size=int(spec["micro_batch_size"]),
        gradient_accumulation_steps=int(spec["grad_accum_steps"]),
        num_train_epochs=float(spec["epochs"]),
        max_steps=int(spec["max_steps"]),
        learning_rate=float(spec["learning_rate"]),
        logging_steps=int(spec["logging_steps"]),
        save_strategy="steps",
        save_steps=int(spec["save_steps"]),
        save_on_each_node=spec.save_on_each_node,
        save_total_limit=spec.save_total_limit,
        bf16=plan.bf16,
        fp16=plan.fp16,
        optim=plan.optim,
        **_checkpointing_args(TrainingArguments, bool(spec["gradient_checkpointing"])),
        ddp_find_unused_parameters=False,
        ddp_timeout=int(spec.dist_timeout_s),
        report_to="none",
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        include_num_input_tokens_seen="non_padding",
        use_cpu=not plan.cuda,
        seed=spec.seed,
        log_level="error",
        log_level_replica="error",
    )


def _checkpointing_args(arguments_class, enabled: bool) -> dict[str, Any]:
    """Gradient checkpointing under the name this transformers uses (5.x: activation_checkpointing)."""
    names = {f.name for f in dataclasses.fields(arguments_class)}
    prefix = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    # reentrant checkpointing breaks DDP when the base is frozen (LoRA): "marked ready twice"
    return {prefix: enabled, f"{prefix}_kwargs": {"use_reentrant": False}}


def _load_tokenizer(plan: Plan):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(plan.model)
    except (OSError, ValueError) as exc:
        raise WorkloadError(_load_failure("tokenizer", plan, exc)) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # padding is masked out of the loss, so any id will do
    return tokenizer


def _load_model(spec: Spec, plan: Plan, ranks: Ranks):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    method = spec["method"]
    kwargs: dict[str, Any] = {}
    if method == "qlora":
        from transformers import BitsAndBytesConfig

        compute = torch.float16 if plan.fp16 else torch.bfloat16
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=compute,
            # FSDP shards the packed 4-bit weights as tensors of the compute dtype (the answer.ai/HF FSDP+QLoRA recipe)
            **({"bnb_4bit_quant_storage": compute} if spec["sharding"] == "fsdp" else {}),
        )
        kwargs["dtype"] = compute
        kwargs["device_map"] = {"": ranks.local_rank}
    elif method == "lora" and (plan.bf16 or plan.fp16):
        kwargs["dtype"] = torch.bfloat16 if plan.bf16 else torch.float16  # frozen base in half precision; adapters stay fp32
    else:
        kwargs["dtype"] = torch.float32  # full fine-tune: fp32 master weights, autocast does the rest
    if _version(transformers.__version__) < (4, 56):
        kwargs["torch_dtype"] = kwargs.pop("dtype")  # renamed to dtype in transformers 4.56
    try:
        model = AutoModelForCausalLM.from_pretrained(plan.model, **kwargs)
    except (OSError, ValueError) as exc:
        raise WorkloadError(_load_failure("model", plan, exc)) from None
    model.config.use_cache = False  # the KV cache is useless in training and clashes with checkpointing
    if method == "full":
        return model
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if method == "qlora":
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=bool(spec["gradient_checkpointing"]),
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    config = LoraConfig(
        r=int(spec["lora_r"]),
        # peft annotates lora_alpha as int but only divides by it (scaling = alpha / r): a fractional alpha is kept.
        lora_alpha=float(spec["lora_alpha"]),  # type: ignore[arg-type]
        lora_dropout=float(spec["lora_dropout"]),
        target_modules=list(spec["target_modules"]), bias="none", task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        names = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)})
        raise WorkloadError(f"target_modules {spec['target_modules']} do not match this model ({exc}); "
                            f"its linear layers are: {', '.join(names)}") from None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def _load_failure(what: str, plan: Plan, exc: Exception) -> str:
    reason = (str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__).rstrip(".")
    if plan.model_is_local:
        return f"cannot load the {what} from {plan.model}: {reason}"
    return (f"cannot load the {what} {plan.model!r}: it is not a local directory and the Hugging Face Hub gave: {reason}. "
            "Download it on the node (huggingface-cli download) and set [job] model to that directory, or log in for gated models")


def _resume_checkpoint(spec: Spec, output_dir: Path, ranks: Ranks) -> Optional[Path]:
    """The checkpoint to continue from: every rank must see it, or training starts at step 0 with a note."""
    import torch.distributed as dist

    mine = checkpoint_steps(output_dir)
    if spec.resume is None:
        if mine and ranks.is_main:
            note(f"{output_dir} already holds checkpoint-{mine[-1]}; starting at step 0 (relaunch with resume to continue)", rank=ranks.rank)
        return None
    if spec.resume != "auto":
        path = Path(os.path.expanduser(spec.resume))
        path = path if path.is_absolute() else output_dir / path
        if not (path / "trainer_state.json").is_file():
            raise WorkloadError(f"resume checkpoint {path} not found or incomplete (no trainer_state.json)")
        return path
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)  # nodes without a shared disk may hold different checkpoints
    common = set(everyone[0]).intersection(*everyone[1:]) if everyone else set()
    if common:
        step = max(common)
        if ranks.is_main:
            note(f"resuming from {output_dir / f'checkpoint-{step}'} (step {step})", rank=ranks.rank)
        return output_dir / f"checkpoint-{step}"
    if ranks.is_main:
        seen = sorted({s for steps in everyone for s in steps})
        why = f"checkpoints {seen} are not on every node" if seen else f"no checkpoint in {output_dir}"
        note(f"resume = auto: {why}; starting at step 0", rank=ranks.rank)
    return None


def _save_final(trainer, tokenizer, output_dir: Path, run_id: str) -> Path:
    """Write the adapter (or full model) and tokenizer to ``output_dir/final``, swapped in whole."""
    import torch.distributed as dist

    final = output_dir / "final"
    partial = output_dir / f".final.partial-{run_id or os.getpid()}"
    if trainer.args.should_save:
        shutil.rmtree(partial, ignore_errors=True)
    trainer.save_model(str(partial))  # gathers/unwraps as needed; writes only on should_save ranks
    if trainer.args.should_save:
        from .node_weights import has_weights, write_weights

        if not has_weights(partial):  # transformers wrote the full model on global rank 0 only
            write_weights(trainer.model, partial)
        tokenizer.save_pretrained(str(partial))
        previous = output_dir / f".final.previous-{run_id or os.getpid()}"
        if final.exists():
            os.replace(final, previous)
        os.replace(partial, final)
        shutil.rmtree(previous, ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()
    return final
