"""The ``fedrca`` command line: the application shell.

Every sub-command lives in its own module of this package and registers itself
(:data:`COMMAND_MODULES`): ``detect``, ``train``, ``replay`` / ``evaluate``,
``demo``, ``run`` / ``replay-to-kafka`` / ``publish-params``, ``simulate``, ``graph``, ``fleet``,
``whatif``. Every handler returns an exit code; errors are translated here, once: a :class:`FedrcaError` becomes
one clear line on stderr and exit code 2, never a traceback. The line is one line whatever the
message holds (line breaks of a library's text become spaces) and at most :data:`MAX_ERROR_LINE`
characters: an echoed value that would make it longer is elided in the middle, so the line keeps
the option or key it starts with and the fix it ends with.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from fedrca import __version__
from fedrca.exceptions import FedrcaError

__all__ = ["COMMAND_MODULES", "MAX_ERROR_LINE", "build_parser", "error_line", "main"]

#: Longest error line printed (a few terminal lines: room for two paths, the problem and the fix).
MAX_ERROR_LINE = 600

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
    "fedrca.cli.fleet",
    "fedrca.cli.whatif",
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line too (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, " ".join(f"{self.prog}: error: {message}; see {self.prog} --help".split()) + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = _Parser(
        prog="fedrca", description="Federated, privacy-preserving root cause analysis for interdependent plants."
    )
    parser.add_argument("--version", action="version", version=f"fedrca {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def error_line(command: str, exc: BaseException) -> str:
    """``fedrca <command>: error: <message>`` as one printable line of at most :data:`MAX_ERROR_LINE` characters.

    Examples
    --------
    >>> line = error_line("graph", ValueError("--split: " + "x" * 3000 + "; give --split at most 3"))
    >>> len(line) <= MAX_ERROR_LINE, line.endswith("give --split at most 3"), line.startswith("fedrca graph")
    (True, True, True)
    """
    text = " ".join(str(exc).split())
    line = "".join(c if c.isprintable() else "?" for c in f"fedrca {command}: error: {text}")
    if len(line) > MAX_ERROR_LINE:
        keep = (MAX_ERROR_LINE - 5) // 2
        line = f"{line[:keep]} ... {line[-keep:]}"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedrca`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except FedrcaError as exc:
        print(error_line(args.command, exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fedrca {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
