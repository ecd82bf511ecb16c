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
from collections.abc import Callable, Sequence

from fedrca.exceptions import ConfigError

__all__ = [
    "BASE_MEMORY",
    "DATA_MEMORY_FACTOR",
    "KAFKA_REQUEST_TIMEOUT",
    "MAX_BATCH_SIZE",
    "MAX_DEMO_HOURS",
    "MAX_FETCH_BYTES",
    "MAX_FILE_NAME",
    "MAX_HOLD_SECONDS",
    "MAX_KAFKA_RECORD",
    "MAX_PORT",
    "MAX_PRIVACY_WINDOW",
    "MAX_REMEMBERED_VERDICTS",
    "MAX_SEED",
    "MAX_SESSION_TIMEOUT",
    "MAX_SEVERITY_LEVELS",
    "MAX_SPEED",
    "MAX_TOPIC_LENGTH",
    "MAX_TRAINING_ROUNDS",
    "MEMORY_LIMIT",
    "MIN_RECORD_BYTES",
    "MIN_SESSION_TIMEOUT",
    "MIN_SPEED",
    "TOPIC_CHARACTERS",
    "artifact_record_problem",
    "batch_bytes",
    "check_range",
    "check_seed",
    "demo_bytes",
    "file_name_problem",
    "fleet_bytes",
    "gib",
    "largest",
    "name_fits_topic",
    "peak_memory",
    "plant_bytes",
    "plant_share",
    "rca_bytes",
    "rca_record_room",
    "rca_state_bytes",
    "released_rows_bytes",
    "render_topic",
    "replay_to_kafka_bytes",
    "stream_bytes",
    "waiting_rows_bytes",
    "whatif_bytes",
]

#: Largest seed (every seed of fedrca is below 2^32: numpy's legacy generators and the simulator take no more).
MAX_SEED = 2**32 - 1

#: Longest Kafka topic name (the broker's limit: 249 characters).
MAX_TOPIC_LENGTH = 249
#: The characters of a Kafka topic name.
TOPIC_CHARACTERS = re.compile(r"^[A-Za-z0-9._-]+$")
#: Longest file name on the file systems fedrca writes to (ext4, xfs, tmpfs: 255 bytes).
MAX_FILE_NAME = 255
#: Largest record a Kafka producer sends and a broker stores by default (``max.request.size``,
#: ``message.max.bytes``: 1 MiB). A worker writes its state as one record with every batch, and
#: ``publish-params`` an artifact as one record: both must fit it.
MAX_KAFKA_RECORD = 1 << 20
#: JSON bytes a published sample takes in a plant's state record (its seq in the privacy window,
#: ``[[seq],bits],`` of a batch of one: a 19-digit seq and the framing).
WINDOW_SEQ_BYTES = 26
#: Most samples a plant's privacy window composes: the ledger keeps the seq of every sample published
#: in the window (:class:`fedrca.privacy.ledger.FlagWindow`, about 400 bytes each in memory) and
#: writes them with the plant's state record after every batch: half a Kafka record (the other
#: half for the detector's state) holds about 20,000 (docs/limits.md).
MAX_PRIVACY_WINDOW = 20_000
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


#: Largest TCP port a server binds (0 = any free port).
MAX_PORT = 65_535
#: Most bytes one consumer fetch returns (``fetch.max.bytes``, the Kafka clients' default 50 MiB).
MAX_FETCH_BYTES = 50 << 20
#: The smallest fedrca record with its Kafka framing: a flag (85 bytes of JSON) in a record batch.
MIN_RECORD_BYTES = 100
#: Most records one fetch can return (:data:`MAX_FETCH_BYTES` of the smallest records): a larger
#: ``--batch-size`` is never filled.
MAX_BATCH_SIZE = MAX_FETCH_BYTES // MIN_RECORD_BYTES
#: Session timeouts (seconds) a broker's group coordinator accepts by default
#: (``group.min.session.timeout.ms`` 6 s, ``group.max.session.timeout.ms`` 30 min): a worker
#: outside them is refused when it joins its consumer group.
MIN_SESSION_TIMEOUT, MAX_SESSION_TIMEOUT = 6.0, 1800.0
#: Seconds a client request may take (:class:`fedrca.streams.loop.LoopSettings`): a fetch that
#: waits longer for records times out instead of returning.
KAFKA_REQUEST_TIMEOUT = 30.0
#: Replay speeds (``xN``): slower than 1/1000 of real time a 3-minute sample waits two days; faster
#: than 10^9 is ``asap``.
MIN_SPEED, MAX_SPEED = 1e-3, 1e9
#: Longest ``demo --hold`` (a week; Ctrl-C ends it earlier).
MAX_HOLD_SECONDS = 7 * 86_400.0
#: Longest live run of ``demo --source simulator`` (10,000 samples, about 3 minutes to simulate here):
#: the demo shows the system; a longer live plant is ``fedrca simulate --to`` feeding ``fedrca run``.
MAX_DEMO_HOURS = 500.0
#: Bytes of the RCA worker's state record kept free: its pending rows and evidence may take the rest
#: (:func:`rca_record_room`, which bounds ``run --allowed-lateness``).
_RCA_RECORD_RESERVE = 1 << 18
#: Most verdict ids an RCA worker remembers in memory (one fixed array) to emit no verdict twice within
#: a process; across restarts the last row judged, in its state, does (:class:`fedrca.streams.rca_stage.RCAStage`).
#: 13,797: as many as the record's reserve would hold as JSON (``"<16 hex>",``, 19 bytes each).
MAX_REMEMBERED_VERDICTS = _RCA_RECORD_RESERVE // 19

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


def batch_bytes(batch_size: int) -> int:
    """Bytes a worker's batch of ``batch_size`` records holds until it commits: ``1000 B + 50 MiB``.

    Per record the client's record object, the decoded message and its outputs (about 1 kB); the
    records' values together at most one fetch (:data:`MAX_FETCH_BYTES`).

    Examples
    --------
    >>> gib(batch_bytes(2000)), gib(batch_bytes(MAX_BATCH_SIZE))
    ('54 MB', '577 MB')
    """
    return 1000 * batch_size + MAX_FETCH_BYTES


def waiting_rows_bytes(plants: int, lateness: int) -> int:
    """Bytes of the RCA aligner's rows waiting for their plants, with the state records written from them:
    ``(L + 2)(300 + 200 M)`` for L samples of allowed lateness over M plants.

    The rows wait in a ring of L + 2 rows of numpy arrays (:class:`fedrca.streams.aligner.FlagAligner`),
    ``16 + 19 M`` bytes a row: each plant's cell (1), time (8), level (8), level and sensor-fault bits
    (1 + 1); the row's plant count and first time (8 + 8). After every batch the worker writes the
    L + 1 rows it may hold into its state record (:func:`rca_state_bytes`, about ``28 + 25 M`` bytes
    a row): at the peak the state's strings (its seqs a list of Python ints), its JSON and the
    record, while the previous batch's state and record are kept until that batch commits, and the
    producer holds a copy of the record.

    Parameters
    ----------
    plants : M, the site's plants
    lateness : L, samples a row waits for its plants (``--allowed-lateness``)

    Returns
    -------
    int
        Bytes, an upper bound: ``tests/streams/test_rca_state_size.py`` measures the ring and the writes
        resident in a child process (rows at their worst; 5,000 against 25,000 rows), 500-530 bytes a
        row for 2 plants and 975-985 for 5, plus the producer's copy (76, 149): 0.82-0.87 of the bound. Resident,
        not allocated: orjson allocates several times the JSON it writes and leaves the rest untouched.

    Examples
    --------
    >>> waiting_rows_bytes(2, 1000), waiting_rows_bytes(5, 1000)
    (701400, 1302600)
    """
    return (lateness + 2) * (300 + 200 * plants)


def released_rows_bytes(plants: int) -> int:
    """Bytes of the RCA aligner's memory of the 10,000 rows it released last: ``10^4 (250 + 4 M)`` over M plants.

    The memory tells a redelivered flag from a late one (:class:`fedrca.streams.aligner.FlagAligner`):
    per row its seq (a Python int) and codes (a string of M characters) in a tuple in a deque, the codes
    again in a buffer and compressed by blocks of 500 rows (at worst 4/3 of a byte a plant in base64),
    and at worst a run of seqs (a list in a deque) when each row skipped samples.

    Parameters
    ----------
    plants : M, the site's plants

    Returns
    -------
    int
        Bytes, an upper bound: ``tests/streams/test_rca_state_size.py`` measures the memory of 10,000 rows
        each its own run with tracemalloc, 2.0 MB for 2 plants and 2.1 MB for 5 (0.77 of the bound; the
        interpreter's rounding of small objects is not in tracemalloc's bytes).

    Examples
    --------
    >>> released_rows_bytes(5)
    2700000
    """
    return 10_000 * (250 + 4 * plants)


def stream_bytes(plants: int, served: int, batch_size: int, lateness: int, window: int) -> int:
    """Bytes a ``fedrca run`` worker's streaming state takes beyond its plants' detectors and the RCA's evidence
    window (:func:`plant_bytes`, :func:`rca_bytes`; docs/limits.md).

    ``batch_bytes(B) + (L + 2)(300 + 200 M) + 400 P W + 10^4 (250 + 4 M) + 1.2 10^7``: a batch of B
    records (:func:`batch_bytes`), the RCA aligner's rows waiting over M plants for L samples of
    allowed lateness with the state records written from them (:func:`waiting_rows_bytes`), P
    served plants' privacy windows of W samples (a seq and its array per published sample), the
    aligner's memory of 10,000 released rows (:func:`released_rows_bytes`) and the verdict ids the
    RCA remembers (:data:`MAX_REMEMBERED_VERDICTS`, counted as 100,000).

    Parameters
    ----------
    plants : M, the site's plants
    served : P, the plants whose detectors the worker runs
    batch_size : B, records a batch holds (``--batch-size``)
    lateness : L, samples a row waits for its plants (``--allowed-lateness``)
    window : W, samples of a plant's privacy window (``privacy.window``)

    Returns
    -------
    int
        Bytes, an upper bound.

    Examples
    --------
    >>> gib(stream_bytes(5, 5, 2000, 1000, 3600))
    '78 MB'
    """
    P, W = served, window
    return (
        batch_bytes(batch_size)
        + waiting_rows_bytes(plants, lateness)
        + 400 * P * W
        + released_rows_bytes(plants)
        + 12_000_000
    )


def rca_state_bytes(plants: Sequence[str], lateness: int, horizon: int) -> int:
    """JSON bytes of an RCA worker's state record, written to Kafka with every batch (at worst).

    ``(L + 1)(28 + 25 M) + H (21 + 3 M) + sum(7 len(p) + 18,010) + 212,000``: at most
    ``MAX_KAFKA_RECORD - 256 KiB`` (:func:`rca_record_room`), so ``fedrca run`` refuses a longer
    ``--allowed-lateness`` or ``rca.horizon``.

    Parameters
    ----------
    plants : the site's M plant names (p)
    lateness : L, samples a row waits for its plants (``--allowed-lateness``)
    horizon : H, rows of the engine's evidence window (``rca.horizon``; 0: no RCA role)

    Returns
    -------
    int
        Bytes of the record (:func:`fedrca.streams.loop.state_record` of the
        :class:`~fedrca.streams.rca_stage.RCAStage`'s state), an upper bound.

    Notes
    -----
    The terms, each at its worst (a seq at most 16 digits, :data:`fedrca.contracts.messages.MAX_SEQ`;
    a float 24 characters):

    * the aligner's rows waiting (at most L + 1, :meth:`fedrca.streams.aligner.FlagAligner.get_state`),
      written as a few strings, no plant name in them: a row's seq and a comma (17), its time (8 bytes
      in base64: 32/3) and per plant a cell character, its own time (32/3), a level (32/3) and two
      ``0``/``1`` characters (level published, sensor-fault bit): ``27.7 + 24.3 M``;
    * the engine's H rows of flag codes (:meth:`fedrca.rca.RCAEngine.get_state`),
      ``[seq,[-1,...]],``: ``21 + 3 M``;
    * per plant p: the aligner's memory of its 10,000 released rows, a code character a row,
      compressed by blocks of 500 rows (up to 21 strings: 10,499 rows), at worst zlib's stored bound
      in base64 (14,003); the engine's statistics with 62 tracked severity levels
      (:data:`MAX_SEVERITY_LEVELS` less 2: 3,932) and the sensor events' (71); the name, written 3
      times by the engine and 4 by the sensor events: ``7 len(p) + 18,010``;
    * the memory's seqs as runs of consecutive seqs, at worst one run a row when every row skipped
      samples (10,000 x ``[seq,1],``: 210,000), the keys, counters and the record's head: 212,000.

    ``tests/streams/test_rca_state_size.py`` builds the worst state through the real code and finds
    its record within this bound and above 0.9 of it.

    Examples
    --------
    >>> rca_state_bytes(["reactor", "separator"], 1000, 30)
    327020
    >>> rca_state_bytes(["reactor", "separator"], 1001, 30) - rca_state_bytes(["reactor", "separator"], 1000, 30)
    78
    """
    M = len(plants)
    row = 28 + 25 * M
    return (lateness + 1) * row + horizon * (21 + 3 * M) + sum(7 * len(p) + 18_010 for p in plants) + 212_000


def rca_record_room() -> int:
    """Bytes of the RCA's state record :func:`rca_state_bytes` may take (a Kafka record less a reserve)."""
    return MAX_KAFKA_RECORD - _RCA_RECORD_RESERVE


def demo_bytes(samples: int, plants: int) -> int:
    """Bytes ``fedrca demo`` keeps of one run: ``2000 T M`` for T samples of M plants.

    The operator report keeps the whole run: each plant's detection results and sensor checks
    (joined as the run goes, held twice while the last join is made), the verdicts and the
    report's curves; no flag message (the report reads the results). Fitted on the simulator
    demo's 100- and 500-hour runs (332 and 346 MB peak; docs/limits.md, "Numbers bounded by
    memory"; ``tests/cli/test_limits.py::test_demo_on_the_longest_simulated_run``).

    Examples
    --------
    >>> gib(demo_bytes(10_000, 5))
    '100 MB'
    """
    return 2000 * samples * plants


def replay_to_kafka_bytes(pending: int = 8 << 20) -> int:
    """Bytes ``replay-to-kafka`` holds beyond the file: ``4 x`` the sink's unacknowledged bytes.

    The messages waiting for the broker's acknowledgement (:class:`fedrca.connectors.kafka.KafkaSink`,
    8 MiB), their futures and the producer's buffers.

    Examples
    --------
    >>> gib(replay_to_kafka_bytes())
    '34 MB'
    """
    return 4 * pending


def artifact_record_problem(name: str, size: int) -> str | None:
    """What is wrong with publishing artifact ``name`` as a Kafka record of ``size`` bytes (None: it fits)."""
    if size > MAX_KAFKA_RECORD:
        return (
            f"the artifact {name} makes a record of {size:,} bytes; a Kafka record holds at most "
            f"{MAX_KAFKA_RECORD:,} (max.message.bytes): train it with fewer features (augmentation.n_features, "
            "training.server_n_features) or fewer sensors per plant"
        )
    return None


def check_range(option: str, value: float, low: float, high: float, why: str) -> None:
    """Refuse ``value`` of ``option`` outside ``low..high`` (NaN and infinities too), naming ``why`` the bound holds.

    Raises
    ------
    ConfigError
        ``--option: must be in low..high (why), got value``.

    Examples
    --------
    >>> try:
    ...     check_range("--batch-size", 0, 1, 10, "records per fetch")
    ... except ConfigError as exc:
    ...     print(exc)
    --batch-size: must be in 1..10 (records per fetch), got 0
    """
    if not (math.isfinite(value) and low <= value <= high):
        shown = value if isinstance(value, int) else f"{value:g}"
        raise ConfigError(f"must be in {low:g}..{high:g} ({why}), got {shown}", key=option)


def check_seed(option: str, value: int) -> None:
    """Refuse a seed outside 0..:data:`MAX_SEED` (the documented range) before it reaches numpy.

    Examples
    --------
    >>> try:
    ...     check_seed("--seed", -1)
    ... except ConfigError as exc:
    ...     print(exc)
    --seed: a seed is an integer in 0..4294967295, got -1
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"a seed is an integer in 0..{MAX_SEED}, got {value}", key=option)


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
