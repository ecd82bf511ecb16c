"""Everything that crosses a process boundary, as validated, immutable value objects.

* :mod:`~fedrca.contracts.messages`: the sensor, flag and verdict messages of the
  topics (one schema each, also used by the replay files and the reports) and their
  JSON codecs;
* :mod:`~fedrca.contracts.reason`: why a verdict names its root (the bounded reason it carries);
* :mod:`~fedrca.contracts.flagstate`: the flag state ``2 * Z_c + Z_a`` of a plant's
  published pair;
* :mod:`~fedrca.contracts.deadletter`: why a message was refused, and the headers
  a dead letter carries;
* :mod:`~fedrca.contracts.artifacts`: the parameter-artifact format (files and the
  params topic), on the binary container of :mod:`~fedrca.contracts.binary`;
* :mod:`~fedrca.contracts.commands`: an operator's command to a plant's re-baselining
  loop (the control topic).

Every producer and consumer uses these; nothing builds a message dict by hand.
This package imports nothing of fedrca but :mod:`fedrca.exceptions`.
"""

from fedrca.contracts.artifacts import (
    NOMINAL_STATE_COUNTS,
    SERVER,
    ParameterArtifact,
    check_binding,
    decode_published_artifact,
    encode_published_artifact,
    load_artifact,
    load_artifacts,
    load_server_artifact,
    load_site_artifacts,
    make_artifact,
    save_artifact,
)
from fedrca.contracts.commands import BaselineCommand
from fedrca.contracts.deadletter import DeadLetterReason, DeadLetterStage, deadletter_headers
from fedrca.contracts.flagstate import N_FLAG_STATES, FlagState, flag_bits, flag_states
from fedrca.contracts.messages import (
    PRIVACY_WITHHELD,
    SENSOR_FAULT,
    SENSOR_OUTCOMES,
    SENSOR_RECOVERED,
    FlagColumns,
    FlagMessage,
    Quality,
    SensorMessage,
    Verdict,
    decode_flag,
    decode_flag_columns,
    decode_flags,
    decode_sensor,
    decode_sensors,
    encode,
    encode_flags,
    verdict_id,
)
from fedrca.contracts.reason import PlantReason, Reason

__all__ = [
    "NOMINAL_STATE_COUNTS",
    "N_FLAG_STATES",
    "PRIVACY_WITHHELD",
    "SENSOR_FAULT",
    "SENSOR_OUTCOMES",
    "SENSOR_RECOVERED",
    "SERVER",
    "BaselineCommand",
    "DeadLetterReason",
    "DeadLetterStage",
    "FlagColumns",
    "FlagMessage",
    "FlagState",
    "ParameterArtifact",
    "PlantReason",
    "Quality",
    "Reason",
    "SensorMessage",
    "Verdict",
    "check_binding",
    "deadletter_headers",
    "decode_flag",
    "decode_flag_columns",
    "decode_flags",
    "decode_published_artifact",
    "decode_sensor",
    "decode_sensors",
    "encode",
    "encode_flags",
    "encode_published_artifact",
    "flag_bits",
    "flag_states",
    "load_artifact",
    "load_artifacts",
    "load_server_artifact",
    "load_site_artifacts",
    "make_artifact",
    "save_artifact",
    "verdict_id",
]
