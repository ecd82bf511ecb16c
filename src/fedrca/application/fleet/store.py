"""Fleet model files: ``<name>.npz`` (the arrays) next to ``<name>.json`` (what produced them).

A plant configured with ``detector: {kind: fleet, model: out/fleet/model.npz}`` loads
the shared model with :func:`load_fleet_model`; its own mixture weights are
re-estimated from its nominal data when its detector is fitted.

Examples
--------
>>> import numpy as np, tempfile, pathlib
>>> from fedrca.fleet.collabdict import FleetModel
>>> model = FleetModel(np.zeros(2), np.ones(2), np.zeros((1, 2)), np.eye(2)[None], 3.5, {"participants": 4})
>>> path = pathlib.Path(tempfile.mkdtemp()) / "model.npz"
>>> _ = save_fleet_model(path, model, columns=["a", "b"])
>>> again = load_fleet_model(path)
>>> again == model, again.info["columns"]
(True, ['a', 'b'])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedrca.application.outputs import write_file, write_with
from fedrca.contracts.artifacts import arrays_sha256, read_npz
from fedrca.contracts.bounds import parse_json
from fedrca.exceptions import ArtifactError, ConfigError, DataError, IntegrityError, MessageError
from fedrca.fleet.calibration import Calibration
from fedrca.fleet.collabdict import FleetModel

__all__ = ["load_calibration", "load_fleet_model", "save_fleet_model"]


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def save_fleet_model(path: str | Path, model: FleetModel, columns: Sequence[str] | None = None) -> Path:
    """Write ``model`` to ``path`` (.npz) and its info (with ``columns`` and the arrays' ``sha256``) to the .json
    beside it, each file whole."""
    file = Path(path)
    if file.suffix != ".npz":
        raise DataError(f"{file}: a fleet model file ends in .npz")
    arrays: dict[str, Any] = dict(model.to_arrays())
    write_with(file, lambda f: np.savez(f, **arrays))
    info = dict(model.info)
    if columns is not None:
        info["columns"] = list(columns)
    info["sha256"] = arrays_sha256(arrays)
    write_file(file.with_suffix(".json"), json.dumps(_json_safe(info), indent=2) + "\n")
    return file


def load_fleet_model(path: str | Path) -> FleetModel:
    """Read a model written by :func:`save_fleet_model` (the .json beside it is optional; its sha256 is checked).

    Raises
    ------
    ArtifactError
        When the file is missing, empty, not a fleet model, or its arrays do not match the recorded
        sha256 (an :class:`~fedrca.exceptions.IntegrityError`); the message names the file and the fix.
    """
    file = Path(path)
    if not file.is_file():
        raise ArtifactError(f"{file}: no fleet model file; run `fedrca fleet --config ... --out DIR` to write one")
    fix = "run `fedrca fleet --config ... --out DIR` to write it again"
    if file.stat().st_size == 0:
        raise ArtifactError(f"{file} is empty (0 bytes): the model was cut short; {fix}")
    try:
        arrays = read_npz(file)  # within the npz bound: 10 x the file's bytes, headers against the members
    except ArtifactError as exc:
        raise ArtifactError(f"{exc}; {fix}") from None
    meta = file.with_suffix(".json")
    info: dict[str, Any] = {}
    if meta.is_file():
        try:
            info = dict(
                parse_json(meta.read_bytes()[: 1 << 24], "the description", max_depth=16, max_bytes=(1 << 24) - 1)
            )
        except (MessageError, ValueError, TypeError, OSError) as exc:
            raise ArtifactError(f"{meta}: not a fleet model description ({exc}); {fix}") from None
    expected = info.pop("sha256", None)
    if expected is not None and expected != arrays_sha256(arrays):
        raise IntegrityError(f"{file}: the arrays do not match the sha256 in {meta.name} (edited or corrupted); {fix}")
    try:
        return FleetModel.from_arrays(arrays, info)
    except DataError as exc:
        raise ArtifactError(f"{file}: {exc}") from None


def load_calibration(path: str | Path) -> Calibration:
    """A participant's calibration from the ``participants/<name>.json`` that ``fedrca fleet`` wrote.

    Raises
    ------
    ArtifactError
        When the file is missing, not JSON or holds no valid ``calibration`` (the message names the file).
    """
    file = Path(path)
    if not file.is_file():
        raise ArtifactError(
            f"{file}: no participant file; `fedrca fleet --out DIR` writes DIR/participants/<name>.json"
        )
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("calibration"), dict):
        raise ArtifactError(f"{file}: no 'calibration' object; write it with `fedrca fleet --out DIR`")
    try:
        return Calibration.from_dict(raw["calibration"])
    except ConfigError as exc:
        raise ArtifactError(f"{file}: {exc.reason}") from None
