"""What the job's environment changes about torch on a node, and which name changes it.

Preflight asks each node in the environment its ranks will have (the node's ``env:``, the
project first on ``PYTHONPATH``), and beside it what a bare login finds. When the two differ
and the ranks' torch fails a check, the difference is the news: a ``PYTHONPATH`` or ``PATH``
in ``env:`` that points at a site's own build passes a check made at a bare login and breaks
the run. Which name does it is found by asking again without each suspect, one at a time
(:mod:`ddptui.launch.rank_env` runs that; this module only compares): the names whose
removal alone gives back the bare login's torch are the cause. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ddptui.diagnose.preflight.report import NodeReport, TorchInfo

#: The suspect that stands for the project put first on ``PYTHONPATH`` (a project with a
#: ``torch/`` of its own shadows the installed one), beside the ``env:`` names.
PROJECT = "job.project"


def seen(t: TorchInfo | None) -> tuple[str | None, str | None, str | None] | None:
    """What two probes must share to import the same torch: version, where it is found, and
    why not. The launch probe reads version files and the full check imports, so only what
    both tell alike is compared."""
    if t is None:
        return None
    if t.error is not None or not t.version:
        return (None, None, "no torch")
    return (t.version, t.path, None)


def env_changes_torch(r: NodeReport) -> bool:
    """The ranks import another torch than a bare login there (or one of them has none)."""
    a, b = seen(r.torch), seen(r.bare_torch)
    return a is not None and b is not None and a != b


def suspects(env: Mapping[str, str], own: Iterable[str], project: str | None) -> list[str]:
    """Every name that may change an import: the hosts file's ``env:`` (not ddptui's own
    settings, which name no path), and the project when it goes on ``PYTHONPATH``."""
    names = sorted(set(env) - set(own))
    return names + ([PROJECT] if project is not None else [])


def causes(bare: TorchInfo | None, without: Mapping[str, TorchInfo | None]) -> tuple[str, ...]:
    """The suspects whose removal alone gives the bare login's torch back, in their order;
    none when only several together make the difference."""
    want = seen(bare)
    if want is None:
        return ()
    return tuple(name for name, t in without.items() if seen(t) == want)


def _what(t: TorchInfo) -> str:
    if t.error is not None or not t.version:
        return "no torch" + (f" ({t.error})" if t.error else "")
    return f"torch {t.version}" + (f" from {t.path}" if t.path else "")


def explain(node: str, r: NodeReport) -> str | None:
    """The sentence a torch failure on ``node`` gains when its ranks' environment makes the
    difference; None when it does not. Names, never values: an ``env:`` value may be a
    secret, and the torch directory says where the import went."""
    if not env_changes_torch(r):
        return None
    assert r.torch is not None and r.bare_torch is not None
    if r.torch_causes:
        by = " and ".join(r.torch_causes)
        where = ("the project put first on PYTHONPATH" if r.torch_causes == (PROJECT,) else
                 f"{by} in its `env:`")
        fix = (f"Remove or correct {by} in the hosts file's `env:` for node {node} (or in "
               "`defaults:`)" if PROJECT not in r.torch_causes else
               "Rename the project's own `torch` module, or exclude it from the sync")
    else:
        where, fix = "its `env:`", (f"Check the `env:` of node {node} (PATH, PYTHONPATH, "
                                    "LD_LIBRARY_PATH)")
    return (f"Its ranks' environment makes the difference: with {where} they get "
            f"{_what(r.torch)}, while a bare login on node {node} gets {_what(r.bare_torch)}. "
            f"{fix}.")
