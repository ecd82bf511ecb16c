"""Why the learned cross-plant part moves no verdict on TEP: the measurements behind docs/rca.md.

The tables of ``docs/faults.md`` ("Diagnosis", written by ``bench/bench_faults.py``) and
the candidates of ``bench/bench_rca_candidates.py`` come from here, on the library rows:

1. :func:`augmented_agreement`: how often a plant's augmented flag Z_a differs from Z_c
   on the faulty rows, for the plants that are the IDV's root and for the plants that
   only show its effect (P1's RCA needs (1, 0) on effects, (1, 1) on roots).
2. :func:`prediction_gain`: what Theta buys on new nominal data: the one-step
   prediction error of the augmented model against the proprietary one, per plant.
   ``phi = Theta psi(y_m(t-1))`` reads the plant's own last measurement, which its
   Kalman filter (identified on the same nominal data) has already used: the best
   linear correction from that information is about zero.
3. :func:`learned_graph_table`: the graph the trained server artifact's Wald test keeps
   against the declared flowsheet.
4. Candidate augmented flags, each a rule that could make Z_a mean "explained by the
   other plants" (:class:`CandidateFlags` builds them from one site fitted on nominal rows):

   * ``exchange``: P1's server term at run time, centralised and without any noise: each
     plant's prediction completed with the other plants' *true* state estimates through the
     pooled VAR(1) of every plant's states (least squares on the nominal rows);
   * ``decoupled``: no exchange: the directions of a plant's innovation that the other
     plants' states can push (the span of ``C_m A_mn``, the same pooled VAR(1)) are left out
     of its statistics, so only what its neighbours cannot cause alarms Z_a;
   * ``inlet``: each plant's own sensors that measure what enters it (declared per plant in
     :data:`INLETS`) explain its other sensors (a ridge ARX model on the nominal rows), and
     Z_a alarms on what they leave unexplained.

   Every candidate's statistics are a :class:`~fedrca.detectors.statistics.StatisticFamily`
   (innovation, MEWMA, dispersion) fitted on the nominal recordings but the last, its
   threshold at the detectors' ``alpha`` on the last one (held out, from nominal data only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedrca.datasets.loader import plant_frames
from fedrca.detectors.plant import PlantDetector
from fedrca.detectors.statistics import StatisticFamily, segment_statistics

__all__ = [
    "INLETS",
    "CandidateFlags",
    "augmented_agreement",
    "learned_graph_table",
    "prediction_gain",
]

#: TEP sensors that measure what enters each plant of config/tep.yaml (the rest are its own): the feed
#: unit's flows follow its valves, the reactor's feed rate and feed analysers measure stream 6, the
#: compressor's purge analysers the separator's vapour. Separator and stripper measure no inlet.
INLETS: dict[str, list[str]] = {
    "feed": ["XMV(1)", "XMV(2)", "XMV(3)", "XMV(4)"],
    "reactor": ["XMEAS(6)", "XMEAS(23)", "XMEAS(24)", "XMEAS(25)", "XMEAS(26)", "XMEAS(27)", "XMEAS(28)"],
    "separator": [],
    "stripper": [],
    "compressor": [f"XMEAS({i})" for i in range(29, 37)],
}


def _role(plant: str, truth: frozenset[str] | None) -> str | None:
    if truth is None:
        return None
    return "root" if plant in truth else "effect"


def augmented_agreement(
    flags: Mapping[tuple[int, int], np.ndarray],
    plants: Sequence[str],
    truth: Mapping[int, frozenset[str] | None],
    onset: int,
) -> pd.DataFrame:
    """Per plant and role: faulty rows where the plant alarms (Z_c or Z_a), the share with Z_a == Z_c and the
    shares of the pairs (1, 0) ("explained by the interdependencies") and (0, 1).

    ``flags`` are the true flag pairs (T, M, 2) of each (idv, seed) run.
    """
    counts: dict[tuple[str, str], np.ndarray] = {}
    for (idv, _), z in flags.items():
        for m, plant in enumerate(plants):
            role = _role(plant, truth.get(idv))
            if role is None:
                continue
            zc, za = z[onset:, m, 0].astype(bool), z[onset:, m, 1].astype(bool)
            on = zc | za
            c = counts.setdefault((plant, role), np.zeros(4))
            c += [on.sum(), (on & (zc == za)).sum(), (zc & ~za).sum(), (~zc & za).sum()]
    rows = []
    for (plant, role), (n, same, ten, one) in sorted(counts.items()):
        rows.append(
            {
                "plant": plant,
                "role": role,
                "alarmed faulty rows": int(n),
                "Z_a == Z_c": same / n if n else float("nan"),
                "(1, 0) explained": ten / n if n else float("nan"),
                "(0, 1)": one / n if n else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def prediction_gain(site: Any, frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per plant: ``||Theta||``, and the mean squared one-step prediction error of the augmented model over
    the proprietary one on ``frames`` (new nominal data), in the filter's standardised units."""
    rows = []
    for plant, det in site.detectors.items():
        if not isinstance(det, PlantDetector):
            continue
        ra = rc = 0.0
        for frame in frames:
            data = plant_frames(site.config, frame)[plant]
            with det.detached():
                result = det.step_batch(data.Y, data.U)
            skip = max(det.warmup, 10)
            rc += float(np.sum(result.r_c[skip:] ** 2))
            ra += float(np.sum(result.r_a[skip:] ** 2))
        rows.append(
            {
                "plant": plant,
                "||Theta||_F": float(np.linalg.norm(det.augmentation.theta)),
                "prediction error, augmented / proprietary": ra / rc if rc else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def learned_graph_table(learned: Any, declared: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """The learned graph's edges against the declared flowsheet."""
    edges = {(a, b) for a, b in learned.edges()}
    declared_set = set(declared)
    return pd.DataFrame(
        [
            {
                "edge": f"{a} -> {b}",
                "declared (flowsheet)": (a, b) in declared_set,
                "learned at the shipped budget": (a, b) in edges,
            }
            for a, b in sorted(edges | declared_set)
        ]
    )


def _white_complement(G: np.ndarray, share: float) -> np.ndarray:
    """Orthonormal basis (D, D - k) of the directions outside the k leading left singular vectors of ``G`` that
    hold ``share`` of its squared singular values (the directions the other plants push)."""
    U, s, _ = np.linalg.svd(G, full_matrices=True)
    energy = np.cumsum(s**2) / max(float(np.sum(s**2)), 1e-300)
    k = int(np.searchsorted(energy, share) + 1) if s.size and s[0] > 0 else 0
    return U[:, min(k, U.shape[1] - 1) :]


class CandidateFlags:
    """The candidate augmented flags of one site fitted (Theta = 0) on nominal ``train`` (see the module docstring).

    Parameters
    ----------
    site : a :class:`fedrca.application.site.Site` prepared on ``train``, untrained
    train : the nominal frame (``attrs["segments"]``: its recordings)
    alpha : family-wise false-alarm rate of each candidate's statistics per plant
    share : the share of the coupling's energy whose directions ``decoupled`` leaves out
    lags : lags of the ``inlet`` ARX model
    """

    KINDS = ("exchange", "decoupled", "inlet")

    def __init__(self, site: Any, train: pd.DataFrame, alpha: float = 0.003, share: float = 0.9, lags: int = 2):
        self.site = site
        self.plants = list(site.config.plant_names)
        self.segments = list(train.attrs.get("segments") or [len(train)])
        ev = self._evidence(train, self.segments)
        dims = [ev[p].xh_c.shape[1] for p in self.plants]
        self._off = np.r_[0, np.cumsum(dims)]
        X = np.hstack([ev[p].xh_c for p in self.plants])
        # pairs (x(t-1), x(t)) inside each recording, after the filter's start-up
        prev, start = [], 0
        for n in self.segments:
            prev.append(np.arange(start + 10, start + n - 1))
            start += n
        i0 = np.concatenate(prev)
        design = np.hstack([X[i0], np.ones((len(i0), 1))])
        # x(t) = A x(t-1) + b, least squares over every plant's states
        coef, *_ = np.linalg.lstsq(design, X[i0 + 1], rcond=None)
        self._A = coef[:-1].T
        scale = X.std(axis=0)
        self._lags = lags
        self._columns = {p: list(site.config.plant(p).sensors) for p in self.plants}
        self._frame_scale = (train.mean(), train.std().replace(0.0, 1.0))
        self._coupling: dict[str, np.ndarray] = {}
        self._basis: dict[str, np.ndarray] = {}
        self._arx: dict[str, np.ndarray] = {}
        self._families: dict[tuple[str, str], StatisticFamily] = {}
        for m, plant in enumerate(self.plants):
            others = [n for n in range(len(self.plants)) if n != m]
            # K_m = [A_mn]_{n != m}: how the other plants' states move plant m's next state
            K = np.hstack([self._A[self._off[m] : self._off[m + 1], self._off[n] : self._off[n + 1]] for n in others])
            self._coupling[plant] = K
            C = np.asarray(site.detectors[plant].proprietary.C)
            white = site.detectors[plant].scorers[0].state.innovation.whitening
            S = np.concatenate([scale[self._off[n] : self._off[n + 1]] for n in others])
            # directions of the whitened innovation the others' typical states push: L^-1 C_m K_m diag(s)
            self._basis[plant] = _white_complement(white @ C @ (K * S), share)
            for kind in self.KINDS:
                r = self._residual(kind, plant, m, ev, X, train)
                self._families[(plant, kind)] = self._family(r, alpha)

    def _family(self, r: np.ndarray, alpha: float) -> StatisticFamily:
        """A statistic family on residuals ``r`` of the nominal rows: its moments on every recording but the
        last, its threshold on the last (held out, as the detectors' thresholds are); in-sample for one recording."""
        statistics = ("innovation", "mewma", "dispersion")
        fam = StatisticFamily(alpha=alpha, ewma=(0.1, 0.05), statistics=statistics)
        if len(self.segments) < 2:
            return fam.fit(r, r[:, :1], r, skip=20, segments=self.segments)
        cut = sum(self.segments[:-1])
        fam.fit(r[:cut], r[:cut, :1], r[:cut], skip=20, segments=self.segments[:-1])
        held = segment_statistics(fam.state, r[cut:], r[cut:, :1], r[cut:])[20:]
        return fam.fit(r[:cut], r[:cut, :1], r[:cut], held_out=held, skip=20, segments=self.segments[:-1])

    def _evidence(self, frame: pd.DataFrame, segments: Sequence[int]) -> dict[str, Any]:
        data = plant_frames(self.site.config, frame)
        out = {}
        for plant, det in self.site.detectors.items():
            with det.detached():
                out[plant] = det._segment_evidence(data[plant].Y, data[plant].U, list(segments))
        return out

    def _inlet_design(self, plant: str, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        mean, std = self._frame_scale
        inlet = [c for c in INLETS.get(plant, []) if c in self._columns[plant]]
        own = [c for c in self._columns[plant] if c not in inlet]
        Z = ((frame - mean) / std).to_numpy(dtype=np.float64)
        col = {c: i for i, c in enumerate(frame.columns)}
        yI, yB = Z[:, [col[c] for c in own]], Z[:, [col[c] for c in inlet]]

        def lag(a: np.ndarray, k: int) -> np.ndarray:
            return a if k == 0 else np.vstack([np.repeat(a[:1], k, axis=0), a[:-k]])

        parts = [lag(yI, k) for k in range(1, self._lags + 1)]
        parts += [lag(yB, k) for k in range(0, self._lags + 1)] if yB.shape[1] else []
        return np.hstack([*parts, np.ones((len(Z), 1))]), yI

    def _residual(self, kind: str, plant: str, m: int, ev: Mapping[str, Any], X: np.ndarray, frame: pd.DataFrame):
        e = ev[plant]
        if kind == "decoupled":
            # the whitened innovation outside the directions the other plants push
            white = self.site.detectors[plant].scorers[0].state.innovation
            return white.white(e.r_c) @ self._basis[plant]
        if kind == "exchange":
            others = [n for n in range(len(self.plants)) if n != m]
            Xo = np.hstack([X[:, self._off[n] : self._off[n + 1]] for n in others])
            Xo_prev = np.vstack([Xo[:1], Xo[:-1]])
            C = np.asarray(self.site.detectors[plant].proprietary.C)
            # r_o(t) = r_c(t) - C_m sum_n A_mn x̂_n(t-1)
            return np.asarray(e.r_c - Xo_prev @ self._coupling[plant].T @ C.T)
        design, target = self._inlet_design(plant, frame)
        if plant not in self._arx:
            keep = np.zeros(len(design), dtype=bool)
            start = 0
            for n in self.segments:
                keep[start + 10 : start + n] = True
                start += n
            # ridge ARX: own sensors from their lags and the inlet sensors' current and lagged values
            D = design[keep]
            self._arx[plant] = np.linalg.solve(D.T @ D + np.eye(D.shape[1]), D.T @ target[keep])
        return target - design @ self._arx[plant]

    def flags(self, frame: pd.DataFrame) -> dict[str, np.ndarray]:
        """Per candidate kind, the augmented flags (T, M) of a fresh run of ``frame``."""
        ev = self._evidence(frame, [len(frame)])
        X = np.hstack([ev[p].xh_c for p in self.plants])
        out = {}
        for kind in self.KINDS:
            cols = []
            for m, plant in enumerate(self.plants):
                fam = self._families[(plant, kind)]
                fam.reset()
                r = self._residual(kind, plant, m, ev, X, frame)
                cols.append(fam.flags(fam.score(r, r[:, :1], r)))
            out[kind] = np.column_stack(cols)
        return out
