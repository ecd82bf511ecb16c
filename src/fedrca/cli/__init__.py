"""The ``fedrca`` command line: the application shell.

Every sub-command lives in its own module of this package and registers itself
(:data:`COMMAND_MODULES`): ``detect``, ``train``, ``replay`` / ``evaluate``,
``demo``, ``run`` / ``replay-to-kafka`` / ``publish-params``, ``simulate``, ``graph``, ``fleet``. Every handler returns
an exit code; errors are translated here, once: a :class:`FedrcaError` becomes
one clear line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from fedrca import __version__
from fedrca.exceptions import FedrcaError

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: The modules of the sub-commands; each has ``register(subparsers)``. They are imported when the
#: parser is built (start-up cost: a command imports only what the CLI needs to list them).
COMMAND_MODULES = (
    "fedrca.cli.detect",
    "fedrca.cli.train",
    "fedrca.cli.replay",
    "fedrca.cli.demo",
    "fedrca.cli.run",
    "fedrca.cli.simulate",
    "fedrca.cli.graph",
    "fedrca.cli.fleet.commands",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="fedrca", description="Federated, privacy-preserving root cause analysis for interdependent plants."
    )
    parser.add_argument("--version", action="version", version=f"fedrca {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedrca`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except FedrcaError as exc:
        print(f"fedrca {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fedrca {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
