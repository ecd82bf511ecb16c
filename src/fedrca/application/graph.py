"""Learning the plants' interdependency graph with FedPC over several sites' nominal data (``fedrca graph``).

:func:`prepare_graph` checks everything before FedPC runs (the settings, the sites' frames and
what their data can carry: :func:`check_sites`, the memory terms :func:`graph_bytes` and
:func:`g_square_bytes`); :func:`learn_site_graph` runs every site's
:class:`fedrca.causal.fedpc.FedPCSite` on **all sensor and input columns** of the configured
plants against the vote's or the pooled-statistics server and returns the plant graph the RCA
engine reads. The command (options, files, picture) is :mod:`fedrca.cli.graph`; the method and
its options are described there and in docs/fedpc.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrca.causal.citests import TABLE_CELLS
from fedrca.causal.fedpc import FedPCResult, FedPCServer, FedPCSite, TestKind, aggregate_to_groups
from fedrca.causal.pooled import PooledStatsServer
from fedrca.config import (
    MIN_NOMINAL_SAMPLES,
    CausalSettings,
    SiteConfig,
    parse_causal_settings,
    resolve_plants,
)
from fedrca.config.limits import MEMORY_LIMIT, gib, largest
from fedrca.datasets.loader import load_frame
from fedrca.exceptions import DataError
from fedrca.privacy.accounting import gaussian_mu
from fedrca.privacy.ledger import PrivacyLedger
from fedrca.rca.graph import InterdependencyGraph

__all__ = [
    "check_sites",
    "g_square_bytes",
    "graph_bytes",
    "graph_settings",
    "graph_variables",
    "learn_site_graph",
    "prepare_graph",
    "site_frames",
]


def _site_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise DataError(f"{path}: the site directory holds no data file")
        return files
    if not path.is_file():
        raise DataError(f"{path}: no such site file or directory")
    return [path]


def site_frames(
    config: SiteConfig, sites: list[str | Path], split: int = 1
) -> tuple[SiteConfig, list[tuple[str, pd.DataFrame]]]:
    """Load every site's data (files of a directory concatenated); with ``split`` > 1 cut each into contiguous blocks.

    Returns the configuration with its plants resolved against the first file's
    columns, and (label, frame) per site.
    """
    if split < 1:
        raise DataError(f"--split must be >= 1, got {split}")
    frames: list[tuple[str, pd.DataFrame]] = []
    for site in sites:
        path = Path(site)
        parts = [load_frame(config, f) for f in _site_files(path)]
        frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        if split == 1:
            frames.append((str(path), frame))
            continue
        if len(frame) // split < MIN_NOMINAL_SAMPLES:  # before the cut: a split beyond the rows allocates nothing
            raise DataError(
                f"--split {split} leaves {path} {len(frame) // split} samples per site ({len(frame)} rows), fewer than "
                f"{MIN_NOMINAL_SAMPLES}: give --split at most {max(1, len(frame) // MIN_NOMINAL_SAMPLES)}"
            )
        bounds = np.linspace(0, len(frame), split + 1).astype(int)
        for k in range(split):
            frames.append((f"{path}[{bounds[k]}:{bounds[k + 1]}]", frame.iloc[bounds[k] : bounds[k + 1]]))
    resolved = resolve_plants(config, [str(c) for c in frames[0][1].columns])
    return resolved, frames


def _variables(config: SiteConfig) -> tuple[list[str], list[str]]:
    names, plants = [], []
    for plant in config.plants:
        for column in [*plant.sensors, *plant.inputs]:
            if column not in names:
                names.append(column)
                plants.append(plant.name)
    return names, plants


#: Samples per cell a G-square table needs (the usual rule for its chi-square reference).
CELL_SAMPLES = 5
#: Bytes per cell of a G-square query's tables (counts, margins, expected counts, terms: float64); the
#: tables of a batch are counted :data:`~fedrca.causal.citests.TABLE_CELLS` cells at a time.
G_SQUARE_CELL_BYTES = 48
#: Bytes per cell of a pooled round (a site's counts and masks, the server's running ring sum: uint64 arrays).
POOLED_CELL_BYTES = 128
#: Cells the pooled server packs into one round (:mod:`fedrca.causal.pooled`).
POOLED_ROUND_CELLS = 1 << 21
#: Bytes per pair of variables of a FedPC run besides the sites' correlation matrices: PC's per-pair
#: separating-set candidates and queries, the pooled sums' ring elements, the server's matrices.
PAIR_BYTES = 1000
#: Bytes per triple of variables: the orientation's unshielded-triple masks (``p x p x p`` booleans,
#: :func:`fedrca.causal.pdag.unshielded_triples`). Measured with :data:`PAIR_BYTES`: 2.07 p³ bytes above the
#: base over 800 variables (docs/limits.md).
TRIPLE_BYTES = 2
#: Bytes of one block of CI queries with the test's working arrays on it: FedPC makes and tests its
#: queries in blocks of at most 2^22 ids (:mod:`fedrca.causal.fedpc`), Fisher-z in chunks of 2^22
#: elements; measured 40-110 MB for the test and 34 MB for a block at every depth (docs/limits.md).
SEARCH_BYTES = 256_000_000


def g_square_bytes(levels: int, depth: int, *, pooled: bool = False) -> int:
    """Bytes of one G-square query over ``levels`` levels with ``depth`` conditioning variables.

    ``48 max(R^(l + 2), 2^21)`` (a batch's tables are counted 2^21 cells at a time, or one query's
    when it has more); pooled, a round's ring vectors add ``128 max(R^(l + 2), 2^21)``.
    """
    cells = max(levels ** (depth + 2), TABLE_CELLS)
    extra = POOLED_CELL_BYTES * max(cells, POOLED_ROUND_CELLS) if pooled else 0
    return G_SQUARE_CELL_BYTES * cells + extra


def graph_bytes(p: int, sites: int = 2) -> int:
    """Bytes of a FedPC run over ``p`` variables and ``sites`` sites: ``2 p³ + p² (8 K + 1000) + 256 MB``.

    The orientation's triple masks (:data:`TRIPLE_BYTES`); every Fisher-z site keeps its ``p x p``
    correlation matrix (the vote's test, the pooled standardiser); PC keeps per pair of variables
    its candidates and queries (:data:`PAIR_BYTES`); one block of queries is made and tested at a
    time (:data:`SEARCH_BYTES`), however many the run has (at most
    :data:`~fedrca.causal.fedpc.MAX_QUERIES` a layer or a separating-set search).
    """
    return TRIPLE_BYTES * p**3 + p * p * (8 * sites + PAIR_BYTES) + SEARCH_BYTES


def graph_variables(sites: int = 2) -> int:
    """The most variables a FedPC run over ``sites`` sites may have (:func:`graph_bytes` within the limit)."""
    return largest(MEMORY_LIMIT, lambda p: graph_bytes(p, sites), 1 << 20)


def graph_settings(config: SiteConfig, overrides: dict[str, Any], base: CausalSettings | None = None) -> CausalSettings:
    """The config's ``causal:`` section (or ``base``) with the command's options over it, validated like the section.

    Raises
    ------
    ConfigError
        naming the key (``causal.epsilon``), the options given and the valid values.
    """
    source = config.source if not overrides else f"{config.source} with the options {', '.join(sorted(overrides))}"
    section = config.causal if base is None else base
    return parse_causal_settings({**section.model_dump(), **overrides}, source=source)


def prepare_graph(
    config: SiteConfig, sites: list[str | Path], split: int, overrides: dict[str, Any]
) -> tuple[SiteConfig, list[tuple[str, pd.DataFrame]], dict[str, Any], CausalSettings]:
    """Everything ``fedrca graph`` checks before FedPC runs: the settings (the config's ``causal:``
    section with ``overrides``, refused before a site is read), the sites' frames and what their
    data can carry (:func:`check_sites`).

    Returns the resolved config, the frames, the overrides for :func:`learn_site_graph` (with the
    memory cap of G-square's conditioning depth when there is one) and the settings.
    """
    settings = graph_settings(config, overrides)
    config, frames = site_frames(config, sites, split)
    max_cond = check_sites(
        config, frames, test=settings.test, max_cond=settings.max_cond, split=split, mode=settings.mode
    )
    if max_cond != settings.max_cond:
        overrides = {**overrides, "max_cond": max_cond}
    return config, frames, overrides, settings


def check_sites(
    config: SiteConfig,
    frames: list[tuple[str, pd.DataFrame]],
    *,
    test: str = "fisher-z",
    max_cond: int | None = None,
    split: int = 1,
    mode: str = "vote",
) -> int | None:
    """Refuse site data the CI test cannot carry, before FedPC runs; returns the ``max_cond`` to use.

    The tests run on one site's rows (``mode="vote"``) or on the pooled rows of all sites
    (``mode="pooled-stats"``, which needs at least two sites):

    * at most :func:`graph_variables` variables (the orientation's triple masks, PC's per-pair
      state and the sites' ``p x p`` correlation matrices: :func:`graph_bytes`);
    * every site needs the variables' columns, and each variable must vary at every site;
    * Fisher-z needs ``|S| + 4`` samples for a conditioning set S, so the tested rows need the
      deepest set + 4 (with ``--split`` the message gives the largest split that leaves enough);
    * G-square needs discrete data: at most ``sqrt(n / 5)`` levels per variable (5 samples per
      cell of a two-variable table); continuous data (a value per sample) are refused. Its tables
      have ``R^(l + 2)`` cells for R levels and l conditioning variables: the deepest set is capped
      so that one query (:func:`g_square_bytes`) fits what :func:`graph_bytes` leaves of
      :data:`~fedrca.config.limits.MEMORY_LIMIT` (``--max-cond`` above the cap is refused;
      without it the cap is used and recorded as ``max_cond`` in the output).

    Raises
    ------
    DataError
        naming the site (file), the column or the option, and the fix.
    """
    names, _ = _variables(config)
    pooled = mode == "pooled-stats"
    if pooled and len(frames) < 2:
        raise DataError(
            f"--mode pooled-stats: pooled statistics need at least 2 sites (secure aggregation hides each among the "
            f"others), got {len(frames)}: give more --sites, cut the data with --split K, or use --mode vote"
        )
    p, K = len(names), len(frames)
    if p > graph_variables(K):
        raise DataError(
            f"FedPC over {p} variables at {K} sites needs {gib(graph_bytes(p, K))}, over the {gib(MEMORY_LIMIT)} "
            f"limit (docs/limits.md): give the plants at most {graph_variables(K)} sensors and inputs together, "
            "or fewer sites"
        )
    deepest = max(p - 2, 0) if max_cond is None else min(max_cond, max(p - 2, 0))
    site_rows = sum(len(frame) for _, frame in frames) * split // max(len(frames), 1)  # one site's rows, split or not
    for label, frame in frames:
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise DataError(f"{label}: site data lack column(s) {', '.join(missing[:5])} of the configured plants")
        if test == "fisher-z":
            values = frame[names].to_numpy(dtype=np.float64)
            spread, middle = values.std(axis=0), np.abs(values.mean(axis=0))
            # constant to rounding: the criterion of fedrca.datasets.nominal.check_nominal
            constant = [names[j] for j in np.flatnonzero(~(spread > 1e-12 * middle))]
            if constant:
                raise DataError(
                    f"{label}: column(s) {', '.join(constant[:5])} are constant at this site; a CI test needs "
                    "varying columns: leave them out of the plants' sensors/inputs, or give more data"
                )
    need = deepest + 4
    tested = [("the sites together", sum(len(f) for _, f in frames))] if pooled else [(l, len(f)) for l, f in frames]
    if test == "fisher-z":
        for label, n in tested:
            if n < need:
                if split > 1 and not pooled:
                    cut, fix = (
                        f"--split {split} leaves {label} {n} samples",
                        f"give --split at most {max(1, site_rows // need)}",
                    )
                else:
                    cut, fix = f"{label} {'hold' if pooled else 'has'} {n} samples", "give more data"
                raise DataError(
                    f"{cut}; Fisher-z with conditioning sets of up to {deepest} variables needs at least {need}: "
                    f"{fix}, or a smaller --max-cond"
                )
        return max_cond
    if pooled:  # the pooled tables' levels are the union of the sites' (the code book)
        counts = pd.concat([f[names] for _, f in frames], ignore_index=True).nunique(axis=0)
        groups = [("the sites together", sum(len(f) for _, f in frames), counts)]
    else:
        groups = [(label, len(frame), frame[names].nunique(axis=0)) for label, frame in frames]
    levels = 0
    for label, n, counts in groups:
        limit = max(2, math.isqrt(n // CELL_SAMPLES))
        worst = str(counts.idxmax())
        if int(counts.max()) > limit:
            raise DataError(
                f"--test g-square needs discrete data: column {worst} of {label} takes {int(counts.max())} "
                f"distinct values in {n} samples; {n} samples carry at most {limit} levels ({CELL_SAMPLES} "
                "samples per cell): use --test fisher-z for continuous data, or code the column into few levels"
            )
        levels = max(levels, int(counts.max()))
    R = max(levels, 2)
    budget = MEMORY_LIMIT - graph_bytes(p, K)  # the run's per-pair state and one query's tables share the limit
    fits = largest(budget, lambda d: g_square_bytes(R, d - 1, pooled=pooled), p) - 1
    if max_cond is not None and deepest > fits:  # deepest: a --max-cond beyond the variables is their number
        raise DataError(
            f"--max-cond {max_cond}: G-square tables of {levels} levels and {deepest} conditioning variables need "
            f"{gib(g_square_bytes(R, deepest, pooled=pooled))}, over the {gib(MEMORY_LIMIT)} limit "
            f"(docs/limits.md): give --max-cond at most {fits}"
        )
    return min(deepest, max(fits, 0))


def learn_site_graph(
    config: SiteConfig,
    frames: list[tuple[str, pd.DataFrame]],
    settings: CausalSettings | None = None,
    **overrides: Any,
) -> tuple[InterdependencyGraph, FedPCResult, dict[str, Any]]:
    """FedPC over the sites' frames; the plant graph, the variable-level result and a JSON-able description.

    ``settings`` default to the config's ``causal:`` section; ``overrides`` replace single
    keys (``mode="vote"``, ``alpha=0.05``, ...) and are validated like the section.
    """
    s = graph_settings(config, overrides, base=settings)
    names, variable_plants = _variables(config)
    kind: TestKind = s.test
    mu = gaussian_mu(s.epsilon, s.delta)
    ledgers = [PrivacyLedger(label, delta=s.delta, budget=s.budget, budget_key="causal.budget") for label, _ in frames]
    sites = []
    for k, (label, frame) in enumerate(frames):
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise DataError(f"{label}: site data lack column(s) {', '.join(missing[:5])} of the configured plants")
        values = frame[names].to_numpy(dtype=np.float64 if kind == "fisher-z" else object)
        if kind == "fisher-z" and len(values):
            sd, mean = values.std(axis=0), values.mean(axis=0)
            # constant to rounding: the criterion of fedrca.datasets.nominal.check_nominal
            flat = [n for n, dev, m in zip(names, sd, mean) if not dev > 1e-12 * abs(m)]
            if flat:
                raise DataError(
                    f"{label}: column(s) {', '.join(flat[:5])} are constant; Fisher-z needs varying columns: "
                    "leave them out of the config's plants"
                )
        sites.append(FedPCSite(values, names, test=kind, seed=s.seed + k, ledger=ledgers[k], max_mu=mu))
    endpoints = [site.handle for site in sites]
    if s.mode == "vote":
        result = FedPCServer(len(names), alpha=s.alpha, keep_fraction=s.keep_fraction, max_cond=s.max_cond).run(
            endpoints
        )
    else:
        server = PooledStatsServer(len(names), test=kind, alpha=s.alpha, max_cond=s.max_cond, mu=mu, clip=s.clip)
        result = server.run(endpoints)
    # back to names on the site's side (the server only knows ids)
    id_names, graph = sites[0].translate(result, "dag" if s.orientation == "dag" else "cpdag")
    if s.orientation == "skeleton":
        graph = graph | graph.T  # every variable edge both ways
    plant_of = dict(zip(names, variable_plants))
    adjacency, weight = aggregate_to_groups(graph, [plant_of[n] for n in id_names], config.plant_names)
    plant_graph = InterdependencyGraph(tuple(config.plant_names), adjacency, weight, source="fedpc", threshold=s.alpha)
    cp, dag = result.cpdag, result.dag
    detail = {
        "variables": list(id_names),
        "variable_plants": [plant_of[n] for n in id_names],
        "directed": [[id_names[i], id_names[j]] for i, j in zip(*np.nonzero(cp & ~cp.T))],
        "undirected": [[id_names[i], id_names[j]] for i, j in zip(*np.nonzero(np.triu(cp & cp.T)))],
        "dag": [[id_names[i], id_names[j]] for i, j in zip(*np.nonzero(dag))],
        "extension_exact": result.extension_exact,
        "mode": s.mode,
        "orientation": s.orientation,
        "test": s.test,
        "alpha": s.alpha,
        "keep_fraction": s.keep_fraction if s.mode == "vote" else None,
        "max_cond": s.max_cond,
        "layers": [{"layer": r.layer, "edges": int(r.merged.sum() // 2)} for r in result.layers],
        "sites": [{"data": label, "samples": len(frame)} for label, frame in frames],
        "rounds": result.extra.get("rounds"),
        "bytes_per_site": result.extra.get("bytes_per_site"),
        "privacy": None
        if math.isinf(s.epsilon)
        else {
            "epsilon_per_site": s.epsilon,
            "delta": s.delta,
            "mu": mu,
            "clip": s.clip,
            "spent_epsilon": [ledger.epsilon() for ledger in ledgers],
        },
    }
    return plant_graph, result, detail
