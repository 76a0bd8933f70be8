"""Which environment values are secret, and how they are kept out of what ddptui writes.

A hosts file often carries credentials in ``env:`` (``HF_TOKEN``, ``WANDB_API_KEY``). ddptui
needs their values only on the nodes, inside ``launch.sh`` (a file readable by its owner
alone); everywhere else they are withheld: ``run.json`` holds ``***`` in their place, and a
secret value that a rank or torchrun prints is masked before a line reaches the local logs,
the dashboard or the headless output.

A name is secret when the hosts file's ``secret_env:`` lists it, or when it looks like one:
a part of the name (split at ``_``) holds TOKEN, SECRET, PASSWORD, PASSWD or PASSPHRASE, or
is KEY or ends in KEY (``API_KEY``, ``APIKEY``, ``AWS_SECRET_ACCESS_KEY``). What looks like
one but is not:

* names that say a value is a path or a size, not the secret itself: a last part of FILE,
  PATH or DIR (``SSL_KEY_FILE``, ``HF_TOKEN_PATH``), and KEY followed by NAME, TYPE, SIZE,
  BITS, LEN, LENGTH, FORMAT, PREFIX or ALGORITHM (``CACHE_KEY_PREFIX``);
* counts and tokenizer settings: ``TOKENS`` as a whole part (``MAX_TOKENS``) and anything
  TOKENIZ... (``TOKENIZERS_PARALLELISM``);
* well-known settings in :data:`NOT_SECRET` (``NCCL_IB_PKEY``, ``CUDA_VISIBLE_DEVICES``).

``secret_env:`` wins over all of these. Pure: no I/O, so every rule is tested alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ddptui.events import JSON

if TYPE_CHECKING:
    from ddptui.config.model import HostsConfig

#: What a withheld value is written as, in ``run.json`` and in ddptui's own lines.
REDACTED: Final = "***"
#: A value shorter than this is not searched for in log lines: masking every "1" or "abc" a
#: rank prints would wreck the log and hide nothing. It is still withheld from ``run.json``
#: and from every command line.
MIN_MASKED_LEN: Final = 4

#: Names that match a pattern below but hold no secret (NCCL/UCX InfiniBand partition keys
#: are fabric settings; the rest are well-known switches).
NOT_SECRET: Final = frozenset({
    "CUDA_VISIBLE_DEVICES",
    "NCCL_IB_PKEY",
    "UCX_IB_PKEY",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN",
})

_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE")
_PATH_PARTS = frozenset({"FILE", "PATH", "DIR"})
#: After KEY, these say the value describes a key (its size, its type) rather than being one.
_KEY_SHAPE_PARTS = frozenset({"NAME", "TYPE", "SIZE", "BITS", "LEN", "LENGTH", "FORMAT",
                              "PREFIX", "ALGORITHM"})


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (see the module)."""
    upper = name.upper()
    if upper in NOT_SECRET:
        return False
    parts = [p for p in upper.split("_") if p]
    if not parts or parts[-1] in _PATH_PARTS:
        return False
    for i, part in enumerate(parts):
        if _secret_word(part):
            return True
        if part in ("KEY", "KEYS") or part.endswith("KEY"):
            after = parts[i + 1] if i + 1 < len(parts) else None
            if after not in _KEY_SHAPE_PARTS:
                return True
    return False


def _secret_word(part: str) -> bool:
    if part == "TOKENS" or "TOKENIZ" in part:
        return any(w in part for w in _SECRET_WORDS if w != "TOKEN")
    return any(w in part for w in _SECRET_WORDS)


def is_secret(name: str, listed: Iterable[str] = ()) -> bool:
    """Secret by ``secret_env:`` (exact name) or by its look."""
    return name in set(listed) or looks_secret(name)


def secret_names(env: Mapping[str, str], listed: Iterable[str] = ()) -> list[str]:
    """The secret names of one environment, sorted."""
    listed = set(listed)
    return sorted(k for k in env if is_secret(k, listed))


def redact_env(env: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    """``env`` with every secret value replaced by :data:`REDACTED`."""
    listed = set(listed)
    return {k: (REDACTED if is_secret(k, listed) else v) for k, v in env.items()}


def secret_values(envs: Iterable[Mapping[str, str]], listed: Iterable[str] = ()) -> set[str]:
    """Every secret value of these environments (one per node), for :class:`Masker`."""
    listed = set(listed)
    return {v for env in envs for k, v in env.items() if is_secret(k, listed) and v}


def redact_config_dict(d: Mapping[str, JSON]) -> dict[str, JSON]:
    """A ``HostsConfig.to_dict()`` with secret env values withheld, for ``run.json``.

    ``withheld_env`` names what was withheld, so a config read back from ``run.json`` is
    known to be incomplete (see :func:`missing_secrets`) and is never launched as it is.
    """
    out = dict(d)
    listed = set(_names(d.get("secret_env")))
    withheld = set(_names(d.get("withheld_env")))
    nodes: list[JSON] = []
    for n in as_list(d.get("nodes")):
        node = as_mapping(n)
        env = {k: str(v) for k, v in as_mapping(node.get("env")).items()}
        withheld.update(secret_names(env, listed))
        redacted: dict[str, JSON] = {**redact_env(env, listed)}
        node["env"] = redacted
        nodes.append(node)
    out["nodes"] = nodes
    out["withheld_env"] = [*sorted(withheld)]
    return out


def as_list(value: JSON) -> list[JSON]:
    """A list a ``to_dict()`` holds (absent: empty); anything else is not its record."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"expected a list in the config's record, not {type(value).__name__}")
    return value


def as_mapping(value: JSON) -> dict[str, JSON]:
    """A copy of a mapping a ``to_dict()`` holds (absent: empty), as :func:`as_list`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"expected a mapping in the config's record, not {type(value).__name__}")
    return dict(value)


def _names(value: JSON) -> list[str]:
    return [str(name) for name in as_list(value)]


def missing_secrets(envs: Mapping[str, Mapping[str, str]], withheld: Iterable[str]
                    ) -> dict[str, list[str]]:
    """Node name -> the withheld names whose value is still :data:`REDACTED` there."""
    withheld = set(withheld)
    out: dict[str, list[str]] = {}
    for node, env in envs.items():
        names = sorted(k for k, v in env.items() if k in withheld and v == REDACTED)
        if names:
            out[node] = names
    return out


@dataclass(frozen=True)
class Masker:
    """Hides secret values in text: ``***`` in ddptui's own words, and a run of ``*`` as
    long as the value in a node's bytes, so that the local copy of ``node.log`` keeps the
    byte offsets ``ddptui attach`` resumes from."""

    values: tuple[str, ...] = ()
    """Longest first, so that a secret holding another is masked whole."""
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, values: Iterable[str]) -> Masker:
        keep = {v for v in values if len(v) >= MIN_MASKED_LEN}
        # node logs are read and masked a line at a time: each line of a value over several
        # lines is masked on its own as well
        keep |= {part for v in list(keep) for part in v.splitlines()
                 if len(part) >= MIN_MASKED_LEN}
        ordered = tuple(sorted(keep, key=lambda v: (-len(v), v)))
        pattern = re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None
        return cls(ordered, pattern)

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str) -> str:
        if self.pattern is None or not text:
            return text
        return self.pattern.sub(REDACTED, text)

    def data(self, data: bytes) -> bytes:
        """Same length in, same length out (see the class)."""
        for value in self.values:
            raw = value.encode("utf-8", "surrogateescape")
            if raw in data:
                data = data.replace(raw, b"*" * len(raw))
        return data


def config_masker(config: HostsConfig) -> Masker:
    """What to mask in the lines of a run of ``config`` (nothing for a withheld value)."""
    values = secret_values((n.env for n in config.nodes), config.secret_env)
    return Masker.of(v for v in values if v != REDACTED)


def config_secret_names(config: HostsConfig) -> list[str]:
    """Every secret env name of the config, for ``ddptui check`` to say what it withholds."""
    return sorted({k for n in config.nodes for k in secret_names(n.env, config.secret_env)})
