"""The one checked path every command loads a training run's artifacts through (``--params DIR``).

``replay``, ``evaluate``, ``run``, ``publish-params``, ``whatif`` and the demo read the
artifacts of ``fedrca train --out DIR`` with :func:`load_params`, which refuses, with one
line naming the folder, the file and the fix:

* a folder that is missing, holds no artifact, or holds half an artifact (a manifest without
  its arrays or the reverse), an empty (0-byte) or unreadable file;
* an artifact whose arrays or manifest do not match their digests (edited or corrupted:
  :meth:`~fedrca.contracts.ParameterArtifact.verify`);
* artifacts of different training runs mixed in one folder (more than one configuration hash,
  version or run id: every artifact of a run carries its ``run_id``): their blocks do not belong
  together;
* a file that is no regular file (a FIFO, a link to ``/dev/zero``: reading it would never end) or a
  link to nothing, and arrays that would unpack beyond ten times their file
  (:func:`~fedrca.contracts.artifacts.read_npz`);
* artifacts trained under another configuration or on other columns than the one in use
  (:func:`~fedrca.contracts.check_binding`), and artifacts of plants the site does not have;
* an incomplete run: a plant the command needs without its artifact (a what-if query would
  otherwise answer with unit scales), or the server's artifact when it is needed.

Guarded by ``tests/cli/test_hostile_cli.py`` (the ``params-*`` cases of every command).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from fedrca.config import SiteConfig, parameters_hash
from fedrca.contracts import SERVER, ParameterArtifact, check_binding, load_artifact
from fedrca.contracts.artifacts import special_file
from fedrca.exceptions import ArtifactError

__all__ = ["load_params"]


def _retrain(config: SiteConfig | None, directory: Path) -> str:
    where = config.source if config is not None and config.source else "CONFIG"
    return f"re-run fedrca train --config {where} --data NOMINAL --out {directory}"


def _files(option: str, directory: Path, fix: str) -> list[str]:
    """The artifact names of ``directory`` (each a complete ``.npz`` + ``.json`` pair of non-empty files)."""
    if directory.exists() and not directory.is_dir():
        raise ArtifactError(f"{option} {directory} is a file; give the folder fedrca train --out wrote")
    if not directory.is_dir():
        raise ArtifactError(f"{option} {directory}: no such artifact directory; write one with fedrca train --out DIR")
    stems: dict[str, set[str]] = {}
    for path in directory.iterdir():
        if path.suffix in (".npz", ".json") and not path.name.startswith("."):
            kind = special_file(path)
            if kind is not None:
                # a FIFO never ends a read, a link to /dev/zero never ends either: name it, never open it
                raise ArtifactError(f"{option} {path} is a {kind}, not a regular file; restore the artifact, or {fix}")
            if not path.is_file():
                if path.is_symlink():
                    raise ArtifactError(f"{option} {path} is a link to nothing ({os.readlink(path)}); restore it, "
                                        f"or {fix}")  # fmt: skip
                continue
            stems.setdefault(path.stem, set()).add(path.suffix)
    for stem, suffixes in sorted(stems.items()):
        if len(suffixes) == 1:
            have = next(iter(suffixes))
            lack = ".json" if have == ".npz" else ".npz"
            raise ArtifactError(
                f"{option} {directory}: {stem}{have} has no {stem}{lack} beside it (half an artifact); restore it, "
                f"or {fix}"
            )
        for suffix in (".npz", ".json"):
            file = directory / f"{stem}{suffix}"
            if file.stat().st_size == 0:
                raise ArtifactError(
                    f"{option} {file} is empty (0 bytes): the artifact was cut short; restore it, or {fix}"
                )
    if not stems:
        raise ArtifactError(f"{option} {directory}: holds no artifacts (<plant>.npz + .json); {fix}")
    return sorted(stems)


def _one_run(option: str, directory: Path, artifacts: dict[str, ParameterArtifact], fix: str) -> None:
    """Refuse artifacts of several training runs (configuration hashes, versions or run ids) in one folder.

    Every artifact of a run carries the run's id (``run_id``, covered by its digest): a plant's pair
    copied in from another run of the same configuration and version is refused too.
    """
    for key, what in (("config_hash", "configurations"), ("version", "versions"), ("run_id", "run ids")):
        groups: dict[str, list[str]] = {}
        for name, artifact in artifacts.items():
            groups.setdefault(str(artifact.manifest.get(key)), []).append(name)
        if len(groups) > 1:
            described = "; ".join(
                f"{(value[:12] if key != 'version' else value)}: {', '.join(names)}"
                for value, names in sorted(groups.items())
            )
            raise ArtifactError(
                f"{option} {directory}: artifacts of different training runs ({what} {described}); keep one run's "
                f"artifacts in a folder: {fix}"
            )


def load_params(
    directory: str | Path,
    config: SiteConfig | None = None,
    *,
    plants: Sequence[str] | None = None,
    server: bool = False,
    option: str = "--params",
) -> dict[str, ParameterArtifact]:
    """Every verified artifact of a training run's folder (plant -> artifact, the server's under ``_server``).

    Parameters
    ----------
    directory : the folder ``fedrca train --out`` wrote
    config : the configuration in use: every artifact must be trained under it (configuration hash,
        each plant's columns when resolved), and name only its plants
    plants : the plants whose artifacts must be there (default: with ``config``, every plant with a
        trainable detector; without, every plant the server's artifact names)
    server : the server's artifact must be there
    option : the command-line option that named the folder (for the messages)

    Raises
    ------
    ArtifactError
        (an :class:`~fedrca.exceptions.IntegrityError` for a digest mismatch) naming the folder,
        the file or plant, and the fix.
    """
    folder = Path(directory)
    fix = _retrain(config, folder)
    names = _files(option, folder, fix)
    artifacts: dict[str, ParameterArtifact] = {}
    for name in names:
        try:
            artifacts[name] = load_artifact(folder, name)
        except ArtifactError as exc:
            where = f"{option} " if str(exc).startswith(str(folder)) else f"{option} {folder}: "
            raise type(exc)(f"{where}{exc}") from None
    _one_run(option, folder, artifacts, fix)
    if config is not None:
        unknown = sorted(set(artifacts) - {*config.plant_names, SERVER})
        if unknown:
            raise ArtifactError(
                f"{option} {folder} holds artifacts of plant(s) {', '.join(unknown)} that site '{config.site}' does "
                f"not have; give the artifacts trained with this configuration, or {fix}"
            )
        expected = parameters_hash(config)
        for name, artifact in artifacts.items():
            plant = next((p for p in config.plants if p.name == name), None)
            schema = plant.data_schema() if plant is not None and plant.resolved else None
            check_binding(artifact, expected, schema, fix=fix)
    if server and SERVER not in artifacts:
        raise ArtifactError(f"{option} {folder}: no server artifact ({SERVER}.npz + .json); {fix}")
    if plants is None:
        if config is not None:
            plants = [p.name for p in config.plants if p.detector.kind != "fleet"]
        elif SERVER in artifacts:
            plants = [str(p) for p in artifacts[SERVER].manifest.get("plants") or []]
        else:
            plants = []
    missing = [p for p in plants if p not in artifacts]
    if missing:
        raise ArtifactError(f"{option} {folder}: no artifact for plant(s) {', '.join(missing)}; {fix}")
    return artifacts
