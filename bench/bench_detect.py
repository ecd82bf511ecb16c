"""Batch detection core vs a per-sample filterpy + scipy loop (issue 2, section 6).

Workload: the five TEP plants of ``config/tep.yaml`` (52 sensors), detectors fitted
on ``data/tep/d00.dat``, then 100,000 samples synthesised from the nominal
statistics (a VAR(1) fitted to the standardised nominal data, driven by Gaussian
noise with the nominal innovation covariance), with 3-sigma sensor steps injected
in 10% of the rows so that the flags being compared are not all zero.

* **fedrca**: ``PlantDetector.step_batch`` per plant — Kalman filter (steady-state
  gain, vectorised recursion), augmentation (a non-zero Theta, so it is really
  computed), MEWMA Mahalanobis distances of both residuals, flags and randomized
  response (epsilon = 2).
* **peer**: the same computation one sample at a time, built from filterpy's
  ``KalmanFilter`` (predict/update), numpy for the augmentation, scipy's
  ``distance.mahalanobis`` for both distances and ``random()`` for the randomized
  response. Run on the first ``PEER_ROWS`` samples (its cost per sample is constant).

Both must agree (same flags, distances to 1e-6) before the speed is reported.
A "sample" is one row of all 52 sensors (one message per plant).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
from filterpy.kalman import KalmanFilter
from scipy.spatial import distance

from fedrca.config import load_config
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.detectors.factory import build_detector
from fedrca.detectors.identify import Standardizer, identify_linear_model
from fedrca.detectors.kalman import lti_recursion
from fedrca.detectors.plant import PlantDetector

REPO = Path(__file__).resolve().parents[1]
N_SAMPLES = 100_000
PEER_ROWS = 2_000
EPSILON = 2.0
TARGET_RATIO = 20.0
TARGET_RATE = 200_000.0


def synthesize(nominal: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n samples (n, D) from a VAR(1) fitted to the standardised nominal data."""
    rng = np.random.default_rng(seed)
    scaler = Standardizer.fit(nominal)
    Z = scaler.transform(nominal)
    model = identify_linear_model(nominal, n_states=nominal.shape[1], ridge=1e-3)
    A = model.C @ model.A @ model.C.T  # full-rank VAR(1) in the standardised space
    radius = max(abs(np.linalg.eigvals(A)))
    if radius > 0.98:
        A *= 0.98 / radius
    innovations = Z[1:] - Z[:-1] @ A.T
    L = np.linalg.cholesky(np.cov(innovations, rowvar=False) + 1e-6 * np.eye(len(A)))
    noise = rng.standard_normal((n, len(A))) @ L.T
    # z(t) = A z(t-1) + e(t), all t at once
    return scaler.inverse(lti_recursion(A, noise, np.zeros(len(A))))


def core_run(detectors: dict[str, PlantDetector], data: dict[str, np.ndarray]) -> tuple[float, dict]:
    """Seconds for the batch core over all plants, and its results."""
    for det in detectors.values():
        det.reset()
    started = time.perf_counter()
    results = {name: det.step_batch(data[name]) for name, det in detectors.items()}
    return time.perf_counter() - started, results


def peer_run(det: PlantDetector, Y: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """Per-sample filterpy + scipy twin of ``det.step_batch(Y)`` (no published flags compared)."""
    kfm = det.proprietary
    A, C = kfm.A, kfm.C
    P, D = A.shape[0], C.shape[0]
    kf = KalmanFilter(dim_x=P, dim_z=D)
    kf.F, kf.H, kf.Q, kf.R = A, C, kfm.Q, kfm.R
    kf.x = np.zeros((P, 1))
    kf.P = np.asarray(kfm.get_state()["P"])
    theta = det.augmentation.theta
    sc, sa = det.scorers
    st_c, st_a = sc.state, sa.state
    vi_c = st_c.whitening.T @ st_c.whitening
    vi_a = st_a.whitening.T @ st_a.whitening
    lam = sc.ewma
    mean, std = det.scaler.mean, det.scaler.std
    keep = 1.0 / (1.0 + math.exp(-EPSILON))
    rng = np.random.default_rng(seed)
    e_c, e_a = st_c.mean.copy(), st_a.mean.copy()
    yz_prev = None
    out = np.empty((len(Y), 4))
    published = np.empty((len(Y), 2), dtype=bool)
    for t in range(len(Y)):
        yz = (Y[t] - mean) / std
        xhat_prev = kf.x[:, 0].copy()
        kf.predict()
        kf.update(yz)
        r_c = kf.y[:, 0]
        # x_a(t) = A (x̂_c(t-1) + Theta psi(y(t-1)))
        xhat_a = xhat_prev if yz_prev is None else xhat_prev + theta @ yz_prev
        r_a = yz - C @ (A @ xhat_a)
        yz_prev = yz
        if lam is None:
            d2c = distance.mahalanobis(r_c, st_c.mean, vi_c) ** 2
            d2a = distance.mahalanobis(r_a, st_a.mean, vi_a) ** 2
        else:
            e_c = lam * r_c + (1 - lam) * e_c
            e_a = lam * r_a + (1 - lam) * e_a
            d2c = distance.mahalanobis(e_c, st_c.mean, vi_c) ** 2 * (2 - lam) / lam
            d2a = distance.mahalanobis(e_a, st_a.mean, vi_a) ** 2 * (2 - lam) / lam
        zc, za = d2c > st_c.threshold, d2a > st_a.threshold
        published[t] = (zc ^ (rng.random() >= keep), za ^ (rng.random() >= keep))
        out[t] = (d2c, d2a, zc, za)
    return out[:, 0], out[:, 1], out[:, 2].astype(bool), out[:, 3].astype(bool)


def main() -> int:
    config = load_config(REPO / "config" / "tep.yaml")
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"flag_epsilon": EPSILON})})
    frame = load_frame(config, REPO / "data" / "tep" / "d00.dat")
    nominal = plant_frames(config, frame, "d00.dat")
    detectors = {}
    rng = np.random.default_rng(1)
    for plant in config.plants:
        det = build_detector(config, plant).fit(nominal[plant.name].Y)
        theta = det.augmentation.theta
        det.set_parameters(0.05 * rng.standard_normal(theta.shape), version="bench")
        detectors[plant.name] = det
    columns = [c for p in config.plants for c in p.sensors]
    synthetic = synthesize(frame[columns].to_numpy(), N_SAMPLES)
    # Faults: a 3-sigma step on every 7th sensor in rows 500..1499 of every 10,000.
    faulty = (np.arange(N_SAMPLES) % 10_000 >= 500) & (np.arange(N_SAMPLES) % 10_000 < 1_500)
    synthetic[np.ix_(faulty, np.arange(0, len(columns), 7))] += 3.0 * frame[columns].to_numpy().std(axis=0)[::7]
    data, start = {}, 0
    for plant in config.plants:
        data[plant.name] = synthetic[:, start : start + len(plant.sensors)]
        start += len(plant.sensors)

    # Correctness first: the peer must compute the same thing.
    _, results = core_run(detectors, {k: v[:PEER_ROWS] for k, v in data.items()})
    peer_seconds = 0.0
    for name, det in detectors.items():
        det.reset()
        started = time.perf_counter()
        d2c, d2a, zc, za = peer_run(det, data[name][:PEER_ROWS], seed=det.seed)
        peer_seconds += time.perf_counter() - started
        r = results[name]
        worst = max(np.max(np.abs(d2c - r.d2_c) / (1 + np.abs(d2c))), np.max(np.abs(d2a - r.d2_a) / (1 + np.abs(d2a))))
        if worst > 1e-6 or not (np.array_equal(zc, r.zc) and np.array_equal(za, r.za)):
            print(f"bench_detect: peer and core disagree on plant {name} (max rel d2 diff {worst:.2e})")
            return 1
    peer_rate = PEER_ROWS / peer_seconds

    timings = [core_run(detectors, data)[0] for _ in range(3)]
    best = min(timings)
    core_rate = N_SAMPLES / best
    ratio = core_rate / peer_rate
    flagged = np.any([r.zc for r in core_run(detectors, data)[1].values()], axis=0)
    print(f"workload: {len(detectors)} TEP plants, {len(columns)} sensors, {N_SAMPLES:,} synthesised samples")
    print(f"{'implementation':<44}{'samples/s':>14}{'per sample':>14}")
    print(f"{'fedrca batch core (PlantDetector.step_batch)':<44}{core_rate:>14,.0f}{1e6 / core_rate:>11.2f} us")
    print(f"{'peer: filterpy KalmanFilter + scipy loop':<44}{peer_rate:>14,.0f}{1e6 / peer_rate:>11.2f} us")
    print(f"ratio fedrca / peer: {ratio:.1f}x   (targets: >= {TARGET_RATIO:.0f}x and >= {TARGET_RATE:,.0f} samples/s)")
    print(
        f"agreement on the first {PEER_ROWS} samples: identical flags, d2 within 1e-6; any-plant Z_c rate "
        f"{flagged[faulty].mean():.3f} in the injected fault windows, {flagged[~faulty].mean():.4f} elsewhere"
    )
    return 0 if ratio >= TARGET_RATIO and core_rate >= TARGET_RATE else 1


if __name__ == "__main__":
    sys.exit(main())
