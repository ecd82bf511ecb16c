"""How far a fleet's consensus-agreed model is from its centralised twin (issue 18).

For a fleet configuration (default ``config/fleet-tep-sim.yaml``): the fleet's shared
model (``bench_fleet_library.fleet_model``, cached in ``$FEDRCA_CACHE/bench-fleet-library/``
keyed by the configuration, the data and the fleet's sources) next to

* the pooled exact standardiser of the same participants' raw data (two-pass numpy
  mean and ``std(ddof=1)``; constant columns get 1, as the fleet);
* ``fit_centralised`` with the same settings (exact sums instead of consensus).

Prints the standard deviations off by more than 0.1 % / 1e-6 relative, the largest
relative difference (and its variable), the largest precision difference and both
thresholds. Evidence for docs/fleet.md ("standardisation").

    nice -n 10 .venv/bin/python bench/fleet_twin.py --config config/fleet-tep.yaml
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fleet_library import CONFIG, fleet_model
from fedrca.application.fleet.config import load_fleet_config
from fedrca.application.fleet.sources import load_participants
from fedrca.exceptions import PrivacyWarning
from fedrca.fleet.collabdict import fit_centralised


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=CONFIG)
    args = parser.parse_args(argv)
    config = load_fleet_config(args.config)
    data, columns = load_participants(config)
    model, _ = fleet_model(config, args.config, data)
    pooled = np.vstack(list(data.values()))
    exact = pooled.std(axis=0, ddof=1)
    exact = np.where(exact > 1e-12 * np.maximum(np.abs(pooled.mean(axis=0)), 1.0), exact, 1.0)
    rel = np.abs(model.scale - exact) / exact
    worst = int(np.argmax(rel))
    print(f"{args.config}: {len(data)} participants, {len(pooled)} samples, {pooled.shape[1]} variables")
    print(f"std off by > 0.1 %: {int((rel > 1e-3).sum())}; by > 1e-6: {int((rel > 1e-6).sum())}")
    print(
        f"largest relative std difference {rel[worst]:.3g} on {columns[worst]} "
        f"(fleet {model.scale[worst]:.6g}, exact {exact[worst]:.6g})"
    )
    # the correctly rounded pooled mean (numpy's pairwise sum is off by ~1e-16 x the mean x log n)
    mean = np.array([math.fsum(col) / len(col) for col in pooled.T])
    shift = float(np.max(np.abs(model.center - mean) / exact))
    print(f"largest mean difference in exact std units {shift:.3g}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        twin = fit_centralised(list(data.values()), config.settings())
    if twin.model.precisions.shape == model.precisions.shape:
        diff = float(np.max(np.abs(twin.model.precisions - model.precisions)))
        top = float(np.abs(twin.model.precisions).max())
        print(f"precisions: largest difference {diff:.3g} (largest twin entry {top:.3g})")
    else:
        print(f"components differ: fleet {model.n_components}, twin {twin.model.n_components}")
    print(f"threshold: fleet {model.threshold:.6g}, twin {twin.model.threshold:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
