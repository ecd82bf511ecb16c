"""Run every benchmark of ``bench/`` (``make bench``).

Each ``bench/bench_*.py`` module provides ``main() -> int``; they run in name
order, each measuring fedrca next to a named peer in the same run. Pass module
names (``detect``, ``training``, ...) to run only those. ``--repeat N`` is handed to
the modules whose ``main`` takes a ``repeat`` (they report the median of N runs;
``make bench`` passes 3).

``--smoke`` runs each benchmark at tiny sizes through the same code path, to show that it
still runs (``tests/bench/test_smoke*.py`` do it in ``make test``): a module's ``SMOKE``
dict replaces its module-level sizes, and a ``main`` that takes ``smoke`` is told. Missed
targets are printed, not counted (tiny sizes say nothing about speed or accuracy); an
exception fails the run.

    python bench/run.py                       # all
    python bench/run.py detect                # only bench/bench_detect.py
    python bench/run.py --repeat 3 streams    # bench/bench_streams.py, median of 3 runs
    python bench/run.py --smoke               # every benchmark at tiny sizes
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import time
import traceback
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


def arguments(module: object, repeat: int, smoke: bool) -> dict[str, object]:
    """Keyword arguments for ``module.main`` (and the smoke sizes applied to ``module``).

    A ``main(argv=None)`` gets an empty argument list (it must not read this script's
    arguments); ``repeat`` and ``smoke`` go to the ``main`` functions that take them.
    """
    parameters = inspect.signature(module.main).parameters  # type: ignore[attr-defined]
    if smoke:
        for name, value in getattr(module, "SMOKE", {}).items():
            if not hasattr(module, name):
                raise SystemExit(f"bench: {module.__name__}.SMOKE names {name}, which the module does not have")
            setattr(module, name, value)
    kwargs: dict[str, object] = {}
    if "argv" in parameters:
        kwargs["argv"] = []
    if "repeat" in parameters:
        kwargs["repeat"] = repeat
    if smoke and "smoke" in parameters:
        kwargs["smoke"] = True
    return kwargs


def run_module(path: Path, repeat: int, smoke: bool) -> int:
    """Load ``bench/bench_<name>.py`` and run its ``main``; its exit code."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    # registered under its name, as an import would: dataclasses (and pickling) look the module up there
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    code = module.main(**arguments(module, repeat, smoke))
    return int(code or 0)


def main(argv: list[str]) -> int:
    """Run the benchmarks; non-zero when any of them reports a missed target."""
    parser = argparse.ArgumentParser(prog="bench/run.py", description="run the benchmarks of bench/")
    parser.add_argument("--repeat", type=int, default=1, help="runs whose median a benchmark reports (default 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, same code path, targets not counted")
    parser.add_argument("names", nargs="*", help="benchmark module names (default: all)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    failures: list[str] = []
    crashed: list[str] = []
    for path in discover(args.names):
        print(f"\n=== {path.stem}{' (smoke)' if args.smoke else ''} ===", flush=True)
        started = time.perf_counter()
        try:
            code = run_module(path, args.repeat, args.smoke)
        except SystemExit as exc:  # a benchmark that cannot run here says why in one line
            print(f"{path.stem}: could not run: {exc.code}")
            code = 1
            if args.smoke:  # at smoke sizes everything it needs is in the repository
                crashed.append(path.stem)
                continue
        except Exception:  # a crash is a bug of the benchmark: show where, go on with the others
            traceback.print_exc()
            print(f"--- {path.stem}: CRASHED ({time.perf_counter() - started:.1f} s)")
            crashed.append(path.stem)
            continue
        seconds = time.perf_counter() - started
        if args.smoke:
            print(
                f"--- {path.stem}: ran ({seconds:.1f} s{'' if code == 0 else '; targets not counted at smoke sizes'})"
            )
            continue
        print(f"--- {path.stem}: {'ok' if code == 0 else 'TARGET MISSED'} ({seconds:.1f} s)")
        if code:
            failures.append(path.stem)
    if crashed:
        print(f"\nbench: CRASHED: {', '.join(crashed)}")
    if failures:
        print(f"\nbench: targets missed in {', '.join(failures)}")
    return 1 if crashed or failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
