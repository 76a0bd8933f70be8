"""Record what transformers' Trainer prints: a tiny GPT-2 from a config, no download."""
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Rand(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


if __name__ == "__main__":
    cpu = sys.argv[1] == "cpu"
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1,
                                       n_head=2))
    args = TrainingArguments(output_dir="/tmp/hf", max_steps=30, logging_steps=5,
                             per_device_train_batch_size=4, eval_strategy="steps",
                             eval_steps=15, report_to=[], save_strategy="no",
                             use_cpu=cpu, disable_tqdm=False)
    Trainer(model=model, args=args, train_dataset=Rand(200), eval_dataset=Rand(16)).train()
