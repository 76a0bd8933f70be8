"""Slurm hostlist syntax: exhaustive pure cases, then random lists against the real scontrol.

The scontrol comparison needs no running cluster, only the client and a slurm.conf naming
any controller (:func:`slurmcluster.offline_conf`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slurmcluster import tool
from slurmconf import offline_conf

from ddptui.slurm.hostlist import MAX_RANGE, compress, expand


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", []),
        (",", []),
        ("node5", ["node5"]),
        ("node05", ["node05"]),
        ("007", ["007"]),
        ("a,,b", ["a", "b"]),
        ("a b\tc\nd", ["a", "b", "c", "d"]),
        ("a, b", ["a", "b"]),
        ("b,a,b", ["b", "a", "b"]),
        ("a[1-3]", ["a1", "a2", "a3"]),
        ("a[01-04,07]", ["a01", "a02", "a03", "a04", "a07"]),
        ("a[9-11]", ["a9", "a10", "a11"]),
        ("a[08-10]", ["a08", "a09", "a10"]),
        ("a[8-010]", ["a8", "a9", "a10"]),  # the width is lo's as written
        ("a[000-1]", ["a000", "a001"]),
        ("a[5-5]", ["a5"]),
        ("a[0]", ["a0"]),
        ("a[1,1]", ["a1", "a1"]),
        ("a[1-3,2]", ["a1", "a2", "a3", "a2"]),
        ("[1-2]", ["1", "2"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("r[1,2]-n[1,3],x", ["r1-n1", "r1-n3", "r2-n1", "r2-n3", "x"]),
        ("a[1-2][3-4]", ["a13", "a14", "a23", "a24"]),
        ("a[1-2]b[3]", ["a1b3", "a2b3"]),
        ("x,r[1-2]-n[01-02]", ["x", "r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
        # A superset of Slurm 22.05, which calls text after the last bracket invalid.
        ("gpu[01-04,07],cpu-a[1-2]b,node5",
         ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu-a1b", "cpu-a2b", "node5"]),
    ],
)
def test_expand(text: str, names: list[str]) -> None:
    assert expand(text) == names


def test_expand_largest_range() -> None:
    names = expand(f"a[0-{MAX_RANGE - 1}]")
    assert len(names) == MAX_RANGE and names[-1] == f"a{MAX_RANGE - 1}"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a[3-1]", "goes down"),
        ("a[]", "not a number"),
        ("a[1-2,]", "not a number"),
        ("a[,1]", "not a number"),
        ("a[x]", "not a number"),
        ("a[1-x]", "not a number"),
        ("a[-1]", "not a number"),
        ("a[+1]", "not a number"),
        ("a[1--2]", "not a number"),
        ("a[1-2-3]", "not a number"),
        ("a[1 -2]", "whitespace"),
        ("a[1-", "never closed"),
        ("a[1-2", "never closed"),
        ("a[1-2]]", "without '['"),
        ("a]b", "without '['"),
        ("a[1[2]]", "inside a bracket"),
        (f"a[0-{MAX_RANGE}]", "more than"),
        ("a[0-1023]b[0-1023]c[0-1]", "expands to"),
    ],
)
def test_expand_rejects(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)) as info:
        expand(text)
    assert "\n" not in str(info.value) and repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("names", "text"),
    [
        ([], ""),
        (["x"], "x"),
        (["a", "b"], "a,b"),
        (["a1", "a2", "a3", "a5"], "a[1-3,5]"),
        (["a3", "a1", "a2"], "a[3,1-2]"),
        (["a9", "a10"], "a[9-10]"),
        (["a09", "a10"], "a[09-10]"),
        (["a99", "a100"], "a[99-100]"),
        (["a98", "a099", "a100"], "a[98,099-100]"),
        (["a1", "a01"], "a[1,01]"),
        (["a01", "a2"], "a[01,2]"),
        (["a00", "a1"], "a[00,1]"),
        (["a1", "a1"], "a[1,1]"),
        (["a1", "a2", "b1", "a3"], "a[1-2],b1,a3"),
        (["n1-1", "n1-2"], "n1-[1-2]"),
        (["a1b", "a2b"], "a1b,a2b"),
        (["1", "2", "3"], "[1-3]"),
        (["rack1-n01", "rack1-n02", "rack2-n01"], "rack1-n[01-02],rack2-n01"),
    ],
)
def test_compress(names: list[str], text: str) -> None:
    assert compress(names) == text
    assert expand(text) == names


@pytest.mark.parametrize("bad", ["", "a,b", "a b", "a[1]", "a]"])
def test_compress_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="cannot compress"):
        compress(["n1", bad])


# -- against the real scontrol ----------------------------------------------------------------


@pytest.fixture(scope="module")
def scontrol(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment for an offline scontrol; fails (not skips) where Slurm is missing."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Slurm runs on Linux")
    if tool("scontrol") is None:
        pytest.fail("scontrol not installed; install slurm-client (as .ci/run does)",
                    pytrace=False)
    conf = offline_conf(tmp_path_factory.mktemp("slurm-offline"))
    return {**os.environ, "SLURM_CONF": str(conf)}


def _scontrol(env: dict[str, str], what: str, arg: str) -> str:
    out = subprocess.run(["scontrol", "show", what, "--", arg], env=env, capture_output=True,
                         text=True, timeout=10, check=True)
    assert "Invalid" not in out.stderr + out.stdout, (arg, out.stderr)
    return out.stdout


_ALPHA = st.text("abn-", min_size=0, max_size=3)
_NUMBER = st.tuples(st.integers(0, 120), st.integers(1, 4)).map(lambda t: f"{t[0]:0{t[1]}d}")
_PIECE = st.one_of(_NUMBER, st.tuples(_NUMBER, st.integers(0, 12)).map(
    lambda t: f"{t[0]}-{int(t[0]) + t[1]}"))
_BRACKET = st.lists(_PIECE, min_size=1, max_size=3).map(lambda ps: "[" + ",".join(ps) + "]")
# Slurm 22.05 takes text between brackets but none after the last one.
_NAME = st.one_of(
    st.tuples(st.text("abn-", min_size=1, max_size=4), st.one_of(st.just(""), _NUMBER))
    .map("".join),
    st.tuples(_ALPHA, _BRACKET, st.lists(st.tuples(_ALPHA, _BRACKET).map("".join), max_size=1))
    .map(lambda t: t[0] + t[1] + "".join(t[2])),
)
_SLOW = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SLOW
@given(st.lists(_NAME, min_size=1, max_size=4), st.sampled_from([",", " "]))
def test_expand_matches_scontrol(scontrol: dict[str, str], names: list[str], sep: str) -> None:
    text = sep.join(names)
    assert expand(text) == _scontrol(scontrol, "hostnames", text).split()


@_SLOW
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "n1-"]), _NUMBER).map("".join),
                min_size=1, max_size=8))
def test_compress_matches_scontrol(scontrol: dict[str, str], names: list[str]) -> None:
    assert compress(names) == _scontrol(scontrol, "hostlist", ",".join(names)).strip()


def test_offline_conf_needs_no_daemon(scontrol: dict[str, str]) -> None:
    assert Path(scontrol["SLURM_CONF"]).is_file()
    assert _scontrol(scontrol, "hostnames", "sn[1-2]").split() == ["sn1", "sn2"]
