"""Model weights in every node's checkpoint, for DDP resumes on nodes that share no filesystem.

With ``save_on_each_node`` the HF Trainer writes each checkpoint on every node's local rank 0, but
transformers 5.x's ``PreTrainedModel.save_pretrained`` writes only on global rank 0
(``transformers/distributed/mixin.py``, ``should_save_on_this_rank``), so a full fine-tune's
``checkpoint-N`` on the other nodes holds the trainer state without the weights, and a resume there
stops with "Can't find a valid checkpoint". (PEFT's adapter save does not go through that check.)
This callback writes the weights itself wherever a node's checkpoint lacks them; under DDP every rank
holds the same weights, so any node's copy is the checkpoint's.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
                "adapter_model.safetensors", "adapter_model.bin")


def has_weights(directory: Path) -> bool:
    """Whether ``directory`` holds any weight file the Trainer's resume accepts."""
    return any((directory / name).is_file() for name in WEIGHT_FILES)


def write_weights(model, directory: Path) -> None:
    """Write ``model``'s weights (and config) to ``directory`` as one safetensors file, shared tensors once."""
    from safetensors.torch import save_model

    directory.mkdir(parents=True, exist_ok=True)
    config = getattr(model, "config", None)
    if config is not None and not (directory / "config.json").is_file():
        config.to_json_file(str(directory / "config.json"))
    tmp = directory / "model.safetensors.tmp"
    save_model(model, str(tmp), metadata={"format": "pt"})
    tmp.replace(directory / "model.safetensors")


class NodeLocalWeights(TrainerCallback):
    """After each checkpoint, fill in the weights on nodes where transformers skipped them."""

    def on_save(self, args, state, control, model=None, **kwargs):
        if not args.should_save or state.is_world_process_zero or model is None:
            return
        directory = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if directory.is_dir() and not has_weights(directory):
            write_weights(model, directory)
