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
import os
import sys
import time
from pathlib import Path

from fedrca.application.graph import learn_site_graph, prepare_graph
from fedrca.application.outputs import Outputs
from fedrca.cli.report import graph_picture
from fedrca.config import load_config
from fedrca.config.causal import MAX_EPSILON
from fedrca.exceptions import DataError

__all__ = ["PICTURE_FORMATS", "check_options", "register"]

#: File name endings of the graph picture (the formats it is drawn in).
PICTURE_FORMATS = (".png", ".svg", ".pdf")


def check_options(
    alpha: float | None,
    keep_fraction: float | None,
    max_cond: int | None,
    split: int,
    *,
    epsilon: float | None = None,
    clip: float | None = None,
) -> None:
    """Refuse option values FedPC has no meaning for (one line naming the option and the valid range).

    None = the option was left out (the config's ``causal:`` section decides).
    """
    if alpha is not None and not 0.0 < alpha < 1.0:
        raise DataError(f"--alpha must be in (0, 1), got {alpha}")
    if keep_fraction is not None and not 0.0 <= keep_fraction < 1.0:
        raise DataError(f"--keep-fraction must be in [0, 1), got {keep_fraction}")
    if max_cond is not None and max_cond < 0:
        raise DataError(f"--max-cond must be >= 0, got {max_cond}")
    if split < 1:
        raise DataError(f"--split must be >= 1, got {split}")
    if epsilon is not None and not (0.0 < epsilon <= MAX_EPSILON or epsilon == math.inf):
        raise DataError(f"--epsilon must be > 0 and at most {MAX_EPSILON:g} (inf = exact statistics), got {epsilon}")
    if clip is not None and not 0.0 < clip <= 100.0:
        raise DataError(f"--clip must be in (0, 100] (standard deviations per variable), got {clip}")


def _graph(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    check_options(args.alpha, args.keep_fraction, args.max_cond, args.split, epsilon=args.epsilon, clip=args.clip)
    if Path(args.out).suffix.lower() in PICTURE_FORMATS:
        # the graph is JSON; its default picture (OUT with .png) would be this very file
        raise DataError(
            f"--out {args.out} names a picture; --out is the graph's JSON (rca.graph.path): give --out "
            f"{Path(args.out).with_suffix('.json')} (its picture is drawn beside it, or where --picture says)"
        )
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
        overrides = {key: value for key, value in options.items() if value is not None}
        config, frames, overrides, settings = prepare_graph(config, args.sites, args.split, overrides)
        max_cond = overrides.get("max_cond", settings.max_cond)
        sizes = [str(len(f)) for _, f in frames]
        shown = ", ".join(sizes[:6]) + (f", ... ({len(sizes)} sites)" if len(sizes) > 6 else "")
        print(f"FedPC ({settings.mode}) over {len(frames)} sites ({shown} samples) ...", file=sys.stderr)
        if max_cond != settings.max_cond:
            print(f"  G-square tables: conditioning sets of at most {max_cond} variables (memory)", file=sys.stderr)
        graph, result, detail = learn_site_graph(config, frames, **overrides)
        payload = {**graph.to_dict(), "fedpc": detail}
        out.write("--out", json.dumps(payload, indent=2) + "\n")
        title = (
            f"FedPC ({detail['mode']}) over {len(frames)} sites: {result.n_variables} variables, "
            f"{len(detail['directed'])} directed + {len(detail['undirected'])} undirected edges "
            f"({detail['orientation']})"
        )
        out.write_with("--picture", lambda f: graph_picture(graph, f, title=title, fmt=picture.suffix))
    for layer in detail["layers"]:
        print(f"  layer {layer['layer']}: {layer['edges']} variable edges kept", file=sys.stderr)
    if detail["privacy"] is not None:
        spent = max(detail["privacy"]["spent_epsilon"])
        print(f"  privacy: epsilon {spent:.3g} per site (delta {detail['privacy']['delta']:g})", file=sys.stderr)
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
