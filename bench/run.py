"""Run every benchmark of ``bench/`` (``make bench``).

Each ``bench/bench_*.py`` module provides ``main() -> int``; they run in name
order, each measuring fedrca next to a named peer in the same run. Pass module
names (``detect``, ``training``, ...) to run only those.

    python bench/run.py            # all
    python bench/run.py detect     # only bench/bench_detect.py
"""

from __future__ import annotations

import importlib.util
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
    sys.path.insert(0, str(HERE))
    failures = []
    for path in discover(argv):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"bench: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"\n=== {path.stem} ===", flush=True)
        started = time.perf_counter()
        code = module.main()
        print(f"--- {path.stem}: {'ok' if code == 0 else 'TARGET MISSED'} ({time.perf_counter() - started:.1f} s)")
        if code:
            failures.append(path.stem)
    if failures:
        print(f"\nbench: targets missed in {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
