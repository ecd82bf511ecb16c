"""A real OPC UA server (asyncua's) exposing a plant's columns as tags: the simulated plant's server.

``fedrca simulate --to opcua://HOST:PORT`` serves the TEP simulator's 52 columns from it,
the tests and the benchmark start it in process. Each column is a ``Double`` variable
with node id ``nsu=<namespace>;s=<column>`` under ``Objects/<folder>/<column>`` (browse
path), written with a source timestamp and a status code; a value of None is written with
status ``BadNoCommunication``.

:class:`Imperfections` are what a real plant's server does to its data, injected on
purpose (``--imperfect``): dropouts (a tag is not written for a sample), Bad quality,
stuck values (a tag keeps its value), jitter (a write comes late), clock skew (source
timestamps off by a constant) and a server restart.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from asyncua import Server, ua
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.server.user_managers import UserManager

from fedrca.exceptions import ConfigError

__all__ = [
    "SIM_NAMESPACE",
    "Imperfections",
    "PasswordUsers",
    "Served",
    "TagServer",
    "address_space_cache",
    "parse_opcua_address",
    "serve_rows",
]

#: Namespace URI of the simulated plant's tags.
SIM_NAMESPACE = "urn:fedrca:tep-simulator"

log = logging.getLogger("fedrca.edge.opcua_server")

for _noisy in ("asyncua.server", "asyncua.common", "asyncua.uaprotocol"):
    # the library logs every session and subscription at INFO/WARNING; the server's own log says what matters
    logging.getLogger(_noisy).setLevel(logging.ERROR)


def parse_opcua_address(text: str, key: str = "--to") -> tuple[str, int]:
    """``opc.tcp://HOST:PORT`` or ``opcua://HOST:PORT`` -> (host, port).

    Examples
    --------
    >>> parse_opcua_address("opcua://127.0.0.1:4840")
    ('127.0.0.1', 4840)
    """
    match = re.fullmatch(r"(?:opcua|opc\.tcp)://([A-Za-z0-9.\-\[\]:]+?):(\d{1,5})/?", text.strip())
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ConfigError(f"{text!r} is not an OPC UA address; write opcua://HOST:PORT (port 1..65535)", key=key)
    return match.group(1), int(match.group(2))


def address_space_cache() -> Path:
    """asyncua's standard address space as a shelf under ``$FEDRCA_CACHE`` (made once; then a server starts in ~1 s).

    Building the standard address space takes asyncua 5-20 s of pure Python at every start; its
    shelf loads it lazily. The shelf is made in a private directory and moved into place whole, so
    two processes making it at once never see a half-written one. asyncua looks for the shelf
    file itself (``<name>`` or ``<name>.db``) while Python's fallback ``dbm.dumb`` writes
    ``<name>.dat`` / ``.dir``: an empty ``<name>`` marks the shelf complete.
    """
    root = Path(os.environ.get("FEDRCA_CACHE") or Path.home() / ".cache" / "fedrca")
    final = root / f"asyncua-{version('asyncua')}"
    shelf = final / "standard-address-space"
    if shelf.is_file():
        return shelf
    root.mkdir(parents=True, exist_ok=True)
    return shelf


async def _init(server: Server) -> None:
    """``server.init()`` from the address-space shelf, making the shelf first when missing."""
    shelf = address_space_cache()
    if shelf.is_file():
        await server.init(shelf)
        return
    log.info("building asyncua's standard address space once (cached in %s)", shelf.parent)
    work = Path(tempfile.mkdtemp(prefix=".aspace-", dir=shelf.parent.parent))
    try:
        await server.init(work / shelf.name)  # asyncua writes the shelf while it builds the space
        copy = Path(tempfile.mkdtemp(prefix=".aspace-copy-", dir=shelf.parent.parent))
        for item in work.iterdir():
            shutil.copy2(item, copy / item.name)
        (copy / shelf.name).touch()
        try:
            copy.rename(shelf.parent)
        except OSError:  # made meanwhile by another process: keep theirs
            shutil.rmtree(copy, ignore_errors=True)
    finally:
        # the server reads its space lazily from the work shelf: drop it when the process ends
        _LEFTOVERS.append(work)


#: shelves built by this process (read lazily by its first server; removed at exit)
_LEFTOVERS: list[Path] = []


def _cleanup() -> None:
    for path in _LEFTOVERS:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_cleanup)


def _string_node(name: str, ns: int) -> ua.NodeId:
    return ua.NodeId(ua.String(name), ua.Int16(ns), ua.NodeIdType.String)


class PasswordUsers(UserManager):
    """Users by name and password (anything else is refused)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = dict(users)

    def get_user(
        self, iserver: Any, username: str | None = None, password: str | None = None, certificate: Any = None
    ) -> User | None:
        if username is not None and self.users.get(username) == password:
            return User(role=UserRole.User, name=username)
        return None


class TagServer:
    """An asyncua server with one ``Double`` variable per column (see the module docstring).

    Parameters
    ----------
    columns : the tag names (node id strings)
    host, port : where it listens (port 0: any free one; :attr:`port` says which after :meth:`start`)
    namespace : the namespace URI of the tags
    folder : the object under Objects that holds them
    users : user -> password; None: anonymous access
    """

    def __init__(
        self,
        columns: Sequence[str],
        host: str = "127.0.0.1",
        port: int = 0,
        namespace: str = SIM_NAMESPACE,
        folder: str = "Plant",
        users: Mapping[str, str] | None = None,
    ) -> None:
        self.columns = list(columns)
        self.host = host
        self.port = port
        self.namespace = namespace
        self.folder = folder
        self.users = users
        self.server: Server | None = None
        self.nodes: dict[str, ua.NodeId] = {}
        self.ns = 0

    @property
    def url(self) -> str:
        """``opc.tcp://host:port`` of the running server."""
        return f"opc.tcp://{self.host}:{self.port}"

    async def start(self) -> None:
        """Build the address space and listen (on the same port again after :meth:`stop`)."""
        server = Server(user_manager=PasswordUsers(self.users) if self.users is not None else None)
        await _init(server)
        server.set_endpoint(f"opc.tcp://{self.host}:{self.port}")
        server.set_server_name("fedrca simulated plant")
        server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        if self.users is not None:
            server.set_security_IDs(["Username"])
        self.ns = await server.register_namespace(self.namespace)
        folder = await server.nodes.objects.add_object(
            _string_node(self.folder, self.ns), ua.QualifiedName(self.folder, self.ns)
        )
        self.nodes = {}
        for column in self.columns:
            node_id = _string_node(column, self.ns)
            variable = await folder.add_variable(node_id, ua.QualifiedName(column, self.ns), 0.0, ua.VariantType.Double)
            self.nodes[column] = variable.nodeid
        await server.start()
        self.port = server.bserver.port if server.bserver is not None else self.port
        self.server = server

    async def stop(self) -> None:
        """Stop listening (connected clients see their connection drop)."""
        if self.server is not None:
            server, self.server = self.server, None
            await server.stop()

    async def write(
        self,
        values: Mapping[str, float | None],
        ts: float,
        status: Mapping[str, int] | None = None,
    ) -> None:
        """Write each column's value stamped ``ts`` (s since the epoch); ``status`` overrides Good per column."""
        assert self.server is not None, "start() the server first"
        stamp = ua.DateTime.fromtimestamp(ts, UTC)
        iserver = self.server.iserver
        for column, value in values.items():
            code = (status or {}).get(column, ua.StatusCodes.Good)
            if value is None or not math.isfinite(value):
                code = code if code != ua.StatusCodes.Good else ua.StatusCodes.BadNoCommunication
                variant = ua.Variant(None, ua.VariantType.Null)
            else:
                variant = ua.Variant(float(value), ua.VariantType.Double)
            dv = ua.DataValue(
                variant, StatusCode=ua.StatusCode(ua.UInt32(code)), SourceTimestamp=stamp, ServerTimestamp=stamp
            )
            await iserver.write_attribute_value(self.nodes[column], dv)

    async def __aenter__(self) -> TagServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@dataclass(frozen=True)
class Imperfections:
    """What a real server does to the data, injected (rates are per tag and sample).

    ``dropout``: the tag is not written this sample; ``bad``: written with status
    ``BadSensorFailure``; ``stuck``: the tag keeps its last value for ``stuck_samples``
    samples; ``jitter``: each sample's writes are delayed by up to this many seconds;
    ``skew``: source timestamps are this many seconds off; ``restart_at``: the server
    is stopped after this sample and started again ``restart_seconds`` later.

    Examples
    --------
    >>> spec = Imperfections.parse("dropout=0.01,bad=0.02,skew=-3,restart=100")
    >>> spec.dropout, spec.bad, spec.skew, spec.restart_at
    (0.01, 0.02, -3.0, 100)
    """

    dropout: float = 0.0
    bad: float = 0.0
    stuck: float = 0.0
    stuck_samples: int = 10
    jitter: float = 0.0
    skew: float = 0.0
    restart_at: int | None = None
    restart_seconds: float = 3.0
    seed: int = 0

    _KEYS: ClassVar[dict[str, str]] = {
        "dropout": "dropout", "bad": "bad", "stuck": "stuck", "stuck_samples": "stuck_samples",
        "jitter": "jitter", "skew": "skew", "restart": "restart_at", "restart_seconds": "restart_seconds",
        "seed": "seed",
    }  # fmt: skip

    @classmethod
    def parse(cls, text: str | None, key: str = "--imperfect") -> Imperfections:
        """``name=value`` pairs separated by commas (names: dropout, bad, stuck, stuck_samples, jitter,
        skew, restart, restart_seconds, seed)."""
        if not text:
            return cls()
        fields: dict[str, Any] = {}
        for part in text.split(","):
            name, eq, raw = part.strip().partition("=")
            if not eq or name not in cls._KEYS:
                raise ConfigError(
                    f"{part!r}: write name=value with names {', '.join(cls._KEYS)} (e.g. dropout=0.01,restart=200)",
                    key=key,
                )
            try:
                number = float(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a number", key=key) from None
            if not math.isfinite(number):
                raise ConfigError(f"{name}={raw} must be finite", key=key)
            fields[cls._KEYS[name]] = number
        for name in ("dropout", "bad", "stuck"):
            if not 0.0 <= fields.get(name, 0.0) <= 1.0:
                raise ConfigError(f"{name} is a rate per tag and sample in [0, 1]", key=key)
        for name in ("jitter", "restart_seconds"):
            if not 0.0 <= fields.get(name, 0.0) <= 3600.0:
                raise ConfigError(f"{name} is in 0..3600 seconds", key=key)
        for name in ("stuck_samples", "restart_at", "seed"):
            if name in fields:
                if fields[name] != int(fields[name]) or fields[name] < 0:
                    raise ConfigError(f"{name} is a non-negative integer", key=key)
                fields[name] = int(fields[name])
        return cls(**fields)

    @property
    def any(self) -> bool:
        """True when something is injected."""
        return bool(self.dropout or self.bad or self.stuck or self.jitter or self.skew or self.restart_at is not None)


class Imperfect:
    """Applies :class:`Imperfections` to a stream of rows (seeded: the same rows get the same faults)."""

    def __init__(self, spec: Imperfections, columns: Sequence[str]) -> None:
        self.spec = spec
        self.columns = list(columns)
        self._rng = np.random.default_rng(spec.seed)
        self._stuck_left = np.zeros(len(self.columns), dtype=np.int64)
        self._last = np.full(len(self.columns), np.nan)
        self.dropped = self.bad = self.stuck = 0

    def apply(self, row: Sequence[float]) -> tuple[dict[str, float | None], dict[str, int]]:
        """The writes of one sample (column -> value) and their status codes (column -> code, non-Good only)."""
        spec, n = self.spec, len(self.columns)
        values = np.asarray(row, dtype=np.float64).copy()
        u = self._rng.random((3, n))
        start = (u[2] < spec.stuck) & (self._stuck_left == 0)
        self._stuck_left[start] = spec.stuck_samples
        held = self._stuck_left > 0
        values[held & ~np.isnan(self._last)] = self._last[held & ~np.isnan(self._last)]
        self._stuck_left[held] -= 1
        self.stuck += int(held.sum())
        self._last = values.copy()
        drop = u[0] < spec.dropout
        bad = (u[1] < spec.bad) & ~drop
        self.dropped += int(drop.sum())
        self.bad += int(bad.sum())
        kept = zip(self.columns, values, drop, strict=True)
        writes: dict[str, float | None] = {c: float(v) for c, v, d in kept if not d}
        status = {c: ua.StatusCodes.BadSensorFailure for c, b in zip(self.columns, bad, strict=True) if b}
        return writes, status

    def delay(self) -> float:
        """This sample's jitter, s."""
        return float(self._rng.uniform(0.0, self.spec.jitter)) if self.spec.jitter > 0 else 0.0


async def serve_forever(server: TagServer) -> None:
    """Keep ``server`` up until cancelled (for a server with nothing to write)."""
    try:
        while True:
            await asyncio.sleep(3600)
    finally:
        await server.stop()


@dataclass
class Served:
    """What :func:`serve_rows` did: rows written, the grid index of the first row, restarts."""

    rows: int = 0
    first_slot: int | None = None
    restarts: int = 0
    max_lag: float = 0.0


async def serve_rows(
    server: TagServer,
    rows: Any,
    period: float,
    imperfections: Imperfections | None = None,
    clock: Any = None,
    on_row: Any = None,
) -> Served:
    """Write ``rows`` (an iterable of (k, values) in ``server.columns`` order), one every ``period`` seconds.

    Row k is written in the middle of the sample interval of an edge whose clock has this
    ``period`` (at ``(first_slot + k + 0.5) * period`` seconds since the epoch), stamped with its
    write time (plus ``skew``): an edge closes it as row ``seq = first_slot + k + 1`` whatever the
    jitter below half a period plus the edge's grace. Imperfections are applied as
    written; the server restarts after sample ``restart_at``.
    """
    spec = imperfections or Imperfections()
    imperfect = Imperfect(spec, server.columns)
    now = clock or time.time
    served = Served()
    start = math.ceil(now() / period) + 1
    served.first_slot = start
    for k, values in rows:
        due = (start + k + 0.5) * period
        wait = due - now()
        if wait > 0:
            await asyncio.sleep(wait)
        else:
            served.max_lag = max(served.max_lag, -wait)
        delay = imperfect.delay()
        if delay:
            await asyncio.sleep(min(delay, 0.45 * period))
        if spec.any:
            writes, status = imperfect.apply(values)
        else:
            writes, status = dict(zip(server.columns, map(float, values), strict=True)), {}
        # stamped with its sample's scheduled time: a write that comes late (a loaded machine, jitter)
        # still lands in its row when it arrives before the row closes (the edge's grace)
        await server.write(writes, due + spec.skew, status)
        served.rows = k + 1
        if on_row is not None:
            on_row(k)
        if spec.restart_at is not None and k == spec.restart_at:
            await server.stop()
            await asyncio.sleep(spec.restart_seconds)
            await server.start()
            served.restarts += 1
    return served
