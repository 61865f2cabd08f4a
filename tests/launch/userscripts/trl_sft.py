"""Supervised fine-tuning with TRL's SFTTrainer, as in TRL's own examples (a local model and JSONL)."""

import argparse

import torch
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--output-dir", default="out")
    parser.add_argument("--max-steps", type=int, default=8)
    args = parser.parse_args()
    dataset = load_dataset("json", data_files=args.data, split="train")
    dataset = dataset.filter(lambda r: r.get("text") is not None).select_columns(["text"])
    config = SFTConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=2, learning_rate=5e-4,
        logging_steps=1, save_steps=args.max_steps, report_to=[], use_cpu=not torch.cuda.is_available(), seed=0,
        max_length=64, dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=args.model, args=config, train_dataset=dataset)
    trainer.train()
    trainer.save_model(args.output_dir + "/final")


if __name__ == "__main__":
    main()
