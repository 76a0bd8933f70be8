"""Record what Lightning prints: a tiny regression, train_loss and val_loss on the bar."""
import sys

import lightning as L
import torch
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def data(n):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


if __name__ == "__main__":
    mode = sys.argv[1]
    bar = {"tqdm": [TQDMProgressBar()], "rich": [RichProgressBar()], "default": []}[sys.argv[2]]
    kw = dict(max_epochs=2, logger=True, callbacks=bar, enable_checkpointing=False,
              default_root_dir="/tmp/lt", log_every_n_steps=5)
    if mode == "gpu":
        t = L.Trainer(accelerator="gpu", devices=1, **kw)
    elif mode == "cpu1":
        t = L.Trainer(accelerator="cpu", devices=1, **kw)
    else:
        t = L.Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy="ddp", **kw)
    t.fit(Tiny(), data(120), data(20))
