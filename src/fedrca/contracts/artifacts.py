"""The parameter-artifact format: what a training run hands to the plant processors and the RCA.

One artifact per plant (its Theta and the augmented scorer re-calibrated on nominal
data with that Theta) and one for the server (:data:`SERVER`: the learned block
transition ``A``, its standard errors and the plants' state dimensions). On disk an
artifact is ``<dir>/<plant>.npz`` (the arrays) + ``<dir>/<plant>.json`` (the
manifest: version, created, the hash of the configuration it was trained under, the
plant's data schema, sha256 of the arrays, metrics, the privacy ledger: epsilon spent,
delta). On the ``<site>.params`` topic it is one byte string
(:func:`encode_published_artifact`).

Every reader recomputes the sha256 of the arrays and the ``digest`` of the whole
manifest (which includes the arrays' sha256, the configuration hash, the schema and the
ledger) and refuses a mismatch with :class:`~fedrca.exceptions.IntegrityError`;
:func:`check_binding` refuses an artifact trained under another configuration or data
schema. (The digests detect corruption and edits made without fedrca; they are not a
signature against someone who recomputes them.)

Examples
--------
>>> import numpy as np, tempfile
>>> art = make_artifact("reactor", 1, {"theta": np.zeros((2, 3))}, config_hash="abc")
>>> with tempfile.TemporaryDirectory() as d:
...     _ = save_artifact(art, d)
...     load_artifact(d, "reactor").version
'v1'
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import math
import os
import re
import stat
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedrca.contracts.binary import pack_arrays, unpack_arrays
from fedrca.contracts.bounds import MAX_NAME_CHARS, MAX_RECORD_BYTES, parse_json, short
from fedrca.exceptions import ArtifactError, IntegrityError, MessageError

__all__ = [
    "NOMINAL_STATE_COUNTS",
    "PRIVATE_PREFIX",
    "SERVER",
    "ParameterArtifact",
    "arrays_sha256",
    "check_binding",
    "decode_published_artifact",
    "encode_published_artifact",
    "load_artifact",
    "load_artifacts",
    "load_server_artifact",
    "load_site_artifacts",
    "make_artifact",
    "manifest_digest",
    "public_artifact",
    "read_npz",
    "save_artifact",
    "special_file",
]

#: Pseudo-plant name of the server artifact.
SERVER = "_server"
#: Plant artifact array: counts of the flag states (Z_c, Z_a) = (0,0), (0,1), (1,0), (1,1) on the
#: nominal data with the trained parameters; what the RCA learns of a plant's false-alarm behaviour.
NOMINAL_STATE_COUNTS = "nominal_state_counts"
#: Prefix of a plant artifact's private arrays: the plant's own model (measurement map, own transition
#: and input blocks, sensor and input scales) for its what-if queries (:mod:`fedrca.whatif`).
#: They stay in the artifact on disk; :func:`encode_published_artifact` never publishes them.
PRIVATE_PREFIX = "whatif."
FORMAT = "fedrca-artifact/2"
#: Most bytes an npz's arrays may take decompressed, as a multiple of the file's bytes (docs/limits.md's
#: ``DATA_MEMORY_FACTOR``: a command's peak is bounded by 10 x the data it reads).
NPZ_EXPANSION = 10
#: Largest manifest read (a plant's manifest is a few kilobytes; its schema names every column).
MAX_MANIFEST_BYTES = 16 << 20
#: Deepest JSON nesting of a manifest.
MANIFEST_DEPTH = 16
#: An artifact's version: ``v`` and a counter.
_VERSION = re.compile(r"v[0-9]{1,18}")


def arrays_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 over the arrays in name order: name, dtype, shape and C-order bytes of each.

    Examples
    --------
    >>> a = {"x": np.arange(3.0)}
    >>> arrays_sha256(a) == arrays_sha256({"x": np.arange(3.0)}), arrays_sha256(a) == arrays_sha256({"x": np.ones(3)})
    (True, False)
    """
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        digest.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode("utf-8"))
        digest.update(a.tobytes(order="C"))
    return digest.hexdigest()


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON without its own ``digest`` entry.

    The manifest carries the arrays' sha256, so this one digest covers the arrays, the
    configuration hash, the schema and the privacy ledger together.

    Examples
    --------
    >>> manifest_digest({"a": 1, "b": [1.5]}) == manifest_digest({"b": [1.5], "a": 1, "digest": "x"})
    True
    """
    body = {k: v for k, v in manifest.items() if k != "digest"}
    try:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise IntegrityError(f"the manifest is not canonical JSON ({exc})") from None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json_safe(value: Any) -> Any:
    """Manifest values as strict JSON (inf/nan as strings, numpy scalars as Python ones)."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    return value


@dataclass(frozen=True)
class ParameterArtifact:
    """A plant's (or the server's) trained parameters and their manifest.

    Attributes
    ----------
    plant : plant name, or :data:`SERVER`
    version : "v<N>", N increasing per training run in an output directory
    arrays : plant: "theta" (P, F) and the augmented scorer ("scorer_a.mean", "scorer_a.whitening",
        "scorer_a.threshold", "scorer_a.ewma_start"), "nominal_state_counts"; since control inputs
        (issue 16) also "offset" (P,), "bias" (P,) and the private "whatif.*" arrays (C (D, P),
        A (P, P), B (P, U), y_scale (D,), u_scale (U,)); server: "A" (S, S), "A_stderr" (S, S),
        "state_dims" (M,) int, when any plant has inputs "B" (S, sum U), "B_stderr", "input_dims" (M,)
        int (and "rff.*" for the random-feature server model). Artifacts without the newer arrays
        stay loadable; a what-if query refuses them naming the fix.
    manifest : version, created, config_hash, sha256, arrays (dtype/shape/sha256 each), metrics,
        epsilon_spent, delta, plants (server: names in block order), model_fingerprint (plant)
    """

    plant: str
    version: str
    arrays: Mapping[str, np.ndarray]
    manifest: Mapping[str, Any] = field(default_factory=dict)

    def verify(self) -> None:
        """Raise IntegrityError when the arrays do not match the manifest's sha256 or the manifest its digest."""
        fmt = self.manifest.get("format")
        if fmt != FORMAT:
            raise IntegrityError(
                f"artifact '{self.plant}' {self.version}: format {fmt!r}, this fedrca reads {FORMAT!r}; "
                "re-run fedrca train to make new parameters"
            )
        digest = self.manifest.get("digest")
        if digest != manifest_digest(self.manifest):
            raise IntegrityError(
                f"artifact '{self.plant}' {self.version}: the manifest does not match its digest; it was edited "
                "or corrupted after training (configuration hash, schema, privacy ledger and metrics are covered): "
                "re-run fedrca train or restore the artifact"
            )
        expected = self.manifest.get("sha256")
        if not expected:
            raise IntegrityError(f"artifact '{self.plant}' {self.version}: the manifest has no sha256")
        actual = arrays_sha256(self.arrays)
        if actual != expected:
            raise IntegrityError(
                f"artifact '{self.plant}' {self.version}: sha256 of the arrays is {actual[:16]}..., the manifest "
                f"says {str(expected)[:16]}...; the parameters were corrupted or changed after training: "
                "re-run fedrca train or restore the artifact"
            )
        if self.manifest.get("plant", self.plant) != self.plant or self.manifest.get("version", self.version) != (
            self.version
        ):
            raise IntegrityError(f"artifact '{self.plant}' {self.version}: the manifest names another plant/version")


def make_artifact(
    plant: str,
    version: int | str,
    arrays: Mapping[str, np.ndarray],
    *,
    config_hash: str,
    metrics: Mapping[str, Any] | None = None,
    epsilon_spent: float = 0.0,
    delta: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ParameterArtifact:
    """Build an artifact with its manifest (sha256 of the arrays computed here)."""
    version_str = version if isinstance(version, str) else f"v{int(version)}"
    if not version_str.startswith("v") or not version_str[1:].isdigit():
        raise ArtifactError(f"artifact version must look like 'v<N>', got {version_str!r}")
    frozen = {name: np.array(a, copy=True) for name, a in arrays.items()}
    for a in frozen.values():
        a.setflags(write=False)
    manifest = {
        "format": FORMAT,
        "plant": plant,
        "version": version_str,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "config_hash": config_hash,
        "sha256": arrays_sha256(frozen),
        "arrays": {
            name: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
            for name, a in sorted(frozen.items())
        },
        "metrics": _json_safe(dict(metrics or {})),
        "epsilon_spent": _json_safe(float(epsilon_spent)),
        "delta": _json_safe(None if delta is None else float(delta)),
        **_json_safe(dict(extra or {})),
    }
    manifest["digest"] = manifest_digest(manifest)
    return ParameterArtifact(plant, version_str, frozen, manifest)


def check_binding(
    artifact: ParameterArtifact, config_hash: str, schema: Mapping[str, Any] | None = None, *, fix: str
) -> None:
    """Refuse an artifact trained under another configuration or another data schema.

    Parameters
    ----------
    artifact : a verified artifact
    config_hash : :func:`fedrca.config.parameters_hash` of the configuration in use
    schema : the plant's ``{"sensors": [...], "inputs": [...]}`` in use (plant artifacts)
    fix : the command that makes matching parameters (ends the error line)

    Raises
    ------
    ArtifactError
        naming what differs and ``fix``.
    """
    name = f"artifact '{artifact.plant}' {artifact.version}"
    trained = artifact.manifest.get("schema")
    if trained is not None and not (
        isinstance(trained, dict) and all(isinstance(v, list) and all(isinstance(c, str) for c in v)
                                          for v in trained.values())
    ):  # fmt: skip
        raise ArtifactError(f"{name}: its manifest's schema is not lists of column names; {fix}")
    if schema is not None and trained is not None and dict(trained) != dict(_json_safe(dict(schema))):
        differs = [k for k in sorted(set(trained) | set(schema)) if trained.get(k) != list(schema.get(k, []))]
        raise ArtifactError(
            f"{name} was trained on other columns ({', '.join(differs)} differ: trained "
            f"{_short(trained.get(differs[0]))}, configured {_short(schema.get(differs[0]))}); {fix}"
        )
    if artifact.manifest.get("config_hash") != config_hash:
        raise ArtifactError(
            f"{name} was trained under another configuration (its plants or training settings differ "
            f"from this one's); {fix}"
        )


def _short(columns: Any) -> str:
    names = [str(c) for c in (columns or [])]
    return "[" + ", ".join(names[:4]) + (f", ... {len(names)} in all" if len(names) > 4 else "") + "]"


def _paths(directory: str | Path, plant: str) -> tuple[Path, Path]:
    d = Path(directory)
    return d / f"{plant}.npz", d / f"{plant}.json"


def save_artifact(artifact: ParameterArtifact, directory: str | Path) -> Path:
    """Write ``<dir>/<plant>.npz`` and ``<dir>/<plant>.json`` (atomically: temp file + rename); returns the npz."""
    artifact.verify()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    npz, manifest = _paths(d, artifact.plant)
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(a) for name, a in artifact.arrays.items()})  # type: ignore[arg-type]
    for path, payload in (
        (npz, buffer.getvalue()),
        (manifest, (json.dumps(artifact.manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")),
    ):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(payload)
        os.replace(tmp, path)
    return npz


def special_file(path: str | Path) -> str | None:
    """What a path that exists but is no regular file is ('FIFO', 'character device', ...); None otherwise.

    Follows links: a link to ``/dev/zero`` is a character device. Reading one never ends (or never
    starts), so no reader of fedrca opens one.

    Examples
    --------
    >>> special_file("/dev/zero"), special_file("/nonexistent"), special_file(__file__)
    ('character device', None, None)
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, what in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return what
    return None


def read_npz(path: str | Path, *, factor: int = NPZ_EXPANSION) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, their decompressed size bounded before a byte is decompressed.

    An npz is a zip of ``.npy`` members; each member says how large it is once decompressed (the
    zip's directory) and each ``.npy`` header its dtype and shape. Before any is read, every member
    must be an ``.npy`` of a numeric dtype whose shape fits the member's size, and together they may
    hold at most ``factor`` times the file's bytes (the ``10 x data`` of docs/limits.md: fedrca
    writes uncompressed arrays, so its own files hold about 1 x). A 3.9 MB file that unpacks to
    4 GB is refused at once, not after the allocation.

    Raises
    ------
    IntegrityError
        Naming the file and what is wrong with it.
    """
    file = Path(path)
    kind = special_file(file)
    if kind is not None:
        raise IntegrityError(f"{file} is a {kind}, not a regular file; restore the file fedrca wrote")
    try:
        size = file.stat().st_size
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
            total = sum(m.file_size for m in members)
            if total > max(factor * size, 1 << 16):
                raise IntegrityError(
                    f"{file}: its arrays would take {total:,} bytes decompressed, more than {factor} x its "
                    f"{size:,} bytes (docs/limits.md): not a file fedrca wrote"
                )
            arrays: dict[str, np.ndarray] = {}
            for member in members:
                if not member.filename.endswith(".npy"):
                    raise IntegrityError(f"{file}: member {member.filename!r} is not an array (.npy)")
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    if version == (1, 0):
                        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(stream)
                    elif version == (2, 0):
                        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(stream)
                    else:
                        raise IntegrityError(f"{file}: member {member.filename!r} has .npy format {version}")
                    need = math.prod(shape) * dtype.itemsize
                    if dtype.hasobject or need > member.file_size:
                        raise IntegrityError(
                            f"{file}: member {member.filename!r} says {dtype.str} {tuple(shape)} ({need:,} bytes) in "
                            f"{member.file_size:,} bytes"
                        )
                with archive.open(member) as stream:
                    arrays[member.filename[: -len(".npy")]] = np.lib.format.read_array(stream, allow_pickle=False)
            return arrays
    except IntegrityError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
        # a 0-byte or cut-short file: BadZipFile; a bad .npy header: ValueError
        raise IntegrityError(f"{file}: unreadable array file ({short(str(exc) or 'empty', 200)})") from None


def load_artifact(directory: str | Path, plant: str) -> ParameterArtifact:
    """Read and verify one artifact.

    Raises
    ------
    ArtifactError
        When a file is missing, not a regular file, or unreadable.
    IntegrityError
        When the arrays do not match the manifest's sha256, or the npz would unpack beyond its bound.
    """
    npz, manifest_path = _paths(directory, plant)
    for path in (npz, manifest_path):
        kind = special_file(path)
        if kind is not None:
            raise ArtifactError(f"{path} is a {kind}, not a regular file: restore the artifact fedrca train wrote")
    if not npz.is_file() or not manifest_path.is_file():
        raise ArtifactError(
            f"{directory}: no artifact for '{plant}' ({npz.name} + {manifest_path.name}); run fedrca train"
        )
    try:
        raw = manifest_path.read_bytes()[: MAX_MANIFEST_BYTES + 1]
        manifest = parse_json(raw, "the manifest", max_depth=MANIFEST_DEPTH, max_bytes=MAX_MANIFEST_BYTES)
    except OSError as exc:
        reason = exc.strerror or exc
        raise ArtifactError(f"{manifest_path}: unreadable manifest ({reason}); re-run fedrca train") from None
    except MessageError as exc:
        raise ArtifactError(f"{manifest_path}: unreadable manifest ({exc.detail}); re-run fedrca train") from None
    try:
        arrays = read_npz(npz)
    except IntegrityError as exc:
        raise IntegrityError(f"{exc}; re-run fedrca train") from None
    if not isinstance(manifest, dict) or "version" not in manifest:
        raise ArtifactError(f"{manifest_path}: not a fedrca artifact manifest")
    artifact = ParameterArtifact(plant, str(manifest["version"]), arrays, manifest)
    artifact.verify()
    return artifact


def load_site_artifacts(directory: str | Path) -> dict[str, ParameterArtifact]:
    """plant -> verified artifact for every plant artifact in ``directory`` (the server's excluded)."""
    d = Path(directory)
    if not d.is_dir():
        raise ArtifactError(f"{directory}: no such artifact directory; run fedrca train --out {directory}")
    plants = sorted(p.stem for p in d.glob("*.json") if p.stem != SERVER and p.with_suffix(".npz").is_file())
    return {plant: load_artifact(d, plant) for plant in plants}


def load_server_artifact(directory: str | Path) -> ParameterArtifact:
    """The verified server artifact of ``directory``."""
    return load_artifact(directory, SERVER)


def load_artifacts(directory: str | Path) -> dict[str, ParameterArtifact]:
    """Every verified artifact of ``directory``: each plant's and, when present, the server's (key :data:`SERVER`)."""
    artifacts = load_site_artifacts(directory)
    if (Path(directory) / f"{SERVER}.json").is_file():
        artifacts[SERVER] = load_server_artifact(directory)
    return artifacts


# -- the params topic ----------------------------------------------------------------------------
def public_artifact(artifact: ParameterArtifact) -> ParameterArtifact:
    """The artifact without its private arrays (:data:`PRIVATE_PREFIX`), its sha256 and digest recomputed.

    On disk the manifest lists (and its digest covers) every array, the private ones
    included; the published manifest lists the public arrays and has a digest of its own,
    so a receiver verifies exactly what it received.

    Examples
    --------
    >>> art = make_artifact("p", 1, {"theta": np.zeros(2), "whatif.C": np.eye(2)}, config_hash="h")
    >>> public = public_artifact(art)
    >>> sorted(public.arrays), sorted(public.manifest["arrays"]), public.verify()
    (['theta'], ['theta'], None)
    """
    artifact.verify()
    private = [name for name in artifact.arrays if name.startswith(PRIVATE_PREFIX)]
    if not private:
        return artifact
    arrays = {name: a for name, a in artifact.arrays.items() if name not in private}
    manifest = dict(artifact.manifest)
    manifest["sha256"] = arrays_sha256(arrays)
    manifest["arrays"] = {k: v for k, v in dict(manifest.get("arrays", {})).items() if k not in private}
    manifest["digest"] = manifest_digest(manifest)
    return ParameterArtifact(artifact.plant, artifact.version, arrays, manifest)


def encode_published_artifact(artifact: ParameterArtifact) -> bytes:
    """The value of a ``<site>.params`` record (key = plant): manifest + public arrays in one byte string."""
    artifact = public_artifact(artifact)
    return pack_arrays(
        "artifact",
        {"plant": artifact.plant, "version": artifact.version, "manifest": dict(artifact.manifest)},
        {name: np.asarray(a) for name, a in artifact.arrays.items()},
    )


def decode_published_artifact(raw: bytes) -> tuple[str, ParameterArtifact]:
    """Inverse of :func:`encode_published_artifact`: (plant, verified artifact).

    Raises
    ------
    IntegrityError
        When the arrays do not match the manifest's sha256 (tampered or corrupted record).
    ArtifactError
        When the bytes are not an artifact record at all.
    """
    try:
        kind, meta, arrays = unpack_arrays(raw, max_bytes=MAX_RECORD_BYTES)
    except MessageError as exc:
        raise ArtifactError(f"not a parameter artifact record ({exc})") from None
    if kind != "artifact":
        raise ArtifactError(f"not a parameter artifact record (a {short(kind)} message)")
    plant, version, manifest = meta.get("plant"), meta.get("version"), meta.get("manifest")
    if not isinstance(plant, str) or not 0 < len(plant) <= MAX_NAME_CHARS:
        raise ArtifactError(f"artifact record header names no plant (plant {short(plant)})")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ArtifactError(f"artifact record of '{short(plant)}': version {short(version)} is not 'v<N>'")
    if not isinstance(manifest, dict):
        raise ArtifactError(f"artifact record of '{short(plant)}': its manifest is not an object")
    artifact = ParameterArtifact(plant, version, arrays, manifest)
    artifact.verify()
    return plant, artifact
