"""Everything fedrca relies on in Faust and aiokafka beyond their documented basics, in one place, with version guards.

* Faust hosts a worker (lifecycle, signals, logging, the event loop) but does no Kafka
  I/O of its own: :class:`FedrcaApp` boots with Faust's ``BootStrategy`` switched to
  ``enable_kafka = False`` (the documented way to change what an app starts), so no
  Faust consumer, producer, leader topic or table is created; the workers' Kafka I/O
  is fedrca's transactional loop (:mod:`fedrca.streams.loop`) on aiokafka's public
  API (consumer groups, ``getmany``, transactional producers).
* aiokafka's transactional producer commits offsets with ``send_offsets_to_transaction``
  (group id only, the pre-KIP-447 protocol): fencing is by transactional id, one per
  input partition (:mod:`fedrca.streams.loop`).
* A static member (``group_instance_id``, KIP-345) of aiokafka never sends ``LeaveGroup``
  when it stops, so its partitions would wait the session timeout after every clean stop
  (a scale-down, a rollout). :func:`fedrca.streams.loop.leave_on_stop` clears the id on the
  consumer's coordinator (a private attribute) just before ``stop()``, which then leaves the
  group by member id as a dynamic member's does: only a process that dies without stopping
  keeps its place (``tests/streams/test_static_member.py``).

:data:`SUPPORTED` lists the versions these were checked against; a different version is
refused at import with one clear line (the pins in ``pyproject.toml`` keep installs inside).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version

import faust
from faust.app.base import BootStrategy

from fedrca.exceptions import ConfigError

__all__ = ["SUPPORTED", "FedrcaApp", "check_versions"]

#: Distribution -> (lowest, first unsupported) version.
SUPPORTED: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "faust-streaming": ((0, 15, 2), (0, 16)),
    "aiokafka": ((0, 12), (0, 15)),
}


def _parse(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_versions(installed: Mapping[str, str] | None = None) -> None:
    """Refuse Faust / aiokafka versions fedrca has not been checked against.

    Raises
    ------
    ConfigError
        Naming the distribution, its version and the supported range.

    Examples
    --------
    >>> check_versions({"faust-streaming": "0.15.3", "aiokafka": "0.14.0"})
    >>> check_versions({"faust-streaming": "0.17.0", "aiokafka": "0.14.0"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fedrca.exceptions.ConfigError: faust-streaming 0.17.0 is not supported ... (>= 0.15.2, < 0.16); ...
    """
    for dist, (low, high) in SUPPORTED.items():
        text = (installed or {}).get(dist) if installed is not None else version(dist)
        if text is None:
            continue
        found = _parse(text)
        if not low <= found < high:
            lo, hi = ".".join(map(str, low)), ".".join(map(str, high))
            raise ConfigError(
                f"{dist} {text} is not supported by fedrca.streams.compat (>= {lo}, < {hi}); "
                f"install a supported version: pip install '{dist}>={lo},<{hi}'"
            )


check_versions()


class _HostOnly(BootStrategy):
    """Faust starts the app's services and tasks, and no Kafka client, sensor or table of its own."""

    enable_kafka = False
    enable_sensors = False


class FedrcaApp(faust.App):
    """A Faust app that hosts fedrca's workers (see the module docstring)."""

    BootStrategy = _HostOnly
