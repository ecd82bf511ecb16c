"""Why the learned cross-plant part moves no verdict on TEP: the measurements behind docs/rca.md.

Every table here is computed by ``bench/bench_faults.py`` on the same library rows as
its figures (``docs/faults.md``, section "Diagnosis"), from the trained site of the
product (``config/tep.yaml``, ``fedrca train`` on the training seeds):

1. :func:`augmented_agreement`: how often the trained augmented flag Z_a differs from
   Z_c on the faulty rows, per plant, for the plants that are the IDV's root and for the
   plants that only show its effect (P1's RCA needs (1, 0) on effects, (1, 1) on roots).
2. :func:`prediction_gain`: what Theta buys on new nominal data: the one-step
   prediction error of the augmented model against the proprietary one, per plant
   (FAR seeds). ``phi = Theta psi(y_m(t-1))`` reads the plant's own last measurement,
   which its Kalman filter (identified on the same nominal data) has already used: the
   best linear correction from that information is about zero.
3. :func:`exchange_oracle`: what P1's server term would buy at run time with no privacy
   at all: each plant's prediction completed with the other plants' *true* state
   estimates through the pooled VAR(1) of every plant's states (least squares on the
   training rows), scored by a statistic family calibrated on the training rows; how
   often the result explains an effect (flag pair (1, 0)) and wrongly explains a root.
4. :func:`learned_graph_table`: the graph the trained server artifact's Wald test keeps
   at the shipped budget against the declared flowsheet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedrca.datasets.loader import plant_frames
from fedrca.detectors.plant import PlantDetector
from fedrca.detectors.statistics import StatisticFamily

__all__ = ["augmented_agreement", "exchange_oracle", "learned_graph_table", "prediction_gain"]


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


def _evidence(site: Any, frame: pd.DataFrame, segments: Sequence[int]) -> dict[str, Any]:
    data = plant_frames(site.config, frame)
    out = {}
    for plant, det in site.detectors.items():
        with det.detached():
            out[plant] = det._segment_evidence(data[plant].Y, data[plant].U, list(segments))
    return out


def exchange_oracle(
    site: Any,
    train: pd.DataFrame,
    faults: Mapping[tuple[int, int], pd.DataFrame],
    truth: Mapping[int, frozenset[str] | None],
    onset: int,
    alpha: float = 0.003,
) -> pd.DataFrame:
    """P1's server term at run time, centralised and without noise (see the module docstring).

    For plant m, ``x_m(t) = A_mm x_m(t-1) + sum_n A_mn x_n(t-1)``: the proprietary prediction is completed with
    ``C_m sum_n A_mn x̂_n(t-1)`` from the other plants' true estimates, A the pooled least-squares VAR(1) of every
    plant's filtered states on the training rows. Returns per plant and role the alarmed faulty rows and the
    share where the completed model explains the plant (proprietary alarm, completed none: pair (1, 0)).
    """
    plants = list(site.config.plant_names)
    segments = list(train.attrs.get("segments") or [len(train)])
    ev = _evidence(site, train, segments)
    dims = [ev[p].xh_c.shape[1] for p in plants]
    off = np.r_[0, np.cumsum(dims)]
    X = np.hstack([ev[p].xh_c for p in plants])
    # pairs (x(t-1), x(t)) inside each recording, after the filter's start-up
    prev, nxt, start = [], [], 0
    for n in segments:
        idx = np.arange(start + 10, start + n - 1)
        prev.append(idx)
        nxt.append(idx + 1)
        start += n
    i0, i1 = np.concatenate(prev), np.concatenate(nxt)
    design = np.hstack([X[i0], np.ones((len(i0), 1))])
    # x(t) = A x(t-1) + b, least squares
    coef, *_ = np.linalg.lstsq(design, X[i1], rcond=None)
    A = coef[:-1].T

    def completed(plant: str, m: int, e: Any, Xall: np.ndarray) -> np.ndarray:
        det = site.detectors[plant]
        C = np.asarray(det.proprietary.C)
        others = [n for n in range(len(plants)) if n != m]
        K = np.hstack([A[off[m] : off[m + 1], off[n] : off[n + 1]] for n in others])
        Xo = np.hstack([Xall[:, off[n] : off[n + 1]] for n in others])
        Xo_prev = np.vstack([Xo[:1], Xo[:-1]])
        # r_o(t) = r_c(t) - C_m sum_n A_mn x̂_n(t-1)
        return np.asarray(e.r_c - Xo_prev @ K.T @ C.T)

    families = {}
    for m, plant in enumerate(plants):
        r = completed(plant, m, ev[plant], X)
        fam = StatisticFamily(alpha=alpha, ewma=(0.1, 0.05), statistics=("innovation", "mewma", "dispersion"))
        families[plant] = fam.fit(r, r[:, :1], r, skip=20, segments=segments)
    counts: dict[tuple[str, str], list[int]] = {}
    for (idv, _), frame in faults.items():
        if truth.get(idv) is None:
            continue
        e = _evidence(site, frame, [len(frame)])
        Xall = np.hstack([e[p].xh_c for p in plants])
        for m, plant in enumerate(plants):
            role = _role(plant, truth[idv])
            assert role is not None
            fam = families[plant]
            fam.reset()
            r = completed(plant, m, e[plant], Xall)
            zo = fam.flags(fam.score(r, r[:, :1], r))[onset:]
            with site.detectors[plant].detached():
                zc = site.detectors[plant].step_batch(plant_frames(site.config, frame)[plant].Y).zc[onset:]
            c = counts.setdefault((plant, role), [0, 0])
            c[0] += int(zc.sum())
            c[1] += int((zc & ~zo).sum())
    rows = [
        {"plant": p, "role": role, "proprietary alarms": n, "explained by the others' true states": k / n if n else 0.0}
        for (p, role), (n, k) in sorted(counts.items())
    ]
    return pd.DataFrame(rows)


def learned_graph_table(learned: Any, declared: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """The learned graph's edges (with their p-values) against the declared flowsheet."""
    edges = {(a, b) for a, b in learned.edges()}
    declared_set = set(declared)
    rows = []
    for a, b in sorted(edges | declared_set):
        rows.append(
            {
                "edge": f"{a} -> {b}",
                "declared (flowsheet)": (a, b) in declared_set,
                "learned at the shipped budget": (a, b) in edges,
            }
        )
    return pd.DataFrame(rows)
