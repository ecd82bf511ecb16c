"""Fitted plant detectors kept in a plant worker's own directory, reused while their inputs are unchanged.

A plant worker (``fedrca run --roles plants``) fits each served plant's detector and sensor checks on
its nominal data at start. Started again with the same ``--data-dir`` and ``--worker-name`` (a
supervisor's restart after a crash or a ``kill -9``), it would fit the same detectors again: the fit
is deterministic (seeded) and its inputs have not changed. :class:`FittedStore` keeps what the fit
gave, one file per plant under ``<data-dir>/<worker>/fitted/``, under a key that is a content hash of
everything the fit reads:

* the nominal data file's bytes (``--train``);
* the plant's configuration and the site's (the whole design but the site's name: plants given by
  ``match`` rules resolve against the file's columns, which the file's hash covers);
* the files a fleet plant's configuration names (``detector.model``, ``detector.participant``);
* fedrca's own code (every module of the installed package) and the numeric libraries' versions.

A plant whose key equals the stored one loads its detector and sensor checks as fitted; any change
of any of them fits again (and replaces the file). A plug-in detector (``kind: plugin``) is fitted at
every start: its code is outside fedrca's. The files hold a plant's fitted state (nominal
statistics), plant-private like the worker's other local state: they stay in the plant worker's own
directory, which nothing else reads. A file is written whole (a temporary file renamed) and loaded
only when its bytes hash to the digest recorded beside it, so a file cut short by a crash is fitted
again, never loaded (``tests/application/test_fitted.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Iterable
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from fedrca.config import PlantConfig, SiteConfig

__all__ = ["FittedStore", "code_digest", "file_digest"]

log = logging.getLogger("fedrca.streams")

#: Bumped when the layout of a stored file changes.
FORMAT = 1


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (hex), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@cache
def code_digest() -> str:
    """sha256 of fedrca's modules (their relative paths and bytes, in path order) and the numeric libraries'
    versions: what fits a detector besides its data and configuration."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    for dist in ("numpy", "scipy", "pandas"):
        try:
            digest.update(f"{dist} {version(dist)}\0".encode())
        except PackageNotFoundError:
            digest.update(f"{dist} -\0".encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def _names_plugin(value: Any) -> bool:
    if isinstance(value, dict):
        return any((k == "plugin" and v is not None) or _names_plugin(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_names_plugin(v) for v in value)
    return False


class FittedStore:
    """The fitted detectors and sensor checks of a worker's plants, one file per plant in ``directory``.

    Parameters
    ----------
    directory : the worker's own folder for them (``<data-dir>/<worker>/fitted``), made when first written
    train : the nominal data file the plants are fitted on
    """

    def __init__(self, directory: str | Path, train: str | Path) -> None:
        self.directory = Path(directory)
        self._train = file_digest(train)
        self.loaded: list[str] = []  # the plants whose fitted state was loaded, not fitted
        self.fitted: list[str] = []  # the plants fitted (and stored)

    def key(self, config: SiteConfig, plant: PlantConfig) -> str | None:
        """The content hash a plant's fit depends on (module docstring); None for a plug-in detector."""
        dumped = plant.model_dump(mode="json")
        if _names_plugin(dumped):
            return None
        files = {
            name: file_digest(path)
            for name in ("model", "participant")
            if (path := getattr(plant.detector, name, None)) is not None
        }
        text = json.dumps(
            {
                "format": FORMAT,
                "train": self._train,
                "design": config.model_dump_json(exclude={"site"}),
                "plant": dumped,
                "files": files,
                "code": code_digest(),
            },
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def _paths(self, plant: str) -> tuple[Path, Path]:
        return self.directory / f"{plant}.pickle", self.directory / f"{plant}.json"

    def load(self, plant: str, key: str | None) -> tuple[Any, Any] | None:
        """The plant's (detector, sensor checks or None) as stored under ``key``; None when absent, stored
        under another key, or not whole."""
        if key is None:
            return None
        blob, meta = self._paths(plant)
        try:
            recorded = json.loads(meta.read_text(encoding="utf-8"))
            if recorded.get("key") != key:
                return None
            raw = blob.read_bytes()
            if hashlib.sha256(raw).hexdigest() != recorded.get("sha256"):
                return None
            # the worker's own file, written by save() below, whose bytes match the digest it recorded
            detector, health = pickle.loads(raw)
        except (OSError, ValueError, TypeError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
            return None
        self.loaded.append(plant)
        return detector, health

    def save(self, plant: str, key: str | None, detector: Any, health: Any) -> None:
        """Store the plant's freshly fitted detector and sensor checks under ``key`` (a plug-in's: not stored).
        A folder that cannot be written only costs the next start a fit (logged)."""
        self.fitted.append(plant)
        if key is None:
            return
        blob, meta = self._paths(plant)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            raw = pickle.dumps((detector, health), protocol=pickle.HIGHEST_PROTOCOL)
            _write_whole(blob, raw)
            _write_whole(meta, json.dumps({"key": key, "sha256": hashlib.sha256(raw).hexdigest()}).encode())
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
            log.warning("could not keep the fitted detector of %s in %s (%s): it is fitted at the next start too",
                        plant, self.directory, exc)  # fmt: skip

    def summary(self, plants: Iterable[str]) -> str:
        """One line: which plants were loaded and which fitted."""
        plants = list(plants)
        loaded = [p for p in plants if p in self.loaded]
        fitted = [p for p in plants if p not in self.loaded]
        parts = []
        if loaded:
            parts.append(f"loaded as fitted before (training data and configuration unchanged): {', '.join(loaded)}")
        if fitted:
            parts.append(f"fitted: {', '.join(fitted)}")
        return "; ".join(parts)


def _write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` all at once: a temporary file beside it, flushed, renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
