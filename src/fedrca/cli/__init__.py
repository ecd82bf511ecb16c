"""The ``fedrca`` command line: the application shell.

Every sub-command lives in its own module of this package and registers itself
(:data:`COMMAND_MODULES`): ``detect``, ``train``, ``replay`` / ``evaluate``,
``demo``, ``run`` / ``replay-to-kafka`` / ``publish-params``, ``simulate``, ``edge``, ``graph``, ``fleet``,
``whatif``, ``baseline``. Every handler returns an exit code; errors are translated here, once: a
:class:`FedrcaError` becomes one clear line on stderr and exit code 2, never a traceback; a reader of
stdout that goes away (``| head -1``) ends the command quietly with :data:`BROKEN_PIPE`; SIGTERM ends it
as Ctrl-C does (its stages and temporary files removed), exit code :data:`TERMINATED`. The line is one line whatever the
message holds (line breaks of a library's text become spaces) and at most :data:`MAX_ERROR_LINE`
characters: an echoed value that would make it longer is elided in the middle, so the line keeps
the option or key it starts with and the fix it ends with.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from fedrca import __version__
from fedrca.exceptions import FedrcaError

if TYPE_CHECKING:
    from fedrca.config import SiteConfig

__all__ = [
    "BROKEN_PIPE",
    "COMMAND_MODULES",
    "MAX_ERROR_LINE",
    "TERMINATED",
    "build_parser",
    "error_line",
    "main",
    "privacy_notice",
]

#: Exit code of a command ended by SIGTERM (128 + 15), after its cleanup.
TERMINATED = 143
#: Exit code when stdout's reader went away: what a shell reports for a program ended by SIGPIPE (128 + 13).
BROKEN_PIPE = 141
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
    "fedrca.cli.edge",
    "fedrca.cli.graph",
    "fedrca.cli.fleet",
    "fedrca.cli.whatif",
    "fedrca.cli.baseline",
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


#: What :func:`privacy_notice` has to say when the command ends well (printed by :func:`main`).
_PENDING: list[str] = []


def privacy_notice(command: str, config: SiteConfig, *, training: bool = False, now: bool = False) -> None:
    """Say on stderr which settings switch privacy off (nothing when none does).

    Off is never the effect of a typo: the configuration spells it out (:meth:`SiteConfig.privacy_off`),
    and the output says so: at once with ``now`` (a worker that runs until stopped, the demo's
    header), else when the command has done its work (:func:`main`; a refused command prints its
    one error line only).
    """
    off = config.privacy_off(training=training)
    if not off:
        return
    line = f"fedrca {command}: privacy: {off}"
    if now:
        print(line, file=sys.stderr, flush=True)
    elif line not in _PENDING:
        _PENDING.append(line)


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


class Terminated(BaseException):
    """SIGTERM arrived: raised where the command is, so every stage and temporary file is cleaned up as for
    Ctrl-C (a BaseException, as KeyboardInterrupt: no ``except Exception`` of a command swallows it)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _on_sigterm() -> Any:
    """Make SIGTERM end the command as SIGINT does (``tests/cli/test_signals_and_locks.py``); the previous
    handler, or None off the main thread (where Python cannot set one)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _terminate)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedrca`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    _PENDING.clear()
    previous = _on_sigterm()
    try:
        code = func(args)
        for line in _PENDING:
            print(line, file=sys.stderr, flush=True)
        return code
    except FedrcaError as exc:
        print(error_line(args.command, exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fedrca {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"fedrca {args.command}: terminated", file=sys.stderr)
        return TERMINATED
    except BrokenPipeError:
        # the reader of stdout went away (``fedrca whatif ... | head -1``): quiet, as a program that a SIGPIPE
        # ended; stdout goes to /dev/null so the interpreter's flush at exit cannot fail a second time
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
