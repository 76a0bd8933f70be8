"""A tiny GPT-2 (built from a config, nothing downloaded) trained by Hugging Face's Trainer on
CPU: what a user's script prints, unchanged. Under torchrun it runs DDP over gloo."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    torch.set_num_threads(1)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    steps = int(os.environ.get("JOB_STEPS", "20"))
    args = TrainingArguments(
        output_dir=os.environ.get("JOB_OUT", "hf_out"), max_steps=steps, logging_steps=2,
        eval_strategy="steps", eval_steps=10, per_device_train_batch_size=4,
        per_device_eval_batch_size=4, learning_rate=5e-3, report_to=[], save_strategy="no",
        use_cpu=True, ddp_backend="gloo" if "RANK" in os.environ else None,
        dataloader_num_workers=0, disable_tqdm=False, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(400),
                      eval_dataset=Tokens(16))
    trainer.train()


if __name__ == "__main__":
    main()
