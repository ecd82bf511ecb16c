"""Run every benchmark of ``bench/`` (``make bench``).

Each ``bench/bench_*.py`` module provides ``main() -> int``; they run in name
order, each measuring fedrca next to a named peer in the same run. Pass module
names (``detect``, ``training``, ...) to run only those. ``--repeat N`` is handed to
the modules whose ``main`` takes a ``repeat`` (they report the median of N runs;
``make bench`` passes 3).

    python bench/run.py                       # all
    python bench/run.py detect                # only bench/bench_detect.py
    python bench/run.py --repeat 3 streams    # bench/bench_streams.py, median of 3 runs
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover(selected: list[str]) -> list[Path]:
    """The benchmark modules to run, in name order."""
    modules = sorted(HERE.glob("bench_*.py"))
    if selected:
        wanted = {f"bench_{name.removeprefix('bench_').removesuffix('.py')}.py" for name in selected}
        unknown = wanted - {m.name for m in modules}
        if unknown:
            names = ", ".join(m.stem.removeprefix("bench_") for m in modules)
            raise SystemExit(f"bench: unknown benchmark(s) {sorted(unknown)}; available: {names}")
        modules = [m for m in modules if m.name in wanted]
    return modules


def main(argv: list[str]) -> int:
    """Run the benchmarks; non-zero when any of them reports a missed target."""
    parser = argparse.ArgumentParser(prog="bench/run.py", description="run the benchmarks of bench/")
    parser.add_argument("--repeat", type=int, default=1, help="runs whose median a benchmark reports (default 1)")
    parser.add_argument("names", nargs="*", help="benchmark module names (default: all)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    failures = []
    for path in discover(args.names):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"bench: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"\n=== {path.stem} ===", flush=True)
        started = time.perf_counter()
        takes_repeat = "repeat" in inspect.signature(module.main).parameters
        code = module.main(repeat=args.repeat) if takes_repeat else module.main()
        print(f"--- {path.stem}: {'ok' if code == 0 else 'TARGET MISSED'} ({time.perf_counter() - started:.1f} s)")
        if code:
            failures.append(path.stem)
    if failures:
        print(f"\nbench: targets missed in {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
