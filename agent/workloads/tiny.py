"""A tiny Llama and a tiny dataset, built locally, for tests and ``make demo``.

Nothing is downloaded: the tokenizer is a byte-level one built with ``tokenizers`` (each byte one token,
plus ``<pad>``, ``<s>``, ``</s>``, with a small chat template), and the model is a 2-layer LlamaForCausalLM
with random weights from a fixed seed. Both are written with ``save_pretrained`` so the ordinary
``AutoTokenizer`` / ``AutoModelForCausalLM.from_pretrained(dir)`` path loads them.

    python -m ftwiz_workloads.tiny model DIR
    python -m ftwiz_workloads.tiny dataset FILE [--records 300] [--formats text,chat,instruction]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
FORMATS = ("text", "chat", "instruction")
# [job] settings under which the tiny model's loss falls visibly in 20 LoRA steps (about 5.9 -> 3.4) on CPU
TINY_JOB = {
    "method": "lora",
    "seq_len": 128,
    "micro_batch_size": 4,
    "grad_accum_steps": 1,
    "learning_rate": 0.02,
    "lora_r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "max_steps": 20,
    "save_steps": 10,
    "precision": "fp32",
    "optimizer": "adamw",
}


def build_tokenizer():
    """A byte-level PreTrainedTokenizerFast: 256 byte tokens + pad/bos/eos, bos added, chat template set."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({ch: len(SPECIAL_TOKENS) + i for i, ch in enumerate(alphabet)})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))  # no merges: every byte is one token
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", model_max_length=512
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_tiny_model(directory: str | os.PathLike, *, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> Path:
    """Write the tiny tokenizer and a random-weight Llama (seeded) to ``directory``.

    The default (hidden 64, 2 layers) has about 0.1 M parameters; the FSDP tests use hidden 256 and 4 layers
    (about 4.1 M), big enough that each rank's shard is visibly a fraction of the model.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size if hidden_size <= 64 else 4 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        # 0.02 (the default) caps the logits near +-1.3, so no adapter can lower the loss much; 0.1 lets a
        # LoRA on this random model learn the dataset's patterns in 20 steps
        initializer_range=0.1,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_tiny_dataset(path: str | os.PathLike, *, records: int = 300, formats: tuple[str, ...] = FORMATS, seed: int = 0) -> Path:
    """Write ``records`` JSONL lines with learnable structure (counting, repeating words) in ``formats``.

    The patterns are short and regular, so even a LoRA on a random 2-layer model lowers the loss
    visibly within 20 steps.
    """
    rng = random.Random(seed)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(records):
        kind = formats[i % len(formats)]
        start, length = rng.randint(0, 40), rng.randint(6, 12)
        numbers = " ".join(str(n) for n in range(start, start + length))
        word = rng.choice(["ab", "abc", "xyz", "hey", "ok"])
        record: dict[str, Any]
        if kind == "text":
            record = {"text": f"count: {numbers}. say {word} {word} {word} {word}."}
        elif kind == "chat":
            record = {"messages": [
                {"role": "user", "content": f"count from {start}"},
                {"role": "assistant", "content": numbers},
            ]}
        else:
            record = {"instruction": "repeat the word four times", "input": word, "output": " ".join([word] * 4)}
        lines.append(json.dumps(record))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: ``model DIR`` or ``dataset FILE``."""
    parser = argparse.ArgumentParser(prog="python -m ftwiz_workloads.tiny", description="Build the tiny test model or dataset.")
    sub = parser.add_subparsers(dest="what", required=True)
    model = sub.add_parser("model", help="write the tiny Llama + tokenizer to DIR")
    model.add_argument("dir")
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--hidden-size", type=int, default=64, help="hidden size (64: ~0.1 M parameters; 256 with 4 layers: ~4 M)")
    model.add_argument("--layers", type=int, default=2, help="decoder layers")
    data = sub.add_parser("dataset", help="write a tiny JSONL dataset to FILE")
    data.add_argument("file")
    data.add_argument("--records", type=int, default=300)
    data.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated subset of {','.join(FORMATS)}")
    data.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.what == "model":
        print(f"tiny model written to {make_tiny_model(args.dir, seed=args.seed, hidden_size=args.hidden_size, layers=args.layers)}")
    else:
        formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
        unknown = [f for f in formats if f not in FORMATS]
        if unknown or not formats:
            parser.error(f"--formats: unknown {', '.join(unknown) or '(empty)'}; choose from {', '.join(FORMATS)}")
        print(f"tiny dataset written to {make_tiny_dataset(args.file, records=args.records, formats=formats, seed=args.seed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
