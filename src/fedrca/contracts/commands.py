"""An operator's command to a plant's re-baselining loop (``fedrca baseline``; docs/drift.md).

Commands travel on the compacted ``<site>.control`` topic, keyed by the plant: the broker
keeps the newest command of each plant. A plant worker applies a command once (its id is
kept in the plant's state record, committed with the batch it took effect in), at the start
of the plant's next batch.

=================  ==============================================================================
``pin``            hold the baseline in force: scheduled refreshes are skipped (and reported)
``unpin``          let scheduled refreshes run again
``rollback``       run baseline ``b<version>`` again (one of the baselines the plant keeps); pins it
``refresh``        re-baseline now from the history, past the guards and bounds (the operator judged
                   the alarms nominal: a new operating point)
=================  ==============================================================================

Examples
--------
>>> cmd = BaselineCommand("tep", "reactor", "rollback", 3, "c1", 0.0)
>>> BaselineCommand.decode(cmd.encode(), "tep", ["reactor"]) == cmd
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fedrca.contracts.bounds import check_name, parse_json, short
from fedrca.contracts.deadletter import DeadLetterReason
from fedrca.exceptions import MessageError

__all__ = ["ACTIONS", "BaselineCommand"]

#: What an operator may ask of a plant's loop.
ACTIONS = ("pin", "unpin", "rollback", "refresh")


@dataclass(frozen=True)
class BaselineCommand:
    """One command: ``action`` on ``plant`` of ``site`` (``version`` for a rollback), with a unique ``id``."""

    site: str
    plant: str
    action: str
    version: int | None
    id: str
    ts: float

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise MessageError(DeadLetterReason.BAD_FIELD, f"action must be one of {', '.join(ACTIONS)}")
        if (self.action == "rollback") != (self.version is not None):
            raise MessageError(DeadLetterReason.BAD_FIELD, "a rollback names a version (b<n>), nothing else does")
        if self.version is not None and self.version < 0:
            raise MessageError(DeadLetterReason.BAD_FIELD, "a baseline version is >= 0")
        if not self.id or len(self.id) > 64 or not math.isfinite(self.ts):
            raise MessageError(DeadLetterReason.BAD_FIELD, "a command has an id of 1..64 characters and a finite ts")

    def encode(self) -> bytes:
        """JSON bytes of the command."""
        doc = {"site": self.site, "plant": self.plant, "action": self.action, "version": self.version,
               "id": self.id, "ts": self.ts}  # fmt: skip
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes, site: str, plants: Iterable[str]) -> BaselineCommand:
        """Validate a command of ``site`` for one of ``plants``.

        Raises
        ------
        MessageError
            Malformed (larger than a record, nested, not JSON), another site's, an unknown
            plant, a field it does not have, or a field out of its contract: never another
            exception (``tests/contracts/test_fuzz_decoders.py``, decoder ``command``).
        """
        doc: Any = parse_json(raw, "a command", max_depth=1)
        if not isinstance(doc, dict):
            raise MessageError(DeadLetterReason.MALFORMED_JSON, "a command is a JSON object")
        missing = [k for k in ("site", "plant", "action", "id", "ts") if k not in doc]
        if missing:
            raise MessageError(DeadLetterReason.MISSING_FIELD, f"a command needs {', '.join(missing)}")
        extra = sorted(set(doc) - {"site", "plant", "action", "version", "id", "ts"})
        if extra:
            raise MessageError(DeadLetterReason.BAD_FIELD, f"a command has no field {short(extra[0])}")
        if doc["site"] != site:
            raise MessageError(DeadLetterReason.WRONG_SITE, f"a command for site {short(doc['site'])}, not {site!r}")
        plant = check_name(doc["plant"], "plant", DeadLetterReason.UNKNOWN_PLANT)
        if plant not in set(plants):
            raise MessageError(DeadLetterReason.UNKNOWN_PLANT, f"no plant {short(plant)} at site {site!r}")
        action = check_name(doc["action"], "action")
        command_id = check_name(doc["id"], "id", limit=64)
        version = doc.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise MessageError(DeadLetterReason.BAD_FIELD, "version is an integer")
        ts = doc["ts"]
        # an integer of hundreds of digits has no float: compared exactly, before float()
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not abs(ts) < 1e300:
            raise MessageError(DeadLetterReason.BAD_FIELD, "ts is a finite number of seconds")
        return cls(site, plant, action, version, command_id, float(ts))
