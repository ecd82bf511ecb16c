"""Property-based fuzzing of the fleet configuration and of the graph options: a result or one fedrca error line.

The site configuration has its fuzzer in ``tests/config/test_yaml.py``; these cover the other
schemas a user writes. A fleet configuration is a valid one mutated (keys deleted, values
replaced by hostile ones: negative, huge, NaN, inf, strings, lists, long and odd names; or
its YAML text spliced), then read and checked against its data exactly as ``fedrca fleet``
does before the learning (:func:`load_fleet_config`, :func:`load_participants`,
:func:`check_fleet`, :func:`evaluation_files`). The graph options (the site configuration's
``causal:`` section mutated like a fleet's, and ``--split``, ``--mode``, ``--test``,
``--alpha``, ``--keep-fraction``, ``--max-cond``, ``--orientation``, ``--epsilon``, ``--clip``
over it) are drawn with hostile values over continuous, discrete, constant and short site
data, and ``fedrca graph``'s steps (:func:`prepare_graph`, :func:`learn_site_graph`) run to
the learned graph. Anything but a :class:`~fedrca.exceptions.FedrcaError`
with a one-line message (a traceback) fails the property.

``make test`` runs :data:`FAST` examples of each; ``make exhaustive`` runs :data:`SLOW`
(``pytest -m exhaustive tests/cli/test_fuzz_commands.py -s`` prints the counts).
"""

from __future__ import annotations

import contextlib
import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.application.fleet.config import load_fleet_config
from fedrca.application.fleet.run import evaluation_files
from fedrca.application.fleet.sources import check_fleet, load_participants
from fedrca.application.graph import learn_site_graph, prepare_graph
from fedrca.cli.graph import check_options
from fedrca.config import parse_config
from fedrca.exceptions import ConfigError, FedrcaError

FAST = 150
SLOW = 10_000

#: Values a mutation puts anywhere in a fleet configuration.
HOSTILE_VALUES: list[Any] = [
    None, 0, 1, 2, -1, -(2**63), 2**63, 10**12, 0.0, -0.5, 0.5, 1e-300, 1e308, math.nan, math.inf, -math.inf,
    True, False, "", " ", "x", "a" * 300, "../../etc/passwd", "/dev/zero", "p\x00", "é", [], [0, 10], [10, 5],
    [0, 10**9], [[1], [0]], {}, {"seed": 1}, "csv", "tep", "hai", "t", ["x1", "x1"], ["nope"],
]  # fmt: skip

#: Key paths of the fleet schema a mutation sets.
KEYS = [
    "fleet", "data", "data.format", "data.columns", "data.time_column", "data.label_columns", "data.sample_seconds",
    "data.timezone", "participants", "participants.0", "participants.0.name", "participants.0.file",
    "participants.0.rows", "participants.1.simulate", "participants.2.rows", "model.components", "model.rho",
    "model.lambda0", "model.max_iter", "model.em_tol", "model.prune", "model.n_init", "consensus.chunks",
    "consensus.tolerance", "consensus.step", "consensus.max_rounds", "graph.kind", "graph.neighbours",
    "threshold.folds", "threshold.percentile", "privacy.l0", "privacy.diversity", "privacy.noise",
    "privacy.noise_samples", "seed", "evaluate", "evaluate.onset", "evaluate.nominal", "evaluate.faults", "extra",
    "threshold.scope", "threshold.ewma", "evaluate.participants", "data.time_format", "participants.0.simulate",
    "participants.3.name",
]  # fmt: skip


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> Path:
    """Four participants' CSV files (time column ``t``, variables x1..x3) and a valid fleet configuration."""
    root = tmp_path_factory.mktemp("fuzz-fleet")
    rng = np.random.default_rng(0)
    for k in range(4):
        frame = pd.DataFrame(rng.normal(size=(60, 3)), columns=["x1", "x2", "x3"])
        frame.insert(0, "t", np.arange(60) * 1.0)
        frame.to_csv(root / f"p{k}.csv", index=False)
    return root


def _valid(root: Path) -> dict[str, Any]:
    return {
        "fleet": "fuzz",
        "data": {"format": "csv", "time_column": "t", "columns": ["x1", "x2", "x3"]},
        "participants": [{"name": f"p{k}", "file": str(root / f"p{k}.csv")} for k in range(4)],
        "model": {"components": 2, "n_init": 2},
        "threshold": {"folds": 2},
        "evaluate": {"onset": 10, "nominal": [str(root / "p0.csv")], "faults": {"f": str(root / "p1.csv")}},
    }


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    node: Any = config
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    for part in parts[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return  # the path is gone (an earlier mutation): nothing to set
    with contextlib.suppress(IndexError, TypeError):
        node[parts[-1]] = value


@st.composite
def fleet_configs(draw: st.DrawFn, root: Path) -> str:
    """A valid fleet configuration with a few keys set to hostile values, as YAML text (sometimes spliced)."""
    config = _valid(root)
    for _ in range(draw(st.integers(1, 4))):
        # a copy: a later mutation sets keys inside a drawn {} or [], which must not change HOSTILE_VALUES
        _set(config, draw(st.sampled_from(KEYS)), copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES))))
    text = yaml.safe_dump(config, allow_unicode=True)
    if draw(st.integers(0, 9)) == 0:  # a YAML-level splice: syntax the parser must refuse or read
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(st.sampled_from([":", "- ", "[", "{", "&a ", "*a", "\t", "'", "!!python/object "]))
            + (text[at:])
        )
    return text


def _one_line(exc: BaseException) -> None:
    message = str(exc)
    assert message and "\n" not in message.strip() and "Traceback" not in message, message


def _fleet_fuzz(root: Path, examples: int) -> dict[str, int]:
    counts = {"ok": 0, "error": 0}
    path = root / "fleet.yaml"

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(fleet_configs(root))
    def run(text: str) -> None:
        path.write_text(text, encoding="utf-8")
        try:
            config = load_fleet_config(path)
            data, columns = load_participants(config)
            check_fleet(config, data, columns)
            evaluation_files(config, columns)
        except FedrcaError as exc:
            _one_line(exc)
            if isinstance(exc, ConfigError):
                assert str(exc).startswith(str(path)), exc
            counts["error"] += 1
            return
        assert config.participants and columns and all(len(v) >= 18 for v in data.values())
        counts["ok"] += 1

    run()
    return counts


def test_fleet_configurations_give_a_checked_fleet_or_one_error_line(fleet_dir):
    counts = _fleet_fuzz(fleet_dir, FAST)
    assert counts["ok"] + counts["error"] >= FAST and counts["ok"] > 0 and counts["error"] > 0


@pytest.mark.slow
@pytest.mark.exhaustive
def test_fleet_configuration_fuzz_slow(fleet_dir):
    """Issue 25 acceptance 2: 10,000 examples of the fleet schema (``make exhaustive``)."""
    counts = _fleet_fuzz(fleet_dir, SLOW)
    print(f"\nfuzz fleet: {sum(counts.values())} examples, {counts['ok']} accepted, {counts['error']} refused")
    assert sum(counts.values()) >= SLOW


# -- the graph options --------------------------------------------------------------------------------------
GRAPH_CONFIG: dict[str, Any] = {
    "site": "fuzz",
    "dataset": {"format": "csv", "columns": ["a1", "a2", "b1", "b2"]},
    "plants": [{"name": "a", "sensors": ["a1", "a2"]}, {"name": "b", "sensors": ["b1", "b2"]}],
}


@pytest.fixture(scope="module")
def site_files(tmp_path_factory) -> dict[str, Path]:
    """Site data of every kind: continuous, discrete (3 levels), a constant column, few rows."""
    root = tmp_path_factory.mktemp("fuzz-graph")
    rng = np.random.default_rng(1)
    a = rng.normal(size=(400, 1))
    values = np.hstack([a, a + rng.normal(size=(400, 1)), rng.normal(size=(400, 1)), a + rng.normal(size=(400, 1))])
    kinds = {
        "continuous": values,
        "discrete": np.digitize(values, [-0.5, 0.5]).astype(float),
        "constant": np.column_stack([values[:, :3], np.full(400, 2.0)]),
        "short": values[:30],
    }
    files = {}
    for kind, table in kinds.items():
        files[kind] = root / f"{kind}.csv"
        pd.DataFrame(table, columns=GRAPH_CONFIG["dataset"]["columns"]).to_csv(files[kind], index=False)
    return files


def _option(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid value four times in five, else a hostile one (every option hostile at once would hide the others)."""
    return st.integers(0, 4).flatmap(lambda k: hostile if k == 0 else valid)


FLOATS = st.sampled_from([0.0, 1.0, -0.1, 1e-300, 1e300, math.nan, math.inf, -math.inf]) | st.floats()
INTS = st.sampled_from([0, -1, 10**6, 10**12, 2**63]) | st.integers(-10, 10**4)
ALPHA = _option(st.none() | st.sampled_from([0.001, 0.01, 0.05, 0.2]) | st.floats(1e-6, 0.5), FLOATS)
KEEP = _option(st.none() | st.sampled_from([0.0, 0.3, 0.5, 0.9]) | st.floats(0.0, 0.99), FLOATS)
SPLIT = _option(st.integers(1, 25), INTS)
MAX_COND = _option(st.none() | st.integers(0, 3), INTS)
EPSILON = _option(st.none() | st.sampled_from([math.inf, 0.5, 2.0, 10.0]), FLOATS)
CLIP = _option(st.none() | st.sampled_from([0.5, 1.5, 3.0]), FLOATS)
#: Keys of the ``causal:`` section a mutation sets (the values: :data:`HOSTILE_VALUES` and valid ones).
CAUSAL_KEYS = [
    "mode", "test", "alpha", "keep_fraction", "max_cond", "orientation", "epsilon", "delta", "clip", "budget", "seed",
    "extra",
]  # fmt: skip
CAUSAL_VALUES = [*HOSTILE_VALUES, "vote", "pooled-stats", "g-square", "fisher-z", "skeleton", "cpdag", "dag", "inf"]


@st.composite
def causal_sections(draw: st.DrawFn) -> Any:
    """The site configuration's ``causal:`` section: absent, valid, or with a few keys set to hostile values."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.sampled_from([None, [], "vote", 1]))  # not a mapping
    section: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 2)) if kind > 1 else 0):
        section[draw(st.sampled_from(CAUSAL_KEYS))] = copy.deepcopy(draw(st.sampled_from(CAUSAL_VALUES)))
    return section


def _graph_fuzz(site_files: dict[str, Path], examples: int) -> dict[str, int]:
    counts = {"ok": 0, "error": 0}

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(
        causal=causal_sections(),
        sites=st.lists(st.sampled_from(sorted(site_files)), min_size=1, max_size=3),
        split=SPLIT,
        mode=st.sampled_from([None, "pooled-stats", "vote"]),
        test=st.sampled_from([None, "fisher-z", "g-square"]),
        alpha=ALPHA,
        keep=KEEP,
        max_cond=MAX_COND,
        orientation=st.sampled_from([None, "skeleton", "cpdag", "dag"]),
        epsilon=EPSILON,
        clip=CLIP,
    )
    def run(causal, sites, split, mode, test, alpha, keep, max_cond, orientation, epsilon, clip) -> None:
        options = {
            "mode": mode, "test": test, "alpha": alpha, "keep_fraction": keep, "max_cond": max_cond,
            "orientation": orientation, "epsilon": epsilon, "clip": clip,
        }  # fmt: skip
        overrides = {key: value for key, value in options.items() if value is not None}
        try:
            check_options(alpha, keep, max_cond, split, epsilon=epsilon, clip=clip)
            config = parse_config({**GRAPH_CONFIG, "causal": causal}, source="graph-fuzz.yaml")
            resolved, frames, overrides, chosen = prepare_graph(
                config, [site_files[s] for s in sites], split, overrides
            )
            graph, result, detail = learn_site_graph(resolved, frames, **overrides)
        except FedrcaError as exc:
            _one_line(exc)
            counts["error"] += 1
            return
        assert graph.plants == ("a", "b") and result.n_variables == 4
        assert (detail["test"], detail["mode"]) == (chosen.test, chosen.mode)
        counts["ok"] += 1

    run()
    return counts


def test_graph_options_give_a_graph_or_one_error_line(site_files):
    counts = _graph_fuzz(site_files, FAST)
    assert counts["ok"] + counts["error"] >= FAST and counts["ok"] > 0 and counts["error"] > 0


@pytest.mark.slow
@pytest.mark.exhaustive
def test_graph_options_fuzz_slow(site_files):
    """Issue 25 acceptance 2: 10,000 examples of the graph options (``make exhaustive``)."""
    counts = _graph_fuzz(site_files, SLOW)
    print(f"\nfuzz graph: {sum(counts.values())} examples, {counts['ok']} graphs, {counts['error']} refused")
    assert sum(counts.values()) >= SLOW
