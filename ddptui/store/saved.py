"""The hosts file each run keeps of itself, beside ``run.json``, for ``ddptui run ID --again``.

Written once, when the run is created, from the resolved config (user-wide defaults, ad-hoc
flags and ``-- ARGS`` already applied), with secret env values withheld as in ``run.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from ddptui.config.adhoc import SAVED_HOSTS, saved_document
from ddptui.config.model import HostsConfig

_HEADER = ("# The resolved hosts file of this run, written by ddptui; `ddptui run RUN_ID "
           "--again` repeats it.\n# Secret env values are withheld (***): --again takes them "
           "from the environment.\n")


def write_saved_hosts(run_dir: Path, config: HostsConfig) -> Path:
    """Through a rename, readable by its owner only (it may name hosts and paths)."""
    path = run_dir / SAVED_HOSTS
    tmp = path.with_name(path.name + ".tmp")
    text = yaml.safe_dump(saved_document(config), sort_keys=False, allow_unicode=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_HEADER + text)
    os.replace(tmp, path)
    return path

