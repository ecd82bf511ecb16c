"""Bounds every configured name and number respects: the transports it reaches, the files it names, memory.

A name ends up in Kafka topic names (at most :data:`MAX_TOPIC_LENGTH` characters of
``[A-Za-z0-9._-]``) and in file names (at most :data:`MAX_FILE_NAME` bytes); a number ends up
in the size of arrays. The configuration is refused when it loads, with the key and the
largest value that fits, instead of failing at the broker, at the file system or in the
allocator after the work (docs/limits.md lists every bound and the memory formulas).

Examples
--------
>>> name_fits_topic("tep.sensors.reactor", "reactor", "plant name", "{site}.sensors.{plant}") is None
True
>>> name_fits_topic("tep.sensors." + "r" * 300, "r" * 300, "plant name", "{site}.sensors.{plant}")[-43:]
'give a plant name of at most 237 characters'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

__all__ = [
    "BASE_MEMORY",
    "DATA_MEMORY_FACTOR",
    "MAX_FILE_NAME",
    "MAX_PRIVACY_WINDOW",
    "MAX_SEVERITY_LEVELS",
    "MAX_TOPIC_LENGTH",
    "MAX_TRAINING_ROUNDS",
    "MEMORY_LIMIT",
    "TOPIC_CHARACTERS",
    "file_name_problem",
    "fleet_bytes",
    "gib",
    "largest",
    "name_fits_topic",
    "peak_memory",
    "plant_bytes",
    "plant_share",
    "rca_bytes",
    "render_topic",
    "whatif_bytes",
]

#: Longest Kafka topic name (the broker's limit: 249 characters).
MAX_TOPIC_LENGTH = 249
#: The characters of a Kafka topic name.
TOPIC_CHARACTERS = re.compile(r"^[A-Za-z0-9._-]+$")
#: Longest file name on the file systems fedrca writes to (ext4, xfs, tmpfs: 255 bytes).
MAX_FILE_NAME = 255
#: Most samples a plant's privacy window composes (the ledger keeps the published seqs of the window).
MAX_PRIVACY_WINDOW = 10_000_000
#: Most federated training rounds (``training.rounds``, ``train --rounds``): each round costs the same
#: memory, so only run time grows; the privacy budget is split over the rounds, so 10^5 rounds of
#: 10^-5 of it each already carry noise a thousand times a single release's
MAX_TRAINING_ROUNDS = 100_000
#: Most severity levels a plant publishes (k-ary randomized response over K levels).
MAX_SEVERITY_LEVELS = 64
#: Bytes the arrays a configuration's numbers imply may take beyond the data itself (model,
#: responsibilities, responses, contingency tables): a configuration over it is refused with the
#: largest value that fits (docs/limits.md gives each command's formula).
MEMORY_LIMIT = 1 << 30


#: Peak memory of any command before its data and parameters: the interpreter, numpy, scipy, pandas,
#: pydantic, matplotlib and a report's figures (measured 190-240 MB; docs/limits.md).
BASE_MEMORY = 300_000_000
#: Bytes of memory per byte of the data files a command reads (the parsed frame, per-plant arrays,
#: scores and flags of every row, the text of JSON-lines outputs; measured about 5).
DATA_MEMORY_FACTOR = 10


def peak_memory(data_bytes: int, term: int) -> int:
    """The documented bound of a command's peak memory (docs/limits.md): ``BASE + 10 x data + term``.

    ``term`` is the command's parameter term (:func:`fleet_bytes`, :func:`plant_bytes`,
    :func:`whatif_bytes`, a G-square table ...), at most :data:`MEMORY_LIMIT` on any accepted
    configuration, so no command takes more than ``BASE + 10 x data + MEMORY_LIMIT``.

    Examples
    --------
    >>> gib(peak_memory(10_000_000, MEMORY_LIMIT))
    '1.5 GB'
    """
    return BASE_MEMORY + DATA_MEMORY_FACTOR * data_bytes + term


def gib(nbytes: float) -> str:
    """A byte count for a message: ``'2.1 GB'``, ``'340 MB'``, ``'about 4.8e+644 bytes'`` (any integer size).

    Examples
    --------
    >>> gib(2_100_000_000), gib(340_000_000), gib(48 * 10**643)
    ('2.1 GB', '340 MB', 'about 4.8e+644 bytes')
    """
    if isinstance(nbytes, int) and nbytes >= 10**15:
        # log10 of the int itself: str() of an int of more than 4,300 digits is refused by Python
        exponent = math.log10(nbytes)
        return f"about {10 ** (exponent % 1):.1f}e+{math.floor(exponent)} bytes"
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.0f} MB"


def render_topic(template: str, **names: str) -> str:
    """A topic template with its ``{site}``/``{plant}``/... substituted.

    Raises
    ------
    ValueError
        When the template has another placeholder or a stray brace.
    """
    try:
        return template.format(**names)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        known = ", ".join("{" + k + "}" for k in names)
        raise ValueError(f"'{template}' is not a topic template (placeholders are {known}; {exc!r})") from None


def name_fits_topic(topic: str, name: str, what: str, pattern: str) -> str | None:
    """What is wrong with ``topic`` (made from ``pattern`` with ``name`` in it), None when it fits Kafka.

    The message gives the longest ``what`` (e.g. "plant name") that fits.
    """
    if len(topic) > MAX_TOPIC_LENGTH:
        room = MAX_TOPIC_LENGTH - (len(topic) - len(name))
        return (
            f"a {what} of {len(name)} characters makes the topic {pattern} {len(topic)} characters long, Kafka "
            f"allows {MAX_TOPIC_LENGTH}: give a {what} of at most {max(room, 0)} characters"
        )
    if not TOPIC_CHARACTERS.match(topic) or topic in (".", ".."):
        return f"the topic '{topic[:60]}' ({pattern}) is not a Kafka topic name (letters, digits, '.', '_', '-')"
    return None


def file_name_problem(name: str, prefix: str = "", suffix: str = "") -> str | None:
    """What is wrong with the file name ``prefix + name + suffix``, None when nothing is."""
    size = len((prefix + name + suffix).encode("utf-8"))
    if size > MAX_FILE_NAME:
        room = MAX_FILE_NAME - len((prefix + suffix).encode("utf-8"))
        return f"makes the file name {prefix}...{suffix} {size} bytes long; file systems allow {MAX_FILE_NAME}: " + (
            f"at most {room} characters"
        )
    return None


def fleet_bytes(
    participants: int,
    components: int,
    variables: int,
    rows: int,
    *,
    chunks: int = 3,
    n_init: int = 10,
    noise_samples: int = 0,
) -> int:
    """Bytes a fleet run's arrays take beyond its data (``fedrca fleet``; docs/limits.md).

    ``8 K (S M^2 (6 + 3 C) + 4 N + S M (n_init + noise_samples))`` for S participants, K
    patterns, M variables, N rows in all and C consensus chunks: every participant keeps its
    copies of the K precision matrices (M x M) in its consensus sessions (more with more chunks),
    and the responsibilities of its rows (N_s x K) with their temporaries. The coefficients are
    measured (``tests/cli/test_limits.py`` checks the formula against the peak memory of the largest
    accepted run).

    Examples
    --------
    >>> gib(fleet_bytes(5, 1000, 52, 500))
    '1.7 GB'
    """
    S, K, M, N, C = participants, components, variables, rows, chunks
    return 8 * K * (S * M * M * (6 + 3 * C) + 4 * N + S * M * (n_init + noise_samples))


def plant_bytes(rows: int, sensors: int, features: int) -> int:
    """Bytes a plant's detector and its federated training take for ``rows`` nominal samples of ``sensors``
    columns and ``features`` augmentation features (``detect``, ``train``, ``replay``, ``evaluate``, ``run``).

    ``8 (3 ((D + 1) F + 1)^2 + 4 T F + 16 T D)``: the client's joint Gauss-Newton system over Theta
    (at most D states x F features) and its bias, factored with two temporaries; the feature matrix
    of the nominal rows and its temporaries; the plant's data, residuals, scores and flags.

    Examples
    --------
    >>> gib(plant_bytes(500, 8, 64))
    '10 MB'
    >>> gib(plant_bytes(500, 8, 4096))
    '32.7 GB'
    """
    T, D, F = rows, sensors, features
    return 8 * (3 * ((D + 1) * F + 1) ** 2 + 4 * T * F + 16 * T * D)


def rca_bytes(horizon: int, plants: int) -> int:
    """Bytes of the RCA engine's evidence window: ``8 H M (M + 4)`` for H rows over M plants.

    The window is allocated whole when the engine starts (rows' codes and per-hypothesis log
    evidence, :class:`fedrca.rca.engine.RCAEngine`); the plants' detectors share what it leaves of
    :data:`MEMORY_LIMIT` (:func:`plant_share`).

    Examples
    --------
    >>> gib(rca_bytes(30, 4))
    '0 MB'
    >>> gib(rca_bytes(10_000_000, 4))
    '2.6 GB'
    """
    return 8 * horizon * plants * (plants + 4)


def plant_share(horizon: int, plants: int) -> int:
    """Bytes each plant's detector and training may take: what the RCA's window leaves of the limit, shared.

    The plants and the RCA run in one process (``replay``, ``evaluate``, ``run``, the demo), so their
    terms together stay within :data:`MEMORY_LIMIT`.
    """
    return max(MEMORY_LIMIT - rca_bytes(horizon, plants), 0) // max(plants, 1)


def whatif_bytes(steps: int, states: int, sensors: int) -> int:
    """Bytes of a what-if answer (``fedrca whatif --steps K``): ``256 K (S + D)`` for S states and D sensors.

    The state and sensor responses (float64, with a temporary each) and the answer's JSON: every
    number as a Python float in a list and as text (``--json``), about 200 bytes a number.

    Examples
    --------
    >>> gib(whatif_bytes(100_000, 4, 16))
    '512 MB'
    """
    return 256 * steps * (states + sensors)


def largest(limit: int, size: Callable[[int], int], cap: int) -> int:
    """The largest n in 1..cap with ``size(n) <= limit`` (0 when not even 1 fits); ``size`` grows with n."""
    lo, hi = 0, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo
