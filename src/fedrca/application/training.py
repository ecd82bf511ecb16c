"""Running a training job from the shell: checkpoints on disk, versioned artifacts, progress lines.

The job itself (:class:`~fedrca.training.federated.FederatedTraining`) is pure; this
module gives it files: after every completed round the job's state goes to
``<out>/checkpoint/round-<N>`` (written to a temporary directory, then renamed, and
``LATEST`` pointed at it), so an interrupted run resumes from the last completed
round; at the end the artifacts are written to ``<out>`` under the next free version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd

from fedrca.application.outputs import (
    TMP_PREFIX,
    Outputs,
    cannot_write,
    make_parents,
    remove_created,
    staged_folder,
    write_file,
)
from fedrca.application.site import build_detectors
from fedrca.config import SiteConfig, TrainingSettings
from fedrca.contracts import save_artifact
from fedrca.contracts.artifacts import MAX_MANIFEST_BYTES, arrays_sha256, read_npz, special_file
from fedrca.contracts.bounds import parse_json
from fedrca.datasets.loader import PlantData, plant_frames
from fedrca.detectors.factory import frame_segments
from fedrca.exceptions import ArtifactError, IntegrityError, MessageError
from fedrca.training.federated import FederatedTraining, PartyState, TrainingResult, TrainingState

__all__ = ["CHECKPOINT_DIR", "load_checkpoint", "next_version", "run_training", "save_checkpoint", "train_site"]

CHECKPOINT_DIR = "checkpoint"


def next_version(directory: str | Path) -> int:
    """1 + the highest artifact version in ``directory`` (1 when there is none)."""
    best = 0
    d = Path(directory)
    if d.is_dir():
        for path in d.glob("*.json"):
            try:
                version = str(json.loads(path.read_text(encoding="utf-8")).get("version", ""))
            except (OSError, ValueError, AttributeError):
                continue
            if version.startswith("v") and version[1:].isdigit():
                best = max(best, int(version[1:]))
    return best + 1


def _save_party(path: Path, party: PartyState) -> None:
    arrays, meta = party
    np.savez(path.with_suffix(".npz"), **{k: np.asarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]
    path.with_suffix(".json").write_text(json.dumps(meta, default=float), encoding="utf-8")


def _load_party(path: Path) -> PartyState:
    """A party's checkpointed arrays and metadata, read within the bounds of an artifact (read_npz, parse_json);
    ValueError when they are not (the caller's "unreadable checkpoint")."""
    try:
        arrays = read_npz(path.with_suffix(".npz"))
    except ArtifactError as exc:
        raise ValueError(str(exc)) from None
    return arrays, _json_file(path.with_suffix(".json"))


def _json_file(path: Path) -> Any:
    kind = special_file(path)
    if kind is not None:
        raise ValueError(f"{path} is a {kind}, not a regular file")
    try:
        return parse_json(path.read_bytes()[: MAX_MANIFEST_BYTES + 1], path.name, max_depth=16,
                          max_bytes=MAX_MANIFEST_BYTES)  # fmt: skip
    except MessageError as exc:
        raise ValueError(f"{path}: {exc.detail}") from None


def _checkpoint_digest(meta: Mapping[str, Any], parties: Mapping[str, PartyState]) -> str:
    """sha256 over the checkpoint's metadata and every party's arrays and metadata (the accountants too)."""
    digest = hashlib.sha256()
    body = {k: v for k, v in meta.items() if k != "sha256"}
    digest.update(json.dumps(body, sort_keys=True, default=float).encode("utf-8"))
    for name in sorted(parties):
        arrays, party_meta = parties[name]
        digest.update(name.encode("utf-8"))
        digest.update(arrays_sha256(arrays).encode("ascii"))
        digest.update(json.dumps(party_meta, sort_keys=True, default=float).encode("utf-8"))
    return digest.hexdigest()


def save_checkpoint(job: FederatedTraining, directory: Path, version: int) -> None:
    """Write the job's state after its last completed round to ``directory/round-<N>`` and point LATEST at it.

    The round is written into a temporary folder and renamed: a failed write (a full disk)
    removes it and raises one :class:`~fedrca.exceptions.OutputError` line; the previous
    round's checkpoint stays the one a rerun resumes from.
    """
    state = job.get_state()
    target = directory / f"round-{state.round:06d}"
    tmp = directory / f"{TMP_PREFIX}round-{state.round:06d}"
    created: list[Path] = []
    try:
        created = make_parents(directory)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        for plant, party in state.clients.items():
            _save_party(tmp / f"client-{plant}", party)
        _save_party(tmp / "server", state.server)
        meta = {
            "round": state.round,
            "version": version,
            "config_hash": state.config_hash,
            "data_hash": state.data_hash,
            "bytes_up": state.bytes_up,
            "bytes_down": state.bytes_down,
            "raw_bytes": state.raw_bytes,
        }
        parties = {**{f"client-{plant}": party for plant, party in state.clients.items()}, "server": state.server}
        # what was written, read back: the digest must cover the bytes a resume will see
        meta["sha256"] = _checkpoint_digest(meta, {name: _load_party(tmp / name) for name in parties})
        (tmp / "state.json").write_text(json.dumps(meta), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        write_file(directory / "LATEST", target.name)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_created(created)  # a first checkpoint that failed leaves no empty folders either
        raise cannot_write(None, directory, exc) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for old in directory.glob("round-*"):
        if old != target:
            shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(job: FederatedTraining, directory: Path) -> int | None:
    """Restore the job from the last completed round in ``directory``; its artifact version (None: no checkpoint).

    Raises
    ------
    ArtifactError
        When the checkpoint is unreadable or was made with another configuration or other data.
    """
    latest = directory / "LATEST"
    if not latest.is_file():
        return None
    try:
        target = directory / latest.read_text(encoding="utf-8").strip()
        meta = _json_file(target / "state.json")
        clients = {plant: _load_party(target / f"client-{plant}") for plant in job.clients}
        server = _load_party(target / "server")
        parties = {**{f"client-{plant}": party for plant, party in clients.items()}, "server": server}
        if meta.get("sha256") != _checkpoint_digest(meta, parties):
            raise IntegrityError(
                f"{target}: the checkpoint does not match its digest; it was edited or corrupted after it was "
                "written (the privacy accountants are covered); rerun with --fresh"
            )
        state = TrainingState(
            round=int(meta["round"]),
            clients=clients,
            server=server,
            config_hash=str(meta["config_hash"]),
            data_hash=str(meta["data_hash"]),
            bytes_up=dict(meta["bytes_up"]),
            bytes_down=dict(meta["bytes_down"]),
            raw_bytes=dict(meta["raw_bytes"]),
        )
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        zipfile.BadZipFile,
        EOFError,
    ) as exc:
        raise ArtifactError(f"{directory}: unreadable checkpoint ({exc}); rerun with --fresh") from None
    try:
        job.set_state(state)
    except (ValueError, KeyError, TypeError, IndexError) as exc:  # arrays of other shapes than this run's
        raise ArtifactError(
            f"{directory}: the checkpoint does not fit this run ({type(exc).__name__}: {exc}); rerun with --fresh"
        ) from None
    except ArtifactError as exc:
        raise ArtifactError(
            f"{directory}: {exc}; rerun with --fresh to start over (or use another --out directory)"
        ) from None
    return int(meta["version"])


def _progress_line(job: FederatedTraining, rounds: int, started: float) -> str:
    done = job.round
    width = 20
    filled = int(width * done / rounds)
    losses = " ".join(f"{p}={c.history[-1]['loss']:.4g}" for p, c in job.clients.items() if c.history)
    eps = max(c.epsilon_spent() for c in job.clients.values())
    eps_text = f" eps={eps:.3g}" if eps > 0 else ""
    return (
        f"round {done:>3}/{rounds} [{'#' * filled}{'.' * (width - filled)}] client loss {losses} | "
        f"server loss {job.server.loss:.4g}{eps_text} ({time.perf_counter() - started:.1f} s)"
    )


def run_training(
    job: FederatedTraining,
    out: str | Path | None = None,
    *,
    rounds: int | None = None,
    resume: bool = True,
    stop_after: int | None = None,
    progress: TextIO | None = None,
    header: str | None = None,
    outputs: Outputs | None = None,
    min_version: int = 1,
) -> TrainingResult:
    """Run (or resume) a job with checkpoints in ``out/checkpoint`` and write its artifacts to ``out``.

    Parameters
    ----------
    job : the training job
    out : output directory (artifacts + ``checkpoint/``); None keeps everything in memory
    rounds : total rounds (default: ``training.rounds``)
    resume : continue from the checkpoint in ``out`` when there is one
    stop_after : stop after this many rounds in this call (to test resuming); no artifacts then
    progress : stream for one progress line per round (None = quiet)
    header : a line printed to ``progress`` once the checkpoint was read (nothing is printed
        before a run is known to start)
    outputs : the command's output plan with ``out`` as its ``--out`` folder: the artifacts are
        staged in it and appear with the command's other outputs; without it they are staged and
        moved into ``out`` at the end of this call (either way a set of artifacts appears whole)
    min_version : the lowest version the artifacts may take (the one after the artifacts the plants run
        now, for a refresh round written elsewhere)
    """
    started = time.perf_counter()
    total = rounds if rounds is not None else job.settings.rounds
    out_dir = None if out is None else Path(out)
    checkpoints = None if out_dir is None else out_dir / CHECKPOINT_DIR
    version = None
    if checkpoints is not None:
        if not resume and checkpoints.exists():
            shutil.rmtree(checkpoints)
        version = load_checkpoint(job, checkpoints) if resume else None
    if version is None:
        version = max(next_version(out_dir) if out_dir is not None else 1, min_version)
    elif out_dir is not None and job.round < total and next_version(out_dir) > version:
        # that run finished and published v<version>: continuing it makes new parameters, a new version
        version = next_version(out_dir)
    if progress is not None and header is not None:
        print(header, file=progress, flush=True)
    if progress is not None and job.round:
        print(f"resuming from round {job.round} ({checkpoints})", file=progress, flush=True)

    def after_round(j: FederatedTraining) -> None:
        if checkpoints is not None:
            save_checkpoint(j, checkpoints, version)
        if progress is not None:
            print(_progress_line(j, total, started), file=progress, flush=True)

    result = job.run(rounds=total, stop_after=stop_after, on_round=after_round, version=version)
    if out_dir is not None and result.artifacts:
        with outputs.folder("--out") if outputs is not None else staged_folder(out_dir) as stage:
            for artifact in result.artifacts.values():
                save_artifact(artifact, stage)
    return result


def train_site(
    config: SiteConfig,
    nominal: pd.DataFrame | Mapping[str, PlantData],
    out: str | Path | None = None,
    *,
    settings: TrainingSettings | None = None,
    rounds: int | None = None,
    resume: bool = True,
    progress: TextIO | None = sys.stderr,
    source: str = "nominal data",
    **job_options: Any,
) -> TrainingResult:
    """Fit the site's detectors on nominal data, train them federatedly and write the artifacts to ``out``."""
    segments = frame_segments(nominal) if isinstance(nominal, pd.DataFrame) else None
    data = plant_frames(config, nominal, source) if isinstance(nominal, pd.DataFrame) else dict(nominal)
    if segments is not None:
        job_options.setdefault("segments", segments)
    # checks the nominal data first
    detectors = build_detectors(config, data, source=source, segments=job_options.get("segments"))
    job = FederatedTraining(config, data, detectors=detectors, settings=settings, **job_options)
    return run_training(job, out, rounds=rounds, resume=resume, progress=progress)
