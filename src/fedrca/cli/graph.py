"""``fedrca graph``: learn the plants' interdependency graph with FedPC over several sites' nominal data.

    fedrca graph --config config/tep.yaml --sites SITE [SITE ...] --out graph.json [--picture graph.png]
                 [--split K] [--test fisher-z|g-square] [--alpha 0.01] [--keep-fraction 0.3]
                 [--max-cond N] [--orientation cpdag|dag]

Each SITE is one site's data: a file, or a directory whose files (sorted by
name) are concatenated; ``--split K`` cuts each SITE into K contiguous blocks,
each a site of its own (to simulate sites from one recording). Every site runs
:class:`fedrca.causal.fedpc.FedPCSite` on **all sensor and input columns** of the
configured plants; the server sees only skeletons, separating sets and
p-values (docs/fedpc.md).

The variable-level result is aggregated to plants: plant n -> plant m when a
variable of n has an arc into a variable of m (``--orientation cpdag``, the
default: an undirected CPDAG edge, whose direction the data cannot tell, counts
both ways; ``dag``: the arcs of the DAG extension only). The output is the graph
JSON the RCA engine reads with ``rca: {graph: {source: file, path: ...}}``
(plants, edges, weight = number of variable arcs), plus the variable-level
result under the key ``fedpc``, and a PNG picture.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrca.causal.fedpc import FedPCResult, FedPCServer, FedPCSite, TestKind, aggregate_to_groups
from fedrca.cli.outputs import Outputs
from fedrca.cli.report import graph_picture
from fedrca.config import MIN_NOMINAL_SAMPLES, SiteConfig, load_config, resolve_plants
from fedrca.config.limits import MEMORY_LIMIT, gib, largest
from fedrca.datasets.loader import load_frame
from fedrca.exceptions import DataError
from fedrca.rca.graph import InterdependencyGraph

__all__ = ["PICTURE_FORMATS", "check_options", "check_sites", "learn_site_graph", "register", "site_frames"]

#: File name endings of the graph picture (the formats it is drawn in).
PICTURE_FORMATS = (".png", ".svg", ".pdf")


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
#: Bytes per cell of a G-square query's tables (counts, margins, expected counts, terms: float64).
G_SQUARE_CELL_BYTES = 48


def check_options(alpha: float, keep_fraction: float, max_cond: int | None, split: int) -> None:
    """Refuse option values FedPC has no meaning for (one line naming the option and the valid range)."""
    if not 0.0 < alpha < 1.0:
        raise DataError(f"--alpha must be in (0, 1), got {alpha}")
    if not 0.0 <= keep_fraction < 1.0:
        raise DataError(f"--keep-fraction must be in [0, 1), got {keep_fraction}")
    if max_cond is not None and max_cond < 0:
        raise DataError(f"--max-cond must be >= 0, got {max_cond}")
    if split < 1:
        raise DataError(f"--split must be >= 1, got {split}")


def check_sites(
    config: SiteConfig,
    frames: list[tuple[str, pd.DataFrame]],
    *,
    test: str = "fisher-z",
    max_cond: int | None = None,
    split: int = 1,
) -> int | None:
    """Refuse site data the CI test cannot carry, before FedPC runs; returns the ``max_cond`` to use.

    * every site needs the variables' columns, and each variable must vary at every site;
    * Fisher-z needs ``|S| + 4`` samples for a conditioning set S, so a site needs the deepest
      set + 4 (with ``--split`` the message gives the largest split that leaves enough);
    * G-square needs discrete data: at most ``sqrt(n / 5)`` levels per variable (5 samples per
      cell of a two-variable table); continuous data (a value per sample) are refused. Its tables
      have ``R^(l + 2)`` cells for R levels and l conditioning variables: the deepest set is capped
      so that one table fits :data:`~fedrca.config.limits.MEMORY_LIMIT` (``--max-cond`` above the cap
      is refused; without it the cap is used and recorded as ``max_cond`` in the output).

    Raises
    ------
    DataError
        naming the site (file), the column or the option, and the fix.
    """
    names, _ = _variables(config)
    deepest = max(len(names) - 2, 0) if max_cond is None else min(max_cond, max(len(names) - 2, 0))
    levels = 0
    site_rows = sum(len(frame) for _, frame in frames) * split // max(len(frames), 1)  # one site's rows, split or not
    for label, frame in frames:
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise DataError(f"{label}: site data lack column(s) {', '.join(missing[:5])} of the configured plants")
        n = len(frame)
        values = frame[names]
        if test == "fisher-z":
            need = deepest + 4
            if n < need:
                cut = f"--split {split} leaves {label} {n} samples" if split > 1 else f"{label} has {n} samples"
                fix = f"give --split at most {max(1, site_rows // need)}" if split > 1 else "give more data"
                raise DataError(
                    f"{cut}; Fisher-z with conditioning sets of up to {deepest} variables needs at least {need}: "
                    f"{fix}, or a smaller --max-cond"
                )
            spread = values.std(axis=0).to_numpy()
            constant = [names[j] for j in np.flatnonzero(~(spread > 0))]
            if constant:
                raise DataError(
                    f"{label}: column(s) {', '.join(constant[:5])} never change at this site; a CI test needs "
                    "variation: leave them out of the plants' sensors/inputs, or give more data"
                )
        else:
            limit = max(2, math.isqrt(n // CELL_SAMPLES))
            counts = values.nunique(axis=0)
            worst = str(counts.idxmax())
            if int(counts.max()) > limit:
                raise DataError(
                    f"--test g-square needs discrete data: column {worst} of {label} takes {int(counts.max())} "
                    f"distinct values in {n} samples; {n} samples carry at most {limit} levels ({CELL_SAMPLES} "
                    "samples per cell): use --test fisher-z for continuous data, or code the column into few levels"
                )
            levels = max(levels, int(counts.max()))
    if test != "g-square":
        return max_cond
    fits = largest(MEMORY_LIMIT, lambda l: G_SQUARE_CELL_BYTES * max(levels, 2) ** (l + 1), len(names)) - 1
    if max_cond is not None and max_cond > fits:
        raise DataError(
            f"--max-cond {max_cond}: G-square tables of {levels} levels and {max_cond} conditioning variables need "
            f"{gib(G_SQUARE_CELL_BYTES * levels ** (max_cond + 2))}, over the {gib(MEMORY_LIMIT)} limit "
            f"(docs/limits.md): give --max-cond at most {fits}"
        )
    return min(deepest, max(fits, 0))


def learn_site_graph(
    config: SiteConfig,
    frames: list[tuple[str, pd.DataFrame]],
    *,
    test: str = "fisher-z",
    alpha: float = 0.01,
    keep_fraction: float = 0.3,
    max_cond: int | None = None,
    orientation: str = "cpdag",
) -> tuple[InterdependencyGraph, FedPCResult, dict[str, Any]]:
    """FedPC over the sites' frames; the plant graph, the variable-level result and a JSON-able description."""
    names, variable_plants = _variables(config)
    sites = []
    for label, frame in frames:
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise DataError(f"{label}: site data lack column(s) {', '.join(missing[:5])} of the configured plants")
        kind: TestKind = "g-square" if test == "g-square" else "fisher-z"
        values = frame[names].to_numpy(dtype=np.float64 if kind == "fisher-z" else object)
        sites.append(FedPCSite(values, names, test=kind))
    server = FedPCServer(len(names), alpha=alpha, keep_fraction=keep_fraction, max_cond=max_cond)
    result = server.run([s.handle for s in sites])
    # back to names on the site's side (the server only knows ids)
    id_names, graph = sites[0].translate(result, "cpdag" if orientation == "cpdag" else "dag")
    plant_of = dict(zip(names, variable_plants))
    adjacency, weight = aggregate_to_groups(graph, [plant_of[n] for n in id_names], config.plant_names)
    plant_graph = InterdependencyGraph(tuple(config.plant_names), adjacency, weight, source="fedpc", threshold=alpha)
    cp, dag = result.cpdag, result.dag
    detail = {
        "variables": list(id_names),
        "variable_plants": [plant_of[n] for n in id_names],
        "directed": [[id_names[i], id_names[j]] for i, j in zip(*np.nonzero(cp & ~cp.T))],
        "undirected": [[id_names[i], id_names[j]] for i, j in zip(*np.nonzero(np.triu(cp & cp.T)))],
        "dag": [[id_names[i], id_names[j]] for i, j in zip(*np.nonzero(dag))],
        "extension_exact": result.extension_exact,
        "orientation": orientation,
        "test": test,
        "alpha": alpha,
        "keep_fraction": keep_fraction,
        "max_cond": max_cond,
        "layers": [{"layer": r.layer, "edges": int(r.merged.sum() // 2)} for r in result.layers],
        "sites": [{"data": label, "samples": len(frame)} for label, frame in frames],
    }
    return plant_graph, result, detail


def _graph(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    check_options(args.alpha, args.keep_fraction, args.max_cond, args.split)
    picture = Path(args.picture) if args.picture else Path(args.out).with_suffix(".png")
    seen: dict[str, str] = {}
    for site in args.sites:
        real = os.path.realpath(site)
        if real in seen:
            raise DataError(f"--sites names {seen[real]} twice (as {site}); give each site's data once")
        seen[real] = site
    sites = {f"--sites {site}": site for site in args.sites}
    with Outputs.plan({"--config": args.config}, {"--out": args.out, "--picture": picture}, input_folders=sites) as out:
        if picture.suffix.lower() not in PICTURE_FORMATS:
            raise DataError(
                f"--picture {picture}: unknown picture format '{picture.suffix}'; end the name in "
                f"{', '.join(PICTURE_FORMATS)}"
            )
        config = load_config(args.config)
        config, frames = site_frames(config, args.sites, args.split)
        max_cond = check_sites(config, frames, test=args.test, max_cond=args.max_cond, split=args.split)
        sizes = [str(len(f)) for _, f in frames]
        shown = ", ".join(sizes[:6]) + (f", ... ({len(sizes)} sites)" if len(sizes) > 6 else "")
        print(f"FedPC over {len(frames)} sites ({shown} samples) ...", file=sys.stderr)
        if max_cond != args.max_cond:
            print(f"  G-square tables: conditioning sets of at most {max_cond} variables (memory)", file=sys.stderr)
        graph, result, detail = learn_site_graph(
            config, frames, test=args.test, alpha=args.alpha, keep_fraction=args.keep_fraction,
            max_cond=max_cond, orientation=args.orientation,
        )  # fmt: skip
        payload = {**graph.to_dict(), "fedpc": detail}
        out.write("--out", json.dumps(payload, indent=2) + "\n")
        title = (
            f"FedPC over {len(frames)} sites: {result.n_variables} variables, {len(detail['directed'])} directed + "
            f"{len(detail['undirected'])} undirected edges ({args.orientation})"
        )
        out.write_with("--picture", lambda f: graph_picture(graph, f, title=title, fmt=picture.suffix))
    for layer in detail["layers"]:
        print(f"  layer {layer['layer']}: {layer['edges']} variable edges kept", file=sys.stderr)
    edges = [f"{a}->{b}" for a, b in graph.edges()]
    listed = ", ".join(edges[:12]) + (", ..." if len(edges) > 12 else "")
    print(f"wrote {args.out} ({len(edges)} plant edges: {listed}) and {picture}; {time.perf_counter() - started:.2f} s")
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
    parser.add_argument("--test", choices=["fisher-z", "g-square"], default="fisher-z", help="CI test")
    parser.add_argument("--alpha", type=float, default=0.01, help="significance level of every CI test")
    parser.add_argument(
        "--keep-fraction", type=float, default=0.3, help="keep an edge kept by more than this share of sites"
    )
    parser.add_argument("--max-cond", type=int, default=None, help="largest conditioning set (default: no limit)")
    parser.add_argument(
        "--orientation", choices=["cpdag", "dag"], default="cpdag",
        help="plant arcs from the CPDAG (undirected = both ways) or from its DAG extension",
    )  # fmt: skip
    parser.add_argument("--out", required=True, help="graph JSON to write (rca.graph.path)")
    parser.add_argument("--picture", help="PNG picture of the plant graph (default: OUT with .png)")
    parser.set_defaults(func=_graph)
