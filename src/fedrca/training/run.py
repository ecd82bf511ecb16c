"""Orchestration of a site's federated training: clients + server + transport, rounds, checkpoints, artifacts.

:class:`FederatedTraining` wires one :class:`~fedrca.training.client.Client` per plant
and the :class:`~fedrca.training.server.Server` through a transport (the in-process
one by default; the byte messages are the ones that travel on ``<site>.train.<plant>``),
runs the rounds, checkpoints after every completed round (so an interrupted run
resumes from the last completed round) and finally writes one artifact per plant
(Theta + the augmented scorer re-calibrated on the nominal data with that Theta) and
the server artifact.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np
import pandas as pd

from fedrca.config import SiteConfig
from fedrca.detectors.plant import PlantDetector
from fedrca.exceptions import ArtifactError, ConfigError, PrivacyBudgetExceeded
from fedrca.site import PlantData, build_detectors, plant_frames
from fedrca.training.artifacts import (
    NOMINAL_STATE_COUNTS,
    SERVER,
    ParameterArtifact,
    make_artifact,
    model_fingerprint,
    save_artifact,
    scorer_arrays,
)
from fedrca.training.client import Client
from fedrca.training.messages import (
    GradientMessage,
    InProcessTransport,
    StatesMessage,
    decode_message,
    encode_message,
)
from fedrca.training.privacy import gaussian_epsilon
from fedrca.training.server import Server
from fedrca.training.settings import TrainingSettings, training_settings

__all__ = [
    "FederatedTraining",
    "TrainingResult",
    "Transport",
    "config_hash",
    "data_hash",
    "next_version",
    "train_site",
]

CHECKPOINT_DIR = "checkpoint"


class Transport(Protocol):
    """What the orchestration needs from a message bus (in-process or Kafka)."""

    def publish(self, topic: str, key: str, value: bytes) -> None: ...

    def consume(self, topic: str, group: str) -> list[tuple[str, bytes]]: ...


def config_hash(config: SiteConfig) -> str:
    """sha256 of the configuration's canonical JSON (what the artifacts were trained with)."""
    payload = json.dumps(config.model_dump(mode="python"), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def data_hash(data: Mapping[str, PlantData]) -> str:
    """sha256 of the training arrays of every plant (to refuse resuming on other data)."""
    digest = hashlib.sha256()
    for name in sorted(data):
        digest.update(name.encode("utf-8"))
        digest.update(np.ascontiguousarray(data[name].Y).tobytes())
        if data[name].U is not None:
            digest.update(np.ascontiguousarray(data[name].U).tobytes())
    return digest.hexdigest()


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


def _save_party(path: Path, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
    np.savez(path.with_suffix(".npz"), **{k: np.asarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]
    path.with_suffix(".json").write_text(json.dumps(meta, default=float), encoding="utf-8")


def _load_party(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))


@dataclass
class TrainingResult:
    """What a run produced: the trained detectors, artifacts and the figures of the final table."""

    detectors: dict[str, PlantDetector]
    artifacts: dict[str, ParameterArtifact]
    clients: dict[str, Client]
    server: Server
    rounds: int
    resumed_from: int
    seconds: float
    bytes_up: dict[str, float] = field(default_factory=dict)
    bytes_down: dict[str, float] = field(default_factory=dict)
    raw_bytes: dict[str, float] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """Per plant: client loss before/after, server loss, bytes per round vs raw, epsilon spent."""
        rows = []
        for plant, client in self.clients.items():
            summary = client.accountant.summary()
            rows.append(
                {
                    "plant": plant,
                    "states": client.state_dim,
                    "client loss before": round(client.initial_loss, 5),
                    "client loss after": round(client.reconstruction_loss(), 5),
                    "server loss": round(self.server.losses.get(plant, math.nan), 5),
                    "bytes/round up": round(self.bytes_up.get(plant, 0.0)),
                    "bytes/round down": round(self.bytes_down.get(plant, 0.0)),
                    "raw bytes/round": round(self.raw_bytes.get(plant, 0.0)),
                    "epsilon": _fmt_eps(summary["epsilon"]),
                }
            )
        return pd.DataFrame(rows)


def _fmt_eps(value: float) -> str:
    return "0 (no noise)" if value == 0.0 else f"{value:.3g}"


class FederatedTraining:
    """One site's training job.

    Parameters
    ----------
    config : the site configuration (its ``training:`` section gives the settings)
    data : per-plant nominal data on a common time axis
    detectors : fitted detectors per plant (built and fitted on ``data`` when None)
    settings : overrides the configuration's training settings
    transport : message bus (in-process by default)
    progress : stream for progress lines (stderr by default; None = quiet)
    """

    def __init__(
        self,
        config: SiteConfig,
        data: Mapping[str, PlantData],
        detectors: Mapping[str, PlantDetector] | None = None,
        settings: TrainingSettings | None = None,
        transport: Transport | None = None,
        progress: TextIO | None = sys.stderr,
    ) -> None:
        self.config = config
        self.settings = settings if settings is not None else training_settings(config)
        self.data = dict(data)
        lengths = {len(d.Y) for d in self.data.values()}
        if len(lengths) != 1:
            raise ArtifactError(f"plants' training data must share one time axis, got lengths {sorted(lengths)}")
        self.detectors = dict(detectors) if detectors is not None else build_detectors(config, self.data)
        fleet = [name for name, det in self.detectors.items() if not getattr(det, "has_augmented", True)]
        if fleet:
            raise ConfigError(
                f"plant(s) {', '.join(fleet)} use the fleet detector, which has no augmentation to train; "
                "federated training needs detector.kind: plant for every plant",
                source=config.source,
            )
        self.transport: Transport = transport if transport is not None else InProcessTransport()
        self.progress = progress
        s = self.settings
        plants = config.plant_names
        self.clients = {
            name: Client(
                self.detectors[name],
                self.data[name].Y,
                self.data[name].U,
                settings=s,
                n_plants=len(plants),
                seed=s.seed * 7919 + 2 * i + 1,
            )
            for i, name in enumerate(plants)
        }
        first = next(iter(self.clients.values()))
        self.server = Server(
            plants,
            [self.clients[p].state_dim for p in plants],
            first.data.n_samples,
            first.data.first_row,
            s,
            features=s.resolved_server_features(config),
            seed=s.seed * 7919,
        )
        self.round = 0
        self._bytes_up = dict.fromkeys(plants, 0)
        self._bytes_down = dict.fromkeys(plants, 0)
        self._raw_bytes = dict.fromkeys(plants, 0)
        self.config_hash = config_hash(config)
        self.data_hash = data_hash(self.data)

    # -- rounds ---------------------------------------------------------------------------------
    def topic(self, plant: str) -> str:
        """The plant's training topic (``<site>.train.<plant>``)."""
        return self.config.topic("train", plant=plant)

    def check(self, rounds: int) -> None:
        """Refuse learning rates that would not converge and runs that would pass the privacy budget."""
        shared = self.settings.estimator == "gd"
        for client in self.clients.values():
            client.check_convergence(shared=shared)
        for plant, client in self.clients.items():
            budget = self.settings.privacy.budget
            if math.isinf(budget):
                continue
            counts = np.zeros(client.data.n_samples)
            planned = client.accountant.total_mu2().copy()
            affordable = None
            for r in range(self.round, rounds):
                rows = client.window(r)
                counts[rows] += 1
                planned[rows] += client.round_mu2(r)
                eps = gaussian_epsilon(math.sqrt(float(planned.max())), client.accountant.delta)
                if eps > budget and affordable is None:
                    affordable = r - self.round
                    break
            if affordable is not None:
                total = planned.copy()
                for r in range(self.round + affordable + 1, rounds):
                    total[client.window(r)] += client.round_mu2(r)
                eps_total = gaussian_epsilon(math.sqrt(float(total.max())), client.accountant.delta)
                raise PrivacyBudgetExceeded(
                    f"plant '{plant}': {rounds - self.round} more round(s) would spend epsilon {eps_total:.3g} "
                    f"(delta={client.accountant.delta:g}), above training.privacy.budget = {budget:g}; at most "
                    f"{affordable} round(s) fit: lower training.rounds, lower the per-release epsilons "
                    "(more noise) or raise the budget"
                )

    def run_round(self) -> None:
        """One communication round: states up, gradients down, client steps."""
        r = self.round
        for plant, client in self.clients.items():
            raw = encode_message(client.states_message(r))
            self.transport.publish(self.topic(plant), plant, raw)
            self._bytes_up[plant] += len(raw)
            rows = client.window(r)
            self._raw_bytes[plant] += (rows.stop - rows.start) * client.data.y_model.shape[1] * 8
        for plant in self.clients:
            for _, raw in self.transport.consume(self.topic(plant), "server"):
                message = decode_message(raw)
                if isinstance(message, StatesMessage):
                    self.server.receive(message)
        for plant, message in self.server.respond().items():
            raw = encode_message(message)
            self.transport.publish(self.topic(plant), SERVER, raw)
            self._bytes_down[plant] += len(raw)
        for plant, client in self.clients.items():
            for _, raw in self.transport.consume(self.topic(plant), f"client-{plant}"):
                message = decode_message(raw)
                if isinstance(message, GradientMessage):
                    client.apply_gradient(message)
        self.round += 1

    def _progress(self, rounds: int, started: float) -> None:
        if self.progress is None:
            return
        done = self.round
        width = 20
        filled = int(width * done / rounds)
        losses = " ".join(f"{p}={c.history[-1]['loss']:.4g}" for p, c in self.clients.items() if c.history)
        eps = max(c.accountant.epsilon() for c in self.clients.values())
        eps_text = f" eps={eps:.3g}" if eps > 0 else ""
        print(
            f"round {done:>3}/{rounds} [{'#' * filled}{'.' * (width - filled)}] client loss {losses} | "
            f"server loss {self.server.loss:.4g}{eps_text} ({time.perf_counter() - started:.1f} s)",
            file=self.progress,
            flush=True,
        )

    # -- checkpoints ----------------------------------------------------------------------------------
    def save_checkpoint(self, directory: Path, version: int) -> None:
        """Write the state after the last completed round to ``directory/round-<N>`` and point LATEST at it."""
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / f"round-{self.round:06d}"
        tmp = directory / f".tmp-round-{self.round:06d}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        for plant, client in self.clients.items():
            _save_party(tmp / f"client-{plant}", *client.get_state())
        _save_party(tmp / "server", *self.server.get_state())
        meta = {
            "round": self.round,
            "version": version,
            "config_hash": self.config_hash,
            "data_hash": self.data_hash,
            "bytes_up": self._bytes_up,
            "bytes_down": self._bytes_down,
            "raw_bytes": self._raw_bytes,
        }
        (tmp / "state.json").write_text(json.dumps(meta), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        latest = directory / "LATEST"
        latest_tmp = directory / "LATEST.tmp"
        latest_tmp.write_text(target.name, encoding="utf-8")
        os.replace(latest_tmp, latest)
        for old in directory.glob("round-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, directory: Path) -> int | None:
        """Restore the last completed round from ``directory``; returns its artifact version (None: nothing)."""
        latest = directory / "LATEST"
        if not latest.is_file():
            return None
        target = directory / latest.read_text(encoding="utf-8").strip()
        try:
            meta = json.loads((target / "state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"{target}: unreadable checkpoint ({exc}); rerun with --fresh") from None
        if meta["config_hash"] != self.config_hash or meta["data_hash"] != self.data_hash:
            which = "configuration" if meta["config_hash"] != self.config_hash else "training data"
            raise ArtifactError(
                f"{directory}: the checkpoint was made with another {which}; rerun with --fresh to start over "
                "(or use another --out directory)"
            )
        for plant, client in self.clients.items():
            client.set_state(*_load_party(target / f"client-{plant}"))
        self.server.set_state(*_load_party(target / "server"))
        self.round = int(meta["round"])
        self._bytes_up = {k: int(v) for k, v in meta["bytes_up"].items()}
        self._bytes_down = {k: int(v) for k, v in meta["bytes_down"].items()}
        self._raw_bytes = {k: int(v) for k, v in meta["raw_bytes"].items()}
        return int(meta["version"])

    # -- the whole run ------------------------------------------------------------------------------
    def run(
        self,
        out: str | Path | None = None,
        rounds: int | None = None,
        resume: bool = True,
        stop_after: int | None = None,
        on_round: Callable[[FederatedTraining], None] | None = None,
    ) -> TrainingResult:
        """Run (or resume) the training and write the artifacts to ``out`` (when given).

        Parameters
        ----------
        out : output directory (artifacts + ``checkpoint/``); None keeps everything in memory
        rounds : total rounds (default: ``training.rounds``)
        resume : continue from the checkpoint in ``out`` when there is one
        stop_after : stop after this many rounds in this call (to test resuming); no artifacts then
        on_round : called after every completed round
        """
        started = time.perf_counter()
        total = rounds if rounds is not None else self.settings.rounds
        out_dir = None if out is None else Path(out)
        checkpoints = None if out_dir is None else out_dir / CHECKPOINT_DIR
        version = None
        if checkpoints is not None:
            if not resume and checkpoints.exists():
                shutil.rmtree(checkpoints)
            version = self.load_checkpoint(checkpoints) if resume else None
        if version is None:
            version = next_version(out_dir) if out_dir is not None else 1
        elif out_dir is not None and self.round < total and next_version(out_dir) > version:
            # that run finished and published v<version>: continuing it makes new parameters, a new version
            version = next_version(out_dir)
        resumed_from = self.round
        if self.progress is not None and resumed_from:
            print(f"resuming from round {resumed_from} ({checkpoints})", file=self.progress, flush=True)
        self.check(total)
        done_here = 0
        while self.round < total:
            if stop_after is not None and done_here >= stop_after:
                break
            self.run_round()
            done_here += 1
            if checkpoints is not None:
                self.save_checkpoint(checkpoints, version)
            self._progress(total, started)
            if on_round is not None:
                on_round(self)
        artifacts: dict[str, ParameterArtifact] = {}
        if self.round >= total:
            artifacts = self.finalize(version)
            if out_dir is not None:
                for artifact in artifacts.values():
                    save_artifact(artifact, out_dir)
        n = max(self.round, 1)
        return TrainingResult(
            detectors=self.detectors,
            artifacts=artifacts,
            clients=self.clients,
            server=self.server,
            rounds=self.round,
            resumed_from=resumed_from,
            seconds=time.perf_counter() - started,
            bytes_up={p: v / n for p, v in self._bytes_up.items()},
            bytes_down={p: v / n for p, v in self._bytes_down.items()},
            raw_bytes={p: v / n for p, v in self._raw_bytes.items()},
        )

    def finalize(self, version: int) -> dict[str, ParameterArtifact]:
        """Install the trained Theta in every detector, re-calibrate its augmented scorer, build the artifacts."""
        artifacts: dict[str, ParameterArtifact] = {}
        delta = self.settings.privacy.delta
        n = max(self.round, 1)
        for plant, client in self.clients.items():
            det = self.detectors[plant]
            det.set_parameters(client.theta, version=f"v{version}")
            scorer = det.calibrate_augmented(self.data[plant].Y, self.data[plant].U)
            det.set_parameters(client.theta, scorer_a=scorer, version=f"v{version}")
            summary = client.accountant.summary()
            # The RCA's only knowledge of this plant's detector: how often each flag state occurs
            # on nominal data (aggregate counts, no sample travels).
            saved = copy.deepcopy(det.get_state())
            det.reset()
            nominal = det.step_batch(self.data[plant].Y, self.data[plant].U)
            det.set_state(saved)
            det.reset()
            state_counts = np.bincount(2 * nominal.zc.astype(np.int64) + nominal.za, minlength=4)
            metrics = {
                "rounds": self.round,
                "client_loss_before": client.initial_loss,
                "client_loss_after": client.reconstruction_loss(),
                "server_loss": self.server.losses.get(plant, math.nan),
                "bytes_per_round_up": self._bytes_up[plant] / n,
                "bytes_per_round_down": self._bytes_down[plant] / n,
                "raw_bytes_per_round": self._raw_bytes[plant] / n,
                "states_clipped": client.clipped,
            }
            artifacts[plant] = make_artifact(
                plant,
                version,
                {"theta": client.theta, **scorer_arrays(scorer), NOMINAL_STATE_COUNTS: state_counts},
                config_hash=self.config_hash,
                metrics=metrics,
                epsilon_spent=summary["epsilon"],
                delta=delta,
                extra={"model_fingerprint": model_fingerprint(det), "privacy": summary},
            )
        eps = [c.accountant.epsilon() for c in self.clients.values()]
        artifacts[SERVER] = make_artifact(
            SERVER,
            version,
            self.server.artifact_arrays(),
            config_hash=self.config_hash,
            metrics={"rounds": self.round, "server_loss": self.server.loss, "losses": self.server.losses},
            epsilon_spent=max(eps) if eps else 0.0,
            delta=delta,
            extra={
                "plants": list(self.clients),
                "estimator": self.settings.estimator,
                "features": self.server.features,
            },
        )
        return artifacts


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
) -> TrainingResult:
    """Fit the site's detectors on nominal data, train them federatedly and write the artifacts to ``out``."""
    data = plant_frames(config, nominal, source) if isinstance(nominal, pd.DataFrame) else dict(nominal)
    job = FederatedTraining(config, data, settings=settings, progress=progress)
    return job.run(out=out, rounds=rounds, resume=resume)
