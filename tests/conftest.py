"""Shared fixtures: the bundled TEP data and configurations."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from threadpoolctl import threadpool_limits

# One BLAS thread in every test process and every process a test starts (workers, commands, benchmarks),
# whether or not `make test` set it: the suite runs three processes on two cores, where OpenBLAS's
# spinning threads multiply the CPU a numpy solve takes (a 270-sensor training on a busy 2-core machine:
# 49 s of CPU with OpenBLAS's default threads, 8 s with one). threadpoolctl for this process (numpy is
# loaded), the variables for the processes it starts.
_ONE_BLAS_THREAD = threadpool_limits(1)
for _blas in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_blas, "1")

REPO = Path(__file__).resolve().parents[1]

# the session-scoped real Kafka broker (`kafka_broker`, tests marked @pytest.mark.kafka) and Mosquitto
# broker (`mqtt_broker`, @pytest.mark.mqtt); under
# CI=true a skip not listed in tests/skips-allowed.txt fails the run (tests/skip_policy.py);
# pytester runs pytest on generated test files (tests/test_skip_policy.py)
pytest_plugins = ["tests.kafka_broker", "tests.mqtt_broker", "tests.skip_policy", "pytester"]


# No example database and no deadline for any property test: a test's verdict never depends on a
# draw remembered from an earlier run or on how busy the machine is (a 200 ms deadline failed
# tests/tools/test_broker_script.py on a 2-core machine under load). Tests set their own examples.
settings.register_profile("fedrca", deadline=None, database=None)
settings.load_profile("fedrca")


#: marks of tests that start servers, workers or long runs: their modules are the long ones
HEAVY_MARKS = frozenset({"slow", "kafka", "mqtt", "modbus"})


#: The hang guard of a ``make exhaustive`` test that names none (seconds).
EXHAUSTIVE_TIMEOUT = 3600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with more heavy tests first, each module's tests together and in their order.

    ``make test`` runs on three processes with ``--dist loadfile`` (one module on one process, handed
    out in this order): the long modules start first and the short ones fill in around them, so no
    process ends with a long module alone while the others are idle (longest first, by the count of
    tests that start servers, workers or long runs).
    """

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    heavy: dict[str, int] = {}
    for item in items:
        heavy[module(item)] = heavy.get(module(item), 0) + bool(HEAVY_MARKS & {m.name for m in item.iter_markers()})
    first = {name: i for i, name in enumerate(dict.fromkeys(map(module, items)))}
    items.sort(key=lambda item: (-heavy[module(item)], first[module(item)]))
    # the suite's hang guard (pyproject's timeout, 600 s) is for make test; a many-example run of make exhaustive
    # outlasts it on a loaded machine with no example failing (10,000 configurations: 41 s per 300 at a load of 12),
    # so an exhaustive test without a guard of its own gets an hour
    for item in items:
        if item.get_closest_marker("exhaustive") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(EXHAUSTIVE_TIMEOUT))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tep_dir() -> Path:
    return REPO / "data" / "tep"


def random_stable_system(rng: np.random.Generator, n: int, d: int, m: int = 0):
    """Random (A, B, C, Q, R) with spectral radius of A below 0.95."""
    A = rng.normal(size=(n, n))
    A *= rng.uniform(0.3, 0.95) / max(np.abs(np.linalg.eigvals(A)))
    C = rng.normal(size=(d, n))
    Lq = rng.normal(size=(n, n)) * 0.3
    Lr = rng.normal(size=(d, d)) * 0.3
    Q = Lq @ Lq.T + 0.05 * np.eye(n)
    R = Lr @ Lr.T + 0.1 * np.eye(d)
    B = rng.normal(size=(n, m)) if m else None
    return A, B, C, Q, R
