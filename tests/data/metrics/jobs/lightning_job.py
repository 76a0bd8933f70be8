"""A Linear model trained by PyTorch Lightning on CPU, its loss on the progress bar: what a
user's script prints, unchanged. Under torchrun it runs DDP over gloo."""

import os
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: tuple, _: int) -> torch.Tensor:
        # A real step takes longer than rich's refresh (100 a second); this one, far less.
        time.sleep(float(os.environ.get("JOB_STEP_S", "0")))
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    data = DataLoader(TensorDataset(x, y), batch_size=int(os.environ.get("JOB_BATCH", "16")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # Lightning picks its rich bar when rich is installed; the tqdm bar unless JOB_BAR=rich.
    bar = L.pytorch.callbacks.RichProgressBar() if os.environ.get("JOB_BAR") == "rich" \
        else L.pytorch.callbacks.TQDMProgressBar()
    trainer = L.Trainer(
        callbacks=[bar], accelerator="cpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        num_nodes=world // int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        strategy="ddp" if world > 1 else "auto", max_epochs=int(os.environ.get("JOB_EPOCHS", "2")),
        logger=L.pytorch.loggers.CSVLogger(os.environ.get("JOB_OUT", "pl_out")),
        enable_checkpointing=False, enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(Model(), data)


if __name__ == "__main__":
    main()
