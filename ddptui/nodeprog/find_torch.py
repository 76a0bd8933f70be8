"""The launch probe: finds torch and reads its version files without importing it.

``import torch`` costs 1-2 s of CPU per node (far more from a cold network filesystem), and
torchrun pays it again right after. What only an import can tell (is CUDA usable, how many
devices) is left unknown here and asked by ``ddptui check``'s own program
(:mod:`ddptui.nodeprog.preflight`); a torch that is found but cannot be imported fails at once
in torchrun, where the diagnosis quotes its error. It prints one JSON line.

It is what says which Python a node has and whether torch is there, so it runs on any
``python3`` (3.6 and newer): its annotations are quoted, not deferred.
"""

import importlib.util
import json
import os
import re
import socket
import sys


def field(text: str, name: str) -> "str | None":
    m = re.search(r"^" + re.escape(name) + r"\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


def probe() -> "dict[str, str | None]":
    out: dict[str, str | None] = {"python": sys.executable, "version": sys.version.split()[0],
                                  "hostname": socket.gethostname()}
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.origin:
            raise ModuleNotFoundError("No module named 'torch'")
        here = os.path.dirname(spec.origin)
        out["torch_path"] = here
        text = ""
        for name in ("version.py", os.path.basename(spec.origin)):
            try:
                with open(os.path.join(here, name)) as f:
                    text = f.read()
            except OSError:
                continue
            if field(text, "__version__"):
                break
        version = field(text, "__version__")
        if version is None:
            raise ImportError(f"the torch at {here} names no __version__")
        out["torch"] = version
        out["cuda_version"] = field(text, "cuda")
        import importlib.metadata as md
        for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
            try:
                out["nccl"] = md.version(dist)
                break
            except Exception:
                pass
    except Exception as e:
        out["torch_error"] = f"{type(e).__name__}: {e}"
    return out


if __name__ == "__main__":
    print(json.dumps(probe()))
