"""Many sites, workers joining and leaving (issue 32): ``tools/sites.py`` as a benchmark on the repo's broker.

``SITES`` sites of ``PLANTS`` plants each (the TEP process split into that many units) stream
at ``RATE`` rows per second per site on the benchmark broker (``bench_kafka.start_broker``:
the leased broker of ``tools/kafka/broker.py``); ``PLANT_WORKERS`` plant workers and
``RCA_WORKERS`` RCA workers serve all of them (``fedrca run --config ... --group``), the
sites' flags partitions spread over the RCA workers. A plant worker is added, then an RCA
worker is killed with ``kill -9``; the table gives, per event, the time until every
partition is served again and the produce -> verdict latency of the rows sent during the
rebalance, and the exactly-once check against the in-process replay (``tools/sites.py``
explains each figure).

Targets (issue 32): 0 lost, 0 duplicated, 0 different; every rebalance over within twice the
session timeout.

    python bench/run.py sites            # 10 sites x 10 plants, 3 + 2 workers (docs/sizing.md, "Many sites")
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SITES = 10
PLANTS = 10
PLANT_WORKERS = 3
RCA_WORKERS = 2
RATE = 20.0  # rows per second and site: 2,000 sensor messages/s over 10 x 10 plants
LEAD = 200  # rows before the first event and after each
SESSION_TIMEOUT = 10.0
SMOKE = {"SITES": 2, "PLANTS": 2, "PLANT_WORKERS": 1, "RCA_WORKERS": 2, "LEAD": 20, "SESSION_TIMEOUT": 6.0}


def main() -> int:
    """Print the scenario's table; 0 when both targets are met."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO))
    import logging

    from bench_kafka import release_broker, start_broker
    from tools import sites

    logging.getLogger("kafka").setLevel(logging.ERROR)
    plan = sites.Plan(
        sites=SITES,
        plants=PLANTS,
        plant_workers=PLANT_WORKERS,
        rca_workers=RCA_WORKERS,
        rate=RATE,
        session_timeout=SESSION_TIMEOUT,
        lead=LEAD,
    )
    bootstrap, _, _ = start_broker()
    try:
        with tempfile.TemporaryDirectory(prefix="fedrca-bench-sites-") as tmp:
            result = sites.run(plan, bootstrap, Path(tmp), log=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    finally:
        release_broker()
    print(sites.table(result))
    for problem in result.problems + result.first_problems:
        print(problem)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
