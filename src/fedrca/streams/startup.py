"""A worker's start-up timeline: when each step of its start was over, in seconds since the process started.

A worker killed and started again by its supervisor serves nothing until its process has started,
imported its modules, read its configuration, loaded (or fitted) its detectors, read the published
parameters, joined its consumer groups and taken its partitions over (fenced the dead process's
producers, read the committed state back). :class:`StartupTimeline` records when each of those steps
was over and the worker logs them at INFO once it serves (``fedrca run --log-level info``), so an
operator sees where a restart goes (docs/streams.md, "A worker started again"): one line, each step
with the seconds it added and when it was over, e.g.::

    start-up (s since the process started): interpreter +0.06 = 0.06, imports +1.62 = 1.68, ...

Steps that run at the same time (the published parameters are read while the groups are joined and the
partitions taken) are listed in the order they ended; each adds the seconds since the one before it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["STANDBY", "StartupTimeline", "process_started"]

#: The step of a hot standby (``fedrca run --standby``): over when it holds its worker's lock, i.e. takes over.
STANDBY = "standby"


def process_started() -> float | None:
    """Wall-clock time (s since the epoch) the running process started, from ``/proc`` (None elsewhere).

    ``/proc/self/stat`` gives the start in clock ticks since boot and ``/proc/uptime`` the seconds since
    boot now (both 10 ms resolution): the process's age is their difference.
    """
    try:
        stat = Path("/proc/self/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        # the fields after the command name (which may hold spaces and parentheses): the 22nd is starttime
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[19])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - max(0.0, age)


class StartupTimeline:
    """When each step of a worker's start was over (see the module docstring).

    Parameters
    ----------
    origin : wall-clock time the timeline counts from (default: the process's start, else now)
    """

    def __init__(self, origin: float | None = None) -> None:
        if origin is None:
            origin = process_started()
        self.origin = time.time() if origin is None else origin
        self.marks: list[tuple[str, float]] = []

    def mark(self, step: str, at: float | None = None) -> None:
        """Step ``step`` is over (``at``: wall-clock time it was over, default now). A step marked again (a
        worker of several sites reads each site's configuration, ...) counts when it was over last."""
        self.marks = [(name, when) for name, when in self.marks if name != step]
        self.marks.append((step, time.time() if at is None else at))

    def has(self, step: str) -> bool:
        """Whether ``step`` was marked."""
        return any(name == step for name, _ in self.marks)

    def at(self, step: str) -> float | None:
        """Wall-clock time ``step`` was over (None: not marked).

        Examples
        --------
        >>> t = StartupTimeline(origin=100.0)
        >>> t.mark(STANDBY, at=160.0)
        >>> t.at(STANDBY), t.at("imports")
        (160.0, None)
        """
        return next((when for name, when in self.marks if name == step), None)

    def steps(self) -> list[tuple[str, float, float]]:
        """``(step, seconds it added, seconds since the origin when it was over)``, in the order they ended."""
        out = []
        before = 0.0
        for name, at in sorted(self.marks, key=lambda m: m[1]):
            since = at - self.origin
            out.append((name, since - before, since))
            before = since
        return out

    def line(self) -> str:
        """The timeline as one line (module docstring).

        Examples
        --------
        >>> t = StartupTimeline(origin=100.0)
        >>> t.mark("imports", at=101.5); t.mark("configuration", at=101.75)
        >>> t.line()
        'start-up (s since the process started): imports +1.50 = 1.50, configuration +0.25 = 1.75'
        """
        steps = ", ".join(f"{name} +{took:.2f} = {since:.2f}" for name, took, since in self.steps())
        return f"start-up (s since the process started): {steps}"
