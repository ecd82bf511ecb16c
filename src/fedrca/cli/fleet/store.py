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
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedrca.exceptions import ArtifactError, ConfigError, DataError
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
    """Write ``model`` to ``path`` (.npz) and its info (with ``columns``) to the .json beside it."""
    file = Path(path)
    if file.suffix != ".npz":
        raise DataError(f"{file}: a fleet model file ends in .npz")
    file.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = dict(model.to_arrays())
    np.savez(file, **arrays)
    info = dict(model.info)
    if columns is not None:
        info["columns"] = list(columns)
    file.with_suffix(".json").write_text(json.dumps(_json_safe(info), indent=2) + "\n", encoding="utf-8")
    return file


def load_fleet_model(path: str | Path) -> FleetModel:
    """Read a model written by :func:`save_fleet_model` (the .json beside it is optional).

    Raises
    ------
    ArtifactError
        When the file is missing or not a fleet model (the message names the file and the fix).
    """
    file = Path(path)
    if not file.is_file():
        raise ArtifactError(f"{file}: no fleet model file; run `fedrca fleet --config ... --out DIR` to write one")
    try:
        with np.load(file, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ArtifactError(f"{file}: not a readable .npz fleet model ({exc})") from None
    meta = file.with_suffix(".json")
    info: dict[str, Any] = {}
    if meta.is_file():
        try:
            info = dict(json.loads(meta.read_text(encoding="utf-8")))
        except ValueError as exc:
            raise ArtifactError(f"{meta}: not valid JSON ({exc})") from None
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
