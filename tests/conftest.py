"""Shared fixtures. Keep each section small and say why it exists.

Cluster fixtures (``@pytest.mark.cluster`` tests): real hosts in network namespaces with real
OpenSSH sshd, from :mod:`tests.cluster`. They skip only on a developer machine without root
(``CI`` unset); in CI, or as root, a cluster that cannot be built is a failure, not a skip.

Slurm fixtures: a real slurmctld and one slurmd per node, from :mod:`tests.slurmcluster`.

Three workers on CI's two cores (pytest-xdist, ``-n 3 --dist loadgroup`` in
pyproject.toml: much of the suite waits on nodes, ranks and Slurm, not on a core): each test
file runs whole on one worker (its module fixtures, a cluster, are built once), and the files
that run the demo (hosts.example.yaml: 127.0.0.1:29400, ``~/.ddptui-demo``) share one worker,
so they never run at the same moment.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cluster import Cluster, ClusterFactory, environment_problem
from slurmcluster import SlurmCluster, missing_tools

# -- Ctrl-C ---------------------------------------------------------------------------------

# The tests that press Ctrl-C (SIGINT to a ddptui they started) model a person at a terminal,
# where SIGINT always reaches the program. A suite started in the background by a shell
# without job control (`pytest &`, a CI runner's script) inherits SIGINT ignored, and so would
# every ddptui it starts: Python keeps an ignored SIGINT ignored, and those tests would wait
# for a stop that never comes. Each process this suite starts takes SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# -- workers --------------------------------------------------------------------------------

#: Test files that launch the demo as shipped; one at a time.
DEMO_FILES = frozenset({"test_local_run.py", "test_tui_e2e.py", "test_tui_tmux.py"})


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group("demo" if name in DEMO_FILES else name))


# -- cluster --------------------------------------------------------------------------------


def close_all(made: list[Cluster] | list[SlurmCluster]) -> None:
    """Tear down what a factory made, newest first; one bad teardown does not leak the rest."""
    errors = []
    for c in reversed(made):
        try:
            c.close()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]



def _require_cluster_environment() -> None:
    """Skip only where a cluster is impossible by design (no root, not CI); else let it fail."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip(f"cluster tests {environment_problem()}; they run as root and in CI")


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[ClusterFactory]:
    """``cluster_factory(k)`` builds a fresh K-host cluster torn down after the test.

    For tests that break their cluster (stop a host, restart sshd with other settings).
    """
    _require_cluster_environment()
    made: list[Cluster] = []

    def make(k: int = 2) -> Cluster:
        c = Cluster.create(tmp_path / f"cluster{len(made)}", k)
        made.append(c)
        return c

    try:
        yield make
    finally:
        close_all(made)


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A ready 2-host cluster (node1, node2) shared by one module; do not break it."""
    _require_cluster_environment()
    c = Cluster.create(tmp_path_factory.mktemp("cluster2"), 2)
    try:
        yield c
    finally:
        c.close()


# -- slurm ----------------------------------------------------------------------------------

#: The type of the ``slurm_cluster_factory`` fixture: ``factory(n_nodes, cpus_per_node)``.
SlurmClusterFactory = Callable[..., SlurmCluster]


def _require_slurm_environment() -> None:
    """Skip only where Slurm in namespaces is impossible (not Linux, not root).

    Missing Slurm binaries fail instead: CI installs them (.ci/run), so a skip there would
    hide that the srun transport went untested.
    """
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs Linux and root (network namespaces)")
    missing = missing_tools()
    if missing:
        pytest.fail(f"Slurm test cluster: {', '.join(missing)} not installed; install "
                    "slurmctld slurmd slurm-client munge (as .ci/run does)", pytrace=False)


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A ready 2-node Slurm cluster (sn1, sn2) shared by one module; cancel your own jobs."""
    _require_slurm_environment()
    c = SlurmCluster.create(tmp_path_factory.mktemp("slurm"), 2)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def bound_slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A 2-node cluster whose slurmd binds each task to its CPUs (``task/affinity``, as most
    clusters are set up), shared by one module; cancel your own jobs."""
    _require_slurm_environment()
    c = SlurmCluster.create(tmp_path_factory.mktemp("slurm"), 2, task_plugin="task/affinity")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def slurm_cluster_factory(tmp_path: Path) -> Iterator[SlurmClusterFactory]:
    """``slurm_cluster_factory(n_nodes=4)`` builds a fresh cluster torn down after the test."""
    _require_slurm_environment()
    made: list[SlurmCluster] = []

    def make(n_nodes: int = 2, cpus_per_node: int = 2) -> SlurmCluster:
        c = SlurmCluster.create(tmp_path / f"slurm{len(made)}", n_nodes, cpus_per_node)
        made.append(c)
        return c

    try:
        yield make
    finally:
        close_all(made)
