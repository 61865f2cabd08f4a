"""Fine-tune a causal LM with the HF Trainer: what a user's `train.py` typically is."""

import argparse
import json
import os

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)


class TextDataset(torch.utils.data.Dataset):
    def __init__(self, path, tokenizer, seq_len):
        texts = [json.loads(line)["text"] for line in open(path) if '"text"' in line]
        self.items = [tokenizer(t, truncation=True, max_length=seq_len) for t in texts]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--output-dir", default="out")
    parser.add_argument("--max-steps", type=int, default=8)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model)
    training = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, learning_rate=5e-4,
        # this rank's share when ftwiz balances ([job] balance = "auto"); set on every rank once the batch is declared
        per_device_train_batch_size=int(os.environ.get("FTWIZ_MICRO_BATCH", "2")),
        gradient_accumulation_steps=int(os.environ.get("FTWIZ_GRAD_ACCUM", "1")),
        logging_steps=1, save_steps=args.max_steps, report_to=[], use_cpu=not torch.cuda.is_available(), seed=0,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=training, train_dataset=TextDataset(args.data, tokenizer, 64),
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    trainer.train()
    trainer.save_model(args.output_dir + "/final")


if __name__ == "__main__":
    main()
