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
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from fedrca import __version__
from fedrca.exceptions import FedrcaError

if TYPE_CHECKING:
    from fedrca.config import SiteConfig

__all__ = [
    "BROKEN_PIPE",
    "COMMANDS",
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

#: Every sub-command and the module whose ``register(subparsers)`` adds it. A command line that names
#: one imports only that module (start-up cost: a worker does not load the OPC UA server nor the fleet's
#: learner, ``tests/cli/test_cli.py::test_a_command_imports_only_its_own_module``); ``fedrca --help`` and
#: anything else imports them all. ``tests/cli/test_cli.py::test_the_command_table_is_every_command``
#: keeps the table and the modules in step.
COMMANDS: dict[str, str] = {
    "detect": "fedrca.cli.detect",
    "train": "fedrca.cli.train",
    "replay": "fedrca.cli.replay",
    "evaluate": "fedrca.cli.replay",
    "demo": "fedrca.cli.demo",
    "run": "fedrca.cli.run",
    "publish-params": "fedrca.cli.run",
    "replay-to-kafka": "fedrca.cli.run",
    "simulate": "fedrca.cli.simulate",
    "edge": "fedrca.cli.edge",
    "graph": "fedrca.cli.graph",
    "fleet": "fedrca.cli.fleet",
    "whatif": "fedrca.cli.whatif",
    "baseline": "fedrca.cli.baseline",
}
#: The modules of the sub-commands, in the order ``fedrca --help`` lists them.
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line too (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, " ".join(f"{self.prog}: error: {message}; see {self.prog} --help".split()) + "\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every sub-command, or only ``command``'s module's when it is one of
    :data:`COMMANDS` (what :func:`main` does when the command line starts with it)."""
    parser = _Parser(
        prog="fedrca", description="Federated, privacy-preserving root cause analysis for interdependent plants."
    )
    parser.add_argument("--version", action="version", version=f"fedrca {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES
    for module_name in modules:
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
    entered = time.time()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    # when the interpreter was up and the command's modules not yet imported: a worker's start-up
    # timeline (fedrca.streams.startup) tells the two apart
    args.entered_at = entered
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
