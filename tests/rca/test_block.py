"""The engine on blocks of rows equals the engine row by row: verdicts, decision and state, for every setting.

:meth:`RCAEngine.update_block` (what the RCA worker runs on each batch) is checked against
:meth:`RCAEngine.update` (the per-row reference) on random flag streams cut into random
blocks, with restarts from the saved state in between, over the settings that change the
engine's path: horizon, heartbeat, onset slack, unseen entries, flag and level privacy,
trained or untrained detectors (impossible pairs), fleet plants (no Z_a), severity levels,
graphs, thresholds, the incident's memory (gap, rows: quiet entry roots and the incident-order
penalty, stepped row by row inside a block only while an incident is open) and a calibration map
(the issued verdicts' probabilities, candidate sets and reasons are compared too). Then on real
flags: the recorded TEP files and the simulated fault library.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.config import RCASettings
from fedrca.rca import InterdependencyGraph
from fedrca.rca.block import cusum_block
from fedrca.rca.calibration import FEATURES, CalibrationMap
from fedrca.rca.engine import RCAEngine, default_state_rates, flag_model, severity_model
from fedrca.rca.flagmodel import encode_states

REPO = Path(__file__).resolve().parents[2]


# -- the CUSUM recursion --------------------------------------------------------------------------
def cusum_rows(level, rise, alarmed, onset, inc, seqs, h, cap):
    """The per-row engine's CUSUM step (RCAEngine._update_onsets), row by row."""
    out = []
    for t, seq in enumerate(seqs.tolist()):
        new = np.clip(level + inc[t], 0.0, cap)
        rising = (level <= 0.0) & (new > 0.0)
        rise = np.where(rising, seq, rise)
        starts = ~alarmed & (new >= h)
        onset = np.where(starts, rise, onset)
        alarmed = (alarmed & (new > 0.0)) | starts
        onset = np.where(alarmed, onset, -1)
        level = new
        out.append((level.copy(), alarmed.copy(), onset.copy()))
    return out, rise


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    inc=st.lists(
        st.lists(st.sampled_from([-6.0, -1.5, -0.3, 0.0, 0.7, 1.1, 2.5, 4.0, 0.1 + 0.2]), min_size=3, max_size=3),
        min_size=1,
        max_size=40,
    ),
    start=st.tuples(st.sampled_from([0.0, 0.5, 3.5, 6.0]), st.booleans()),
)
def test_cusum_block_equals_the_row_steps(inc, start):
    level0 = np.full(3, start[0])
    alarmed0 = np.full(3, start[1] and start[0] > 0)
    onset0 = np.where(alarmed0, 7, -1)
    rise0 = np.where(level0 > 0, 7, -1)
    x = np.array(inc)
    seqs = np.arange(len(inc)) * 3 + 10
    block = cusum_block(level0, rise0, alarmed0, onset0, x, seqs, 3.0, 6.0)
    rows, rise = cusum_rows(level0, rise0, alarmed0, onset0, x, seqs, 3.0, 6.0)
    for t, (level, alarmed, onset) in enumerate(rows):
        assert block.level[t].tobytes() == level.tobytes()  # bit for bit (the sign of a zero too)
        assert block.alarmed[t].tolist() == alarmed.tolist()
        assert block.onset[t].tolist() == onset.tolist()
    assert block.rise.tolist() == rise.tolist()


# -- the engine ----------------------------------------------------------------------------------
def make_engine(M: int, options: dict) -> RCAEngine:
    plants = [f"p{m}" for m in range(M)]
    graphs = {
        "complete": InterdependencyGraph.complete(plants),
        "chain": InterdependencyGraph.from_edges(plants, [(plants[m], plants[m + 1]) for m in range(M - 1)]),
        "empty": InterdependencyGraph.from_edges(plants, []),
    }
    s = RCASettings(
        horizon=options["horizon"],
        heartbeat=options["heartbeat"],
        onset_slack=options["slack"],
        unobserved_entry=[p for p in plants if int(p[1:]) in options["unseen"]],
        cusum_threshold=options["threshold"],
        min_posterior=options["min_posterior"],
        incident_gap=options["incident"][0],
        incident_rows=options["incident"][1],
    )
    nominal = default_state_rates(M, 0.02, coupled=not options["trained"])
    augmented = [m not in options["fleet"] for m in range(M)]
    model = flag_model(s, nominal, options["eps"], options["trained"], augmented)
    severity = severity_model(s, options["levels"], options["level_eps"]) if options["levels"] else None
    # a calibration map changes what an issued verdict carries (probabilities, candidate set), never when
    calibration = (
        CalibrationMap((1.0,) + (0.5,) * (len(FEATURES) - 1), tuple(plants), name="t")
        if options["calibrated"]
        else None
    )
    return RCAEngine(graphs[options["graph"]], model, s, site="s", severity=severity, calibration=calibration)


options_strategy = st.fixed_dictionaries(
    {
        "horizon": st.sampled_from([1, 2, 5, 30]),
        "heartbeat": st.sampled_from([0, 1, 4]),
        "slack": st.sampled_from([0, 2]),
        "unseen": st.sampled_from([(), (0,), (1, 2)]),
        "threshold": st.sampled_from([3.0, 0.8]),
        "min_posterior": st.sampled_from([0.9, 0.5]),
        "eps": st.sampled_from([math.inf, 1.0, 3.0]),
        "trained": st.booleans(),
        "fleet": st.sampled_from([(), (1,)]),
        "levels": st.sampled_from([0, 4]),
        "level_eps": st.sampled_from([math.inf, 2.0]),
        "graph": st.sampled_from(["complete", "chain", "empty"]),
        # the incident's memory (gap, rows): the default, and incidents that end and start within a stream
        "incident": st.sampled_from([(240, 10), (4, 1), (9, 3)]),
        "calibrated": st.booleans(),
    }
)


@st.composite
def flag_streams(draw: st.DrawFn, max_rows: int = 70) -> tuple[int, np.ndarray, np.ndarray, list[int]]:
    """(M, codes (T, M), levels (T, M), block cut points): runs of states with stray flips, as faults look."""
    M = draw(st.integers(1, 4))
    codes: list[list[int]] = []
    levels: list[list[int]] = []
    while len(codes) < max_rows and draw(st.booleans() if codes else st.just(True)):
        length = draw(st.integers(1, 18))
        state = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 3, 3, -1]), min_size=M, max_size=M))
        level = [3 if c == 3 else 1 if c == 2 else 0 for c in state]
        for _ in range(length):
            row, lev = list(state), list(level)
            if draw(st.integers(0, 4)) == 0:  # a stray flip of one plant
                m = draw(st.integers(0, M - 1))
                row[m] = draw(st.sampled_from([-1, 0, 1, 2, 3]))
                lev[m] = draw(st.sampled_from([-1, 0, 1, 2, 3]))
            codes.append(row)
            levels.append([v if c >= 0 else -1 for v, c in zip(lev, row, strict=True)])
    T = len(codes)
    cuts = sorted(set(draw(st.lists(st.integers(0, T), max_size=6))) | {0, T})
    return M, np.array(codes, dtype=np.int64).reshape(T, M), np.array(levels, dtype=np.int64).reshape(T, M), cuts


def row_dicts(M: int, codes: np.ndarray, levels: np.ndarray, t: int) -> tuple[dict, dict]:
    flags = {f"p{m}": (int(codes[t, m]) >> 1, int(codes[t, m]) & 1) for m in range(M) if codes[t, m] >= 0}
    return flags, {f"p{m}": int(levels[t, m]) for m in range(M) if levels[t, m] >= 0}


def check_blocks_equal_rows(stream, options, restart_every: int) -> None:
    M, codes, levels, cuts = stream
    T = len(codes)
    seqs = np.cumsum(1 + (np.arange(T) % 3 == 2)) + 4  # increasing, with gaps
    ts = seqs * 180.0
    rows = make_engine(M, options)
    blocks = make_engine(M, options)
    by_rows, by_blocks = [], []
    for k, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        for t in range(lo, hi):
            flags, lev = row_dicts(M, codes, levels, t)
            v = rows.update(int(seqs[t]), flags, float(ts[t]), levels=lev)
            by_rows += [v] if v is not None else []
        if restart_every and k % restart_every == restart_every - 1:
            state = json.loads(json.dumps(blocks.get_state()))
            blocks = make_engine(M, options)
            blocks.set_state(state)
        by_blocks += blocks.update_block(seqs[lo:hi], codes[lo:hi], ts[lo:hi], levels[lo:hi])
        assert by_blocks == by_rows, f"verdicts differ after rows {lo}..{hi}"
        assert blocks.get_state() == rows.get_state(), f"state differs after rows {lo}..{hi}"
        if hi > lo:
            assert blocks.decision == rows.decision


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(stream=flag_streams(), options=options_strategy, restart_every=st.sampled_from([0, 1, 2]))
def test_blocks_equal_rows(stream, options, restart_every):
    check_blocks_equal_rows(stream, options, restart_every)


def test_a_one_row_block_takes_the_per_row_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block of one row (about an RCA worker's batch at 1,000 messages/s) takes the per-row step, whose fixed
    cost is below the block's passes (``python bench/rca_state.py --engines``); a longer block takes the passes.
    Either way the verdicts and state of the rows one by one (:func:`test_blocks_equal_rows`)."""
    options = {"horizon": 5, "heartbeat": 4, "slack": 0, "unseen": (), "threshold": 0.8, "min_posterior": 0.5,
               "eps": math.inf, "trained": False, "fleet": (), "levels": 0, "level_eps": math.inf,
               "graph": "chain", "incident": (240, 10), "calibrated": True}  # fmt: skip
    M = 3
    codes = np.array([[0, 0, 0]] * 3 + [[3, 0, 0]] * 3 + [[3, 2, 2]] * 6)
    rows, blocks = make_engine(M, options), make_engine(M, options)
    passes: list[int] = []
    block = blocks._block
    monkeypatch.setattr(blocks, "_block", lambda seqs, *a: passes.append(len(seqs)) or block(seqs, *a))
    by_rows = rows.update_rows(np.arange(12), codes)
    by_blocks = blocks.update_block(np.arange(6), codes[:6])
    for t in range(6, 12):
        by_blocks += blocks.update_block([t], codes[t : t + 1])
    assert passes == [6]
    assert by_blocks == by_rows and any(v.root_cause == "p0" for v in by_rows)
    assert blocks.get_state() == rows.get_state()


@pytest.mark.slow
@pytest.mark.exhaustive
@settings(max_examples=4000, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(stream=flag_streams(max_rows=160), options=options_strategy, restart_every=st.sampled_from([0, 1, 2, 3]))
def test_blocks_equal_rows_many_examples(stream, options, restart_every):
    check_blocks_equal_rows(stream, options, restart_every)


def test_a_block_with_a_seq_out_of_order_processes_the_rows_before_it():
    rows = make_engine(2, {**BASE, "horizon": 5})
    block = make_engine(2, {**BASE, "horizon": 5})
    codes = np.array([[3, 0], [3, 2], [3, 2], [3, 2]])
    for t in range(2):
        rows.update(t, {"p0": (codes[t, 0] >> 1, codes[t, 0] & 1), "p1": (codes[t, 1] >> 1, codes[t, 1] & 1)})
    with pytest.raises(Exception, match="increasing seq order: got 1 after 1"):
        block.update_block([0, 1, 1, 2], codes)
    assert block.get_state() == rows.get_state()


BASE = {
    "horizon": 30,
    "heartbeat": 10,
    "slack": 0,
    "unseen": (),
    "threshold": 3.0,
    "min_posterior": 0.9,
    "eps": math.inf,
    "trained": True,
    "fleet": (),
    "levels": 0,
    "level_eps": math.inf,
    "graph": "complete",
    "incident": (240, 10),
    "calibrated": False,
}


# -- real flags: the recorded files and the simulated fault library ------------------------------------
def blocks_equal_rows_on(site, run, seed: int) -> int:
    """The run's published flags (and levels) through fresh copies of the site's engine, by random blocks
    and row by row: the same verdicts, decision and state; returns the number of verdicts compared."""
    config = site.config
    published = run.published()
    T = len(published)
    seqs = np.arange(T)
    ts = seqs * config.dataset.sample_seconds
    levels = np.column_stack([run.results[p].level_pub for p in config.plant_names]) if config.severity_levels else None
    if levels is not None:  # a degraded row publishes no level, as in run_pipeline
        levels = np.where(published[:, :, 0] < 0, -1, levels)
    rows, blocks = copy.deepcopy(site.engine), copy.deepcopy(site.engine)
    rows.reset()
    blocks.reset()
    want = rows.run_per_row(seqs, published, ts=ts, levels=levels)
    codes = encode_states(published)
    rng = np.random.default_rng(seed)
    cuts = np.unique(np.concatenate([[0, T], rng.integers(0, T, size=12)]))
    got = []
    for lo, hi in itertools.pairwise(cuts.tolist()):
        got += blocks.update_block(seqs[lo:hi], codes[lo:hi], ts[lo:hi], None if levels is None else levels[lo:hi])
    assert got == want
    assert blocks.get_state() == rows.get_state() and blocks.decision == rows.decision
    # what the pipeline issued (update_block in one block), beside its sensor events
    assert got == [v for v in run.verdicts if not v.is_sensor_event]
    return len(want)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_blocks_equal_rows_on_the_fault_library():
    """Every run of the simulated fault library that is cached (``bench/tep_library.py``; the two runs of
    the benchmarks' smoke library, IDV 4 and 6 over 16 h, are generated when nothing is), fitted on the
    library's nominal training runs, at flag epsilon inf and 2."""
    import sys

    import pandas as pd

    from fedrca.application.site import prepare_site, run_pipeline
    from fedrca.config import load_config
    from fedrca.connectors.simulator import cached_run
    from fedrca.datasets.tep import TEP_COLUMNS

    sys.path.insert(0, str(REPO / "bench"))
    from bench_faults import without_constant_sensors
    from tep_library import Library

    library = Library()
    runs = {(i, s): cached_run(library.fault(i, s)) for s in library.fault_seeds for i in library.idvs}
    runs = {k: r for k, r in runs.items() if r is not None}
    train_runs = [cached_run(library.nominal(s)) for s in library.train_seeds]
    if not runs or any(r is None for r in train_runs):
        library = Library(fault_seeds=(100,), train_seeds=(200,), far_seeds=(300,), idvs=(4, 6), hours=16.0)
        runs = {
            (i, s): cached_run(library.fault(i, s), generate=True) for s in library.fault_seeds for i in library.idvs
        }
        train_runs = [cached_run(library.nominal(s), generate=True) for s in library.train_seeds]
    train = pd.concat([pd.DataFrame(r.values, columns=list(TEP_COLUMNS)) for r in train_runs], ignore_index=True)
    train.attrs["segments"] = [len(r.values) for r in train_runs]
    # a shut valve (XMV(9) under the simulator's control) never changes: the detectors refuse it
    base = without_constant_sensors(load_config(REPO / "config" / "tep.yaml"), train)
    plants = base.plants
    compared = 0
    for k, epsilon in enumerate((math.inf, 2.0)):
        privacy = base.privacy.model_copy(update={"flag_epsilon": epsilon, "level_epsilon": epsilon})
        site = prepare_site(base.model_copy(update={"plants": plants, "privacy": privacy}), train)
        for (idv, seed), run in sorted(runs.items()):
            frame = pd.DataFrame(run.values, columns=list(TEP_COLUMNS))
            compared += blocks_equal_rows_on(site, run_pipeline(site, frame), seed=1000 * k + 10 * idv + seed)
    assert compared > 0


@pytest.mark.exhaustive
@pytest.mark.slow
def test_blocks_equal_rows_on_the_recorded_files(repo):
    """The bundled TEP files (d00_te and faults 01, 04, 05, 06), detectors fitted on d00.dat, with the shipped
    configuration (severity levels, unseen entries) and at flag epsilon 2 (make test runs the faults with the
    trained and the untrained site: tests/rca/test_tep_rca.py)."""
    from fedrca.application.site import prepare_site, run_pipeline
    from fedrca.config import load_config

    config = load_config(repo / "config" / "tep.yaml")
    compared = 0
    for k, epsilon in enumerate((math.inf, 2.0)):
        privacy = config.privacy.model_copy(update={"flag_epsilon": epsilon, "level_epsilon": epsilon})
        site = prepare_site(config.model_copy(update={"privacy": privacy}), repo / "data" / "tep" / "d00.dat")
        for j, name in enumerate(("d00_te", "d01_te", "d04_te", "d05_te", "d06_te")):
            compared += blocks_equal_rows_on(
                site, run_pipeline(site, repo / "data" / "tep" / f"{name}.dat"), 10 * k + j
            )
    assert compared > 100
