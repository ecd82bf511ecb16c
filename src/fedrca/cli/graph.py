"""``fedrca graph``: learn the plants' interdependency graph with FedPC over several sites' nominal data.

    fedrca graph --config config/tep.yaml --sites SITE [SITE ...] --out graph.json [--picture graph.png]
                 [--split K] [--mode pooled-stats|vote] [--test fisher-z|g-square] [--alpha 0.01]
                 [--keep-fraction 0.3] [--max-cond N] [--orientation skeleton|cpdag|dag] [--epsilon E] [--clip C]

Each SITE is one site's data: a file, or a directory whose files (sorted by
name) are concatenated; ``--split K`` cuts each SITE into K contiguous blocks,
each a site of its own (to simulate sites from one recording). Every site runs
:class:`fedrca.causal.fedpc.FedPCSite` on **all sensor and input columns** of the
configured plants. ``--mode pooled-stats`` (the default): the server runs PC on the
sites' summed sufficient statistics (secure aggregation: masked vectors only,
:class:`fedrca.causal.pooled.PooledStatsServer`), with ``--epsilon`` noised under a
privacy ledger per site; ``--mode vote``: P4's vote, the server sees only skeletons,
separating sets and p-values (docs/fedpc.md). Options left out take the config's
``causal:`` section.

The variable-level result is aggregated to plants: plant n -> plant m when a
variable of n is joined to a variable of m. ``--orientation skeleton`` (the default):
every variable edge counts both ways, whatever direction PC gave it (in a plant
under feedback control a disturbance travels both ways along a loop, and the
directions PC reads from closed-loop nominal data are those of the controllers);
``cpdag``: a directed CPDAG edge one way, an undirected one both ways; ``dag``: the
arcs of the DAG extension only. The output is the graph JSON the RCA engine reads
with ``rca: {graph: {source: file, path: ...}}`` (plants, edges, weight = number of
variable arcs), plus the variable-level result under the key ``fedpc``, and a PNG
picture.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrca.causal.fedpc import FedPCResult, FedPCServer, FedPCSite, TestKind, aggregate_to_groups
from fedrca.causal.pooled import PooledStatsServer
from fedrca.cli.files import check_paths, write_atomic
from fedrca.cli.report import draw_graph
from fedrca.config import CausalSettings, SiteConfig, load_config, parse_causal_settings, resolve_plants
from fedrca.datasets.loader import load_frame
from fedrca.exceptions import DataError
from fedrca.rca.graph import InterdependencyGraph
from fedrca.training.ledger import PrivacyLedger
from fedrca.training.privacy import gaussian_mu

__all__ = ["learn_site_graph", "register", "site_frames"]


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
    base = config.causal if settings is None else settings
    source = config.source if not overrides else f"{config.source} with the options {', '.join(sorted(overrides))}"
    s = parse_causal_settings({**base.model_dump(), **overrides}, source=source)
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


def _graph(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.alpha is not None and not 0.0 < args.alpha < 1.0:
        raise DataError(f"--alpha must be in (0, 1), got {args.alpha}")
    if args.keep_fraction is not None and not 0.0 <= args.keep_fraction < 1.0:
        raise DataError(f"--keep-fraction must be in [0, 1), got {args.keep_fraction}")
    if args.max_cond is not None and args.max_cond < 0:
        raise DataError(f"--max-cond must be >= 0, got {args.max_cond}")
    if args.epsilon is not None and not args.epsilon > 0.0:
        raise DataError(f"--epsilon must be > 0 (inf = exact statistics), got {args.epsilon}")
    if args.clip is not None and not 0.0 < args.clip <= 100.0:
        raise DataError(f"--clip must be in (0, 100] (standard deviations per variable), got {args.clip}")
    picture_path = args.picture or str(Path(args.out).with_suffix(".png"))
    check_paths(
        {"--config": args.config, **{f"--sites {site}": site for site in args.sites}},
        {"--out": args.out, "--picture": picture_path},
    )
    config = load_config(args.config)
    config, frames = site_frames(config, args.sites, args.split)
    options = {
        "mode": args.mode,
        "test": args.test,
        "alpha": args.alpha,
        "keep_fraction": args.keep_fraction,
        "max_cond": args.max_cond,
        "orientation": args.orientation,
        "epsilon": args.epsilon,
        "clip": args.clip,
    }
    overrides = {key: value for key, value in options.items() if value is not None}  # fmt: skip
    mode = overrides.get("mode", config.causal.mode)
    print(f"FedPC ({mode}) over {len(frames)} sites ({', '.join(str(len(f)) for _, f in frames)} samples) ...",
          file=sys.stderr)  # fmt: skip
    graph, result, detail = learn_site_graph(config, frames, **overrides)
    out = Path(args.out)
    payload = {**graph.to_dict(), "fedpc": detail}
    write_atomic(out, json.dumps(payload, indent=2) + "\n")
    picture = Path(args.picture) if args.picture else out.with_suffix(".png")
    n_var = result.n_variables
    draw_graph(
        graph,
        picture,
        title=f"FedPC ({detail['mode']}) over {len(frames)} sites: {n_var} variables, {len(detail['directed'])} "
        f"directed + {len(detail['undirected'])} undirected edges ({detail['orientation']})",
    )
    for layer in detail["layers"]:
        print(f"  layer {layer['layer']}: {layer['edges']} variable edges kept", file=sys.stderr)
    if detail["privacy"] is not None:
        spent = max(detail["privacy"]["spent_epsilon"])
        print(f"  privacy: epsilon {spent:.3g} per site (delta {detail['privacy']['delta']:g})", file=sys.stderr)
    print(
        f"wrote {out} ({len(graph.edges())} plant edges: "
        + ", ".join(f"{a}->{b}" for a, b in graph.edges())
        + f") and {picture}; {time.perf_counter() - started:.2f} s"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``graph``."""
    parser = sub.add_parser(
        "graph", help="learn the plants' interdependency graph with FedPC over several sites' nominal data"
    )
    parser.add_argument("--config", required=True, help="site configuration YAML (its plants and their columns)")
    parser.add_argument(
        "--sites", required=True, nargs="+", metavar="SITE", help="one data file or directory per site (nominal data)"
    )
    parser.add_argument("--split", type=int, default=1, help="cut each SITE into K contiguous sites (simulation)")
    parser.add_argument(
        "--mode", choices=["pooled-stats", "vote"], default=None,
        help="pooled-stats: PC on the sites' securely summed statistics; vote: P4's skeleton vote (causal.mode)",
    )  # fmt: skip
    parser.add_argument("--test", choices=["fisher-z", "g-square"], default=None, help="CI test (causal.test)")
    parser.add_argument("--alpha", type=float, default=None, help="significance level of every CI test (causal.alpha)")
    parser.add_argument(
        "--keep-fraction", type=float, default=None,
        help="vote: keep an edge kept by more than this share of sites (causal.keep_fraction)",
    )  # fmt: skip
    parser.add_argument("--max-cond", type=int, default=None, help="largest conditioning set (default: no limit)")
    parser.add_argument(
        "--orientation", choices=["skeleton", "cpdag", "dag"], default=None,
        help="plant arcs from every variable edge both ways (skeleton), the CPDAG (undirected both ways) or its DAG "
        "extension (causal.orientation)",
    )  # fmt: skip
    parser.add_argument(
        "--epsilon", type=float, default=None,
        help="pooled-stats, fisher-z: epsilon per site of its one noised release (inf = exact; causal.epsilon)",
    )  # fmt: skip
    parser.add_argument(
        "--clip", type=float, default=None, help="noise: rows clipped to CLIP sqrt(p) standard deviations (causal.clip)"
    )
    parser.add_argument("--out", required=True, help="graph JSON to write (rca.graph.path)")
    parser.add_argument("--picture", help="PNG picture of the plant graph (default: OUT with .png)")
    parser.set_defaults(func=_graph)
