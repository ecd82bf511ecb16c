"""A site's federated training job: clients + server + transport, rounds, state, artifacts (no I/O).

:class:`FederatedTraining` wires one :class:`~fedrca.training.client.Client` per plant
and the :class:`~fedrca.training.server.Server` through a transport (the in-process
one by default; the byte messages are the ones that travel on ``<site>.train.<plant>``),
runs rounds, refuses a plan that would pass a plant's privacy budget, exposes the
whole job's state after a completed round (:meth:`FederatedTraining.get_state`, what
a checkpoint stores) and finally builds one artifact per plant (Theta + the augmented
scorer re-calibrated on the nominal data with that Theta) and the server artifact.
Files, checkpoints and progress lines are the shell's (:mod:`fedrca.application.training`).
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedrca.config import SiteConfig, TrainingSettings, parameters_hash
from fedrca.contracts import N_FLAG_STATES, NOMINAL_STATE_COUNTS, SERVER, ParameterArtifact, flag_states, make_artifact
from fedrca.detectors.factory import fit_detectors
from fedrca.detectors.parameters import model_fingerprint, scorer_arrays
from fedrca.detectors.plant import Detector, PlantDetector
from fedrca.exceptions import ArtifactError, ConfigError
from fedrca.privacy.budget import refuse_past_budget
from fedrca.privacy.ledger import spent_epsilon
from fedrca.training.client import Client
from fedrca.training.messages import (
    GradientMessage,
    InProcessTransport,
    MomentsMessage,
    OwnMomentsMessage,
    ReleaseMessage,
    StatesMessage,
    decode_message,
    encode_message,
)
from fedrca.training.server import Server

__all__ = [
    "FederatedTraining",
    "PartyState",
    "TrainingData",
    "TrainingResult",
    "TrainingState",
    "Transport",
    "config_hash",
    "data_hash",
    "lifetime_of",
]

FloatArray = NDArray[np.float64]


class Transport(Protocol):
    """What the orchestration needs from a message bus (in-process or Kafka)."""

    def publish(self, topic: str, key: str, value: bytes) -> None: ...

    def consume(self, topic: str, group: str) -> list[tuple[str, bytes]]: ...


def config_hash(config: SiteConfig) -> str:
    """:func:`fedrca.config.parameters_hash`: what the artifacts and checkpoints were trained with."""
    return parameters_hash(config)


class TrainingData(Protocol):
    """One plant's nominal training data: sensors Y (T, D) and inputs U (T, U) or None."""

    @property
    def Y(self) -> FloatArray: ...

    @property
    def U(self) -> FloatArray | None: ...


#: One party's (a client's or the server's) state: its arrays and its JSON-able metadata.
PartyState = tuple[dict[str, np.ndarray], dict[str, Any]]


@dataclass(frozen=True)
class TrainingState:
    """The whole job after a completed round: what a checkpoint stores.

    Attributes
    ----------
    round : rounds completed
    clients : plant -> the client's state
    server : the server's state
    config_hash, data_hash : what the job was built with (a checkpoint of another job is refused)
    bytes_up, bytes_down, raw_bytes : per plant, message bytes so far (states up, gradients down)
        and the bytes the raw data of the same windows would have taken
    """

    round: int
    clients: dict[str, PartyState]
    server: PartyState
    config_hash: str
    data_hash: str
    bytes_up: dict[str, int]
    bytes_down: dict[str, int]
    raw_bytes: dict[str, int]


def data_hash(data: Mapping[str, TrainingData]) -> str:
    """sha256 of the training arrays of every plant (to refuse resuming on other data)."""
    digest = hashlib.sha256()
    for name in sorted(data):
        digest.update(name.encode("utf-8"))
        digest.update(np.ascontiguousarray(data[name].Y).tobytes())
        if data[name].U is not None:
            digest.update(np.ascontiguousarray(data[name].U).tobytes())
    return digest.hexdigest()


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
            summary = client.privacy_summary()
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


def _add_pure(a: Mapping[float, int], b: Mapping[float, int]) -> dict[float, int]:
    """Two sets of pure releases together (``{epsilon: count}``)."""
    out = {float(e): int(k) for e, k in a.items()}
    for e, k in b.items():
        out[float(e)] = out.get(float(e), 0) + int(k)
    return out


def _lifetime(value: Mapping[str, Any]) -> dict[str, Any]:
    """A validated earlier spend ``{"mu2", "pure", "rounds"}`` (from an artifact's manifest)."""
    try:
        mu2 = float(value["mu2"])
        pure = {float(e): int(k) for e, k in (value.get("pure") or {}).items()}
        rounds = int(value.get("rounds", 1))
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"an earlier training spend must be {{mu2, pure, rounds}}, got {value!r} ({exc})") from None
    if not math.isfinite(mu2) or mu2 < 0 or any(k < 0 or e <= 0 for e, k in pure.items()):
        raise ArtifactError(f"an earlier training spend is out of range: {value!r}")
    return {"mu2": mu2, "pure": pure, "rounds": rounds}


def lifetime_of(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A plant artifact's whole-life training spend: its ``lifetime`` (this run and the earlier ones), or for an
    artifact of a single run its ``privacy`` ledger (one round)."""
    if "lifetime" in manifest:
        return _lifetime(manifest["lifetime"])
    privacy = manifest.get("privacy") or {}
    return _lifetime({"mu2": privacy.get("mu2", 0.0), "pure": privacy.get("pure") or {}, "rounds": 1})


def _fmt_eps(value: float) -> str:
    return "0 (no noise)" if value == 0.0 else f"{value:.3g}"


class FederatedTraining:
    """One site's training job (pure: no files, no printing; see :mod:`fedrca.application.training` for those).

    Parameters
    ----------
    config : the site configuration (its ``training:`` section gives the settings)
    data : per-plant nominal data on a common time axis
    detectors : fitted detectors per plant (built from the configuration and fitted on ``data``
        when None)
    settings : overrides the configuration's training settings
    transport : message bus (in-process by default)
    prior : each plant's releases of its earlier training runs (``{"mu2", "pure": {epsilon: count},
        "rounds"}``, the ``lifetime`` of its last artifact, :func:`lifetime_of`): this run is charged
        on top of them against ``privacy.budget`` (the plant's whole life), and its artifacts carry
        the sum (docs/drift.md, "What it costs")
    """

    def __init__(
        self,
        config: SiteConfig,
        data: Mapping[str, TrainingData],
        detectors: Mapping[str, Detector] | None = None,
        settings: TrainingSettings | None = None,
        transport: Transport | None = None,
        segments: Sequence[int] | None = None,
        prior: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.prior = {p: _lifetime(v) for p, v in (prior or {}).items()}
        base = settings if settings is not None else config.training
        self.settings = base.model_copy(update={"client_bias": base.resolved_client_bias(config)})
        self.data = dict(data)
        lengths = {len(d.Y) for d in self.data.values()}
        if len(lengths) != 1:
            raise ArtifactError(f"plants' training data must share one time axis, got lengths {sorted(lengths)}")
        # lengths of the consecutive recordings of the nominal rows (detector calibration restarts at each)
        self.segments = None if segments is None else [int(v) for v in segments]
        built = dict(detectors) if detectors is not None else fit_detectors(config, self.data, segments=self.segments)
        fleet = [name for name, det in built.items() if not isinstance(det, PlantDetector)]
        if fleet:
            raise ConfigError(
                f"plant(s) {', '.join(fleet)} use the fleet detector, which has no augmentation to train; "
                "federated training needs detector.kind: plant for every plant",
                source=config.source,
            )
        self.detectors = {name: det for name, det in built.items() if isinstance(det, PlantDetector)}
        self.transport: Transport = transport if transport is not None else InProcessTransport()
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
            input_dims=[self.clients[p].input_dim for p in plants],
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
        """Refuse learning rates that would not converge and runs that would pass a plant's privacy budget.

        Two budgets: ``training.privacy.budget`` (this run) and ``privacy.budget`` (the plant's
        whole life: this run's releases composed with the flags one ``privacy.window`` may publish).
        """
        shared = self.settings.estimator == "gd"
        for client in self.clients.values():
            client.check_convergence(shared=shared)
        self._check_whole_life(rounds)
        budget = self.settings.privacy.budget
        if math.isinf(budget):
            return
        if self.settings.estimator == "moments":
            for client in self.clients.values():
                mu2, pure = client.moments_plan() if self.round == 0 else (0.0, {})
                client.ledger.check(mu2, pure, what=f"{rounds} round(s) of training (estimator moments)")
            return
        for plant, client in self.clients.items():
            planned = [(client.round_mu2(r), client.window(r)) for r in range(self.round, rounds)]
            eps_total, fit = client.accountant.plan(planned)
            refuse_past_budget(
                plant,
                eps_total,
                budget,
                delta=client.accountant.delta,
                spent=client.accountant.epsilon(),
                what=f"{rounds - self.round} more round(s)",
                budget_key="training.privacy.budget",
                fit=f"at most {fit} round(s) fit",
                fix="lower training.rounds, lower the per-release epsilons (more noise)",
            )

    def _check_whole_life(self, rounds: int) -> None:
        """Training spend + a full window of published flags must fit ``privacy.budget`` (the plant's whole life), and
        the earlier runs' training releases with this run's ``drift.federated.budget``."""
        self._check_training_life()
        site = self.config.privacy
        if math.isinf(site.budget):
            return
        for plant, client in self.clients.items():
            # Z_c and Z_a of a plant detector per sample, and its sensor-fault bit when it checks its sensors
            bits = 2 + int(self.config.plant(plant).health.enabled)
            pure_flags = {} if math.isinf(site.flag_epsilon) else {site.flag_epsilon: bits * site.window}
            if self.settings.estimator == "moments":
                mu2, pure = client.moments_plan() if self.round == 0 else (0.0, {})
                mu2 += client.ledger.mu2
                pure = _add_pure(client.ledger.pure, pure)
            else:
                planned = sum(client.round_mu2(r) for r in range(self.round, rounds))
                mu2, pure = float(client.accountant.total_mu2().max()) + planned, {}
            earlier = self.prior.get(plant)
            if earlier is not None:  # the plant's earlier training runs (its whole life)
                mu2 += earlier["mu2"]
                pure = _add_pure(pure, earlier["pure"])
            for eps, k in pure_flags.items():
                pure[eps] = pure.get(eps, 0) + k
            refuse_past_budget(
                plant,
                spent_epsilon(site.delta, mu2, tuple(sorted(pure.items()))),
                site.budget,
                delta=site.delta,
                spent=client.ledger.epsilon() if self.settings.estimator == "moments" else client.accountant.epsilon(),
                what=(
                    f"training ({rounds} round(s)) composed with the flags of one privacy window "
                    f"({site.window} samples at flag_epsilon {site.flag_epsilon:g})"
                ),
                fix=(
                    "spend less in training (training.privacy), publish fewer noisy bits (privacy.window, "
                    "privacy.flag_epsilon)"
                ),
            )

    def _check_training_life(self) -> None:
        """Every training run of the plant's life, this one included, must fit ``drift.federated.budget``."""
        budget = self.config.drift.federated.budget
        if math.isinf(budget) or self.settings.estimator != "moments" or self.round > 0:
            return
        delta = self.config.privacy.delta
        for plant, client in self.clients.items():
            mu2, pure = client.moments_plan()
            earlier = self.prior.get(plant) or {"mu2": 0.0, "pure": {}, "rounds": 0}
            mu2 += earlier["mu2"]
            pure = _add_pure(pure, earlier["pure"])
            earlier_spend = spent_epsilon(delta, earlier["mu2"], tuple(sorted(earlier["pure"].items())))
            refuse_past_budget(
                plant,
                spent_epsilon(delta, mu2, tuple(sorted(pure.items()))),
                budget,
                delta=delta,
                spent=earlier_spend,
                what=f"this training round after {earlier['rounds']} earlier one(s)",
                budget_key="drift.federated.budget",
                fix=(
                    "the budget of the plant's training releases is spent: it keeps its Theta and its local "
                    "re-baselining goes on (docs/drift.md); spend less per round (drift.federated.state_epsilon, "
                    "moment_epsilon)"
                ),
            )

    def _answer(
        self,
        responses: Mapping[str, GradientMessage],
        encoding: str,
        apply: Callable[[Client, GradientMessage], object],
    ) -> None:
        """Publish the server's message to each plant (counting the bytes down), then let each client apply its own."""
        for plant, message in responses.items():
            raw = encode_message(message, encoding)
            self.transport.publish(self.topic(plant), SERVER, raw)
            self._bytes_down[plant] += len(raw)
        for plant, client in self.clients.items():
            for _, raw in self.transport.consume(self.topic(plant), f"client-{plant}"):
                received = decode_message(raw)
                if isinstance(received, GradientMessage):
                    apply(client, received)

    def run_round(self) -> None:
        """One communication round: states up, gradients down, client steps."""
        if self.settings.estimator == "moments":
            raise ConfigError("estimator 'moments' runs as one exchange (run()), not round by round")
        r = self.round
        enc = self.settings.message_encoding
        for plant, client in self.clients.items():
            raw = encode_message(client.states_message(r), enc)
            self.transport.publish(self.topic(plant), plant, raw)
            self._bytes_up[plant] += len(raw)
            rows = client.window(r)
            self._raw_bytes[plant] += (rows.stop - rows.start) * client.data.y_model.shape[1] * 8
        for plant in self.clients:
            for _, raw in self.transport.consume(self.topic(plant), "server"):
                message = decode_message(raw)
                if isinstance(message, StatesMessage):
                    self.server.receive(message)
        self._answer(self.server.respond(), enc, lambda client, message: client.apply_gradient(message))
        self.round += 1

    def _run_moments(self, rounds: int) -> None:
        """Estimator ``moments``: states released once, forwarded, moments released once, targets, local rounds.

        Every message still travels as bytes on ``<site>.train.<plant>``; after the two
        releases nothing a plant sends depends on its data again, so the ``rounds`` client
        steps are local (post-processing) and cost no epsilon.
        """
        enc = self.settings.message_encoding
        releases: dict[str, ReleaseMessage] = {}
        for plant, client in self.clients.items():
            raw = encode_message(client.release_message(0), enc)
            self.transport.publish(self.topic(plant), plant, raw)
            self._bytes_up[plant] += len(raw)
            rows = client.train_rows
            # per round, the raw data of the round's window (here: all trained rows), as in run_round
            self._raw_bytes[plant] += rounds * (rows.stop - rows.start) * client.data.y_model.shape[1] * 8
        for plant in self.clients:
            for _, raw in self.transport.consume(self.topic(plant), "server"):
                message = decode_message(raw)
                if isinstance(message, ReleaseMessage):
                    releases[message.plant] = message
        # the server forwards every plant's released states to the others (post-processing)
        for plant in self.clients:
            for other, message in releases.items():
                if other != plant:
                    raw = encode_message(message, enc)
                    self.transport.publish(self.topic(plant), SERVER, raw)
                    self._bytes_down[plant] += len(raw)
        for plant, client in self.clients.items():
            received = {}
            for _, raw in self.transport.consume(self.topic(plant), f"client-{plant}"):
                message = decode_message(raw)
                if isinstance(message, ReleaseMessage) and message.plant != plant:
                    received[message.plant] = message
            raw = encode_message(client.moments_message(0, received))  # float64: a few hundred numbers
            self.transport.publish(self.topic(plant), plant, raw)
            self._bytes_up[plant] += len(raw)
        for plant, client in self.clients.items():
            # the own-block moments with the inputs (:mod:`fedrca.training.varx`), for the other plants' rows;
            # float32: its rounding is far below the release's noise
            raw = encode_message(client.own_moments_message(0), "float32")
            self.transport.publish(self.topic(plant), plant, raw)
            self._bytes_up[plant] += len(raw)
        moments: dict[str, MomentsMessage] = {}
        blocks: dict[str, OwnMomentsMessage] = {}
        for plant in self.clients:
            for _, raw in self.transport.consume(self.topic(plant), "server"):
                message = decode_message(raw)
                if isinstance(message, MomentsMessage):
                    moments[message.plant] = message
                elif isinstance(message, OwnMomentsMessage):
                    blocks[message.plant] = message
        self._answer(
            self.server.fit_moments(releases, moments),
            enc,
            lambda client, message: client.fit_to_target(message, rounds),
        )
        self._fit_rows(releases, blocks)
        self.round = rounds

    def _fit_rows(self, releases: Mapping[str, ReleaseMessage], blocks: Mapping[str, OwnMomentsMessage]) -> None:
        """The server forwards every plant's own-block moments to the others; each plant fits its row privately."""
        for plant in self.clients:
            for other, message in blocks.items():
                if other != plant:
                    raw = encode_message(message, "float32")
                    self.transport.publish(self.topic(plant), SERVER, raw)
                    self._bytes_down[plant] += len(raw)
        plants = list(self.clients)
        state_dims = [c.state_dim for c in self.clients.values()]
        input_dims = [c.input_dim for c in self.clients.values()]
        for i, (plant, client) in enumerate(self.clients.items()):
            received: dict[str, OwnMomentsMessage] = {}
            for _, raw in self.transport.consume(self.topic(plant), f"client-{plant}"):
                forwarded = decode_message(raw)
                if isinstance(forwarded, OwnMomentsMessage) and forwarded.plant != plant:
                    received[forwarded.plant] = forwarded
            others = {p: r for p, r in releases.items() if p != plant}
            client.fit_row(plants, state_dims, input_dims, others, received, seed=self.settings.seed * 7919 + i)

    # -- state (what a checkpoint stores) ------------------------------------------------------------
    def get_state(self) -> TrainingState:
        """The job after the last completed round (raises while a round is half done)."""
        return TrainingState(
            round=self.round,
            clients={plant: client.get_state() for plant, client in self.clients.items()},
            server=self.server.get_state(),
            config_hash=self.config_hash,
            data_hash=self.data_hash,
            bytes_up=dict(self._bytes_up),
            bytes_down=dict(self._bytes_down),
            raw_bytes=dict(self._raw_bytes),
        )

    def set_state(self, state: TrainingState) -> None:
        """Continue from :meth:`get_state` output of a job with the same configuration and data.

        Raises
        ------
        ArtifactError
            When the state was made with another configuration or other training data.
        """
        if state.config_hash != self.config_hash or state.data_hash != self.data_hash:
            which = "configuration" if state.config_hash != self.config_hash else "training data"
            raise ArtifactError(f"the saved training state was made with another {which}")
        for plant, client in self.clients.items():
            client.set_state(*state.clients[plant])
        self.server.set_state(*state.server)
        self.round = int(state.round)
        self._bytes_up = {k: int(v) for k, v in state.bytes_up.items()}
        self._bytes_down = {k: int(v) for k, v in state.bytes_down.items()}
        self._raw_bytes = {k: int(v) for k, v in state.raw_bytes.items()}

    # -- the whole run ------------------------------------------------------------------------------
    def run(
        self,
        rounds: int | None = None,
        stop_after: int | None = None,
        on_round: Callable[[FederatedTraining], None] | None = None,
        version: int = 1,
    ) -> TrainingResult:
        """Run the remaining rounds and build the artifacts (in memory).

        Parameters
        ----------
        rounds : total rounds (default: ``training.rounds``)
        stop_after : stop after this many rounds in this call (no artifacts then)
        on_round : called after every completed round (checkpoints, progress lines)
        version : the artifacts' version number
        """
        started = time.perf_counter()
        total = rounds if rounds is not None else self.settings.rounds
        resumed_from = self.round
        self.check(total)
        done_here = 0
        if self.settings.estimator == "moments" and self.round < total:
            self._run_moments(total)
            if on_round is not None:
                on_round(self)
        while self.round < total:
            if stop_after is not None and done_here >= stop_after:
                break
            self.run_round()
            done_here += 1
            if on_round is not None:
                on_round(self)
        artifacts = self.finalize(version) if self.round >= total else {}
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

    def _lifetime(self, plant: str, summary: Mapping[str, Any]) -> dict[str, Any]:
        """The plant's whole-life training spend: its earlier runs' and this run's releases, composed."""
        earlier = self.prior.get(plant) or {"mu2": 0.0, "pure": {}, "rounds": 0}
        pure = _add_pure(earlier["pure"], {float(e): int(k) for e, k in (summary.get("pure") or {}).items()})
        mu2 = float(earlier["mu2"]) + float(summary.get("mu2", 0.0))
        delta = self.config.privacy.delta
        return {
            "mu2": mu2,
            "pure": {str(e): k for e, k in sorted(pure.items())},
            "epsilon": spent_epsilon(delta, mu2, tuple(sorted(pure.items()))),
            "delta": delta,
            "rounds": int(earlier["rounds"]) + 1,
        }

    def finalize(self, version: int) -> dict[str, ParameterArtifact]:
        """Install the trained Theta in every detector, re-calibrate its augmented scorer, build the artifacts."""
        artifacts: dict[str, ParameterArtifact] = {}
        delta = self.settings.privacy.delta
        n = max(self.round, 1)
        # one id for every artifact of this run: a plant's pair copied in from another run of the same
        # configuration is refused by the loader (fedrca.application.params), its digest covers the id
        run_id = uuid.uuid4().hex
        for plant, client in self.clients.items():
            det = self.detectors[plant]
            det.set_parameters(client.theta, version=f"v{version}")
            Y, U = self.data[plant].Y, self.data[plant].U
            scorer = det.calibrate_augmented(Y, U, segments=self.segments)
            det.set_parameters(client.theta, scorer_a=scorer, version=f"v{version}")
            summary = client.privacy_summary()
            # The RCA's only knowledge of this plant's detector: how often each flag state occurs
            # on nominal data (aggregate counts, no sample travels); each recording a fresh stream.
            state_counts = np.zeros(N_FLAG_STATES, dtype=np.int64)
            start = 0
            for length in self.segments or [len(Y)]:
                stop = start + length
                with det.detached():
                    nominal = det.step_batch(Y[start:stop], None if U is None else U[start:stop])
                scored = ~nominal.degraded  # a degraded row is no flag state (docs/missing.md)
                state_counts += np.bincount(
                    flag_states(nominal.zc[scored], nominal.za[scored]), minlength=N_FLAG_STATES
                )
                start = stop
            metrics = {
                "rounds": self.round,
                "client_loss_before": client.initial_loss,
                "client_loss_after": client.reconstruction_loss(),
                "server_loss": self.server.losses.get(plant, math.nan),
                # whole bytes: a count (and no fractional figure that could pass for a reading)
                "bytes_per_round_up": round(self._bytes_up[plant] / n),
                "bytes_per_round_down": round(self._bytes_down[plant] / n),
                "raw_bytes_per_round": round(self._raw_bytes[plant] / n),
                "states_clipped": client.clipped,
            }
            artifacts[plant] = make_artifact(
                plant,
                version,
                {
                    "theta": client.theta,
                    **scorer_arrays(scorer),
                    NOMINAL_STATE_COUNTS: state_counts,
                    **client.whatif_arrays(),
                },
                config_hash=self.config_hash,
                metrics=metrics,
                epsilon_spent=summary["epsilon"],
                delta=delta,
                extra={
                    "run_id": run_id,
                    "model_fingerprint": model_fingerprint(det),
                    "privacy": summary,
                    "lifetime": self._lifetime(plant, summary),
                    "schema": self.config.plant(plant).data_schema(),
                },
            )
        eps = [c.epsilon_spent() for c in self.clients.values()]
        artifacts[SERVER] = make_artifact(
            SERVER,
            version,
            self.server.artifact_arrays(),
            config_hash=self.config_hash,
            metrics={
                "rounds": self.round,
                "server_loss": self.server.loss,
                "losses": self.server.losses,
                "disentanglement": self.settings.disentanglement,
                "penalties": self.server.penalties,
            },
            epsilon_spent=max(eps) if eps else 0.0,
            delta=delta,
            extra={
                "run_id": run_id,
                "plants": list(self.clients),
                "estimator": self.settings.estimator,
                "features": self.server.features,
            },
        )
        return artifacts
