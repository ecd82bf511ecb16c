"""The state record's encoding (``fedrca.streams.agents._json``): exact, and NaN / inf / wide integers kept.

A plant worker writes its handler's state with every batch; the fast encoder (orjson) would
write NaN and inf as ``null`` and refuses integers beyond 64 bits, so such states take the
standard library's encoder. Either way the state reads back as it was.
"""

from __future__ import annotations

import json
import math

import numpy as np
from threadpoolctl import threadpool_info

from fedrca.privacy.randomized_response import RandomizedResponse, generator_state, set_generator_state
from fedrca.streams.agents import _json
from fedrca.streams.runtime import streaming_threads


def test_floats_read_back_to_the_bit() -> None:
    rng = np.random.default_rng(3)
    values = (rng.standard_normal(300) * 10.0 ** rng.integers(-300, 300, 300)).tolist()
    state = {"detector": {"last_y": values, "memory": [values[:5], None], "seen": 20}, "last_seq": 7}
    back = json.loads(_json(state))
    assert back == state
    assert [v.hex() for v in back["detector"]["last_y"]] == [v.hex() for v in values]


def test_non_finite_floats_are_not_written_as_null() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        state = {"x": [1.0, bad, 3.0], "memory": [None, [bad]], "v": bad}
        back = json.loads(_json(state))
        assert back["memory"][0] is None
        for got in (back["x"][1], back["memory"][1][0], back["v"]):
            assert got is not None and (math.isnan(got) if math.isnan(bad) else got == bad)


def test_integers_beyond_64_bits_are_kept() -> None:
    state = {"rng": {"state": 2**127 + 5, "inc": 3}, "x": [0.5]}
    assert json.loads(_json(state)) == state


def test_generator_state_round_trips_through_the_state_record() -> None:
    rr = RandomizedResponse(1.0, seed=11)
    rr.perturb(np.zeros(17, bool))
    state = json.loads(_json({"privacy": rr.get_state()}))["privacy"]
    assert isinstance(state["state"]["state"], str)  # wide integers as decimal strings
    first = rr.perturb(np.zeros(40, bool))
    rr.set_state(state)
    assert np.array_equal(rr.perturb(np.zeros(40, bool)), first)
    # numpy's own form (integers) is accepted too: states written before the strings
    rng = np.random.default_rng(2)
    native = dict(rng.bit_generator.state)
    a = rng.random(4)
    set_generator_state(rng, native)
    assert np.array_equal(rng.random(4), a)
    assert generator_state(rng)["state"]["inc"] == str(native["state"]["inc"])


def test_streaming_threads_limits_blas_to_one_thread() -> None:
    np.ones((4, 4)) @ np.ones(4)  # numpy's BLAS is loaded
    with streaming_threads():
        assert {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"} == {1}


def test_the_rca_state_record_fits_a_kafka_record_at_the_largest_lateness() -> None:
    """The RCA's state at the largest ``--allowed-lateness`` run accepts, with 13-digit seqs and the engine's
    evidence, is one Kafka record (docs/limits.md: ``rca_state_bytes``), however many verdict ids it remembers."""
    from fedrca.application.site import rca_runtime
    from fedrca.config import load_config
    from fedrca.config.limits import MAX_KAFKA_RECORD, MAX_REMEMBERED_VERDICTS, rca_record_room, rca_state_bytes
    from fedrca.contracts import FlagMessage, encode_flags
    from fedrca.streams.runtime import RuntimeSettings

    for path in ("config/tep.yaml", "config/synthetic_linear.yaml"):
        config = load_config(path)
        plants, horizon = config.plant_names, config.rca.horizon
        row = rca_state_bytes(plants, 1, 0) - rca_state_bytes(plants, 0, 0)
        most = (rca_record_room() - rca_state_bytes(plants, 0, horizon)) // row
        runtime = rca_runtime(config, settings=RuntimeSettings(allowed_lateness=most))
        first = 10**12  # the seqs as long as the bound counts them
        # every plant's flags but the last one's (the longest pending rows): 2 * horizon rows released (evidence),
        # `most` + 1 left pending
        # each plant's own clock (its time kept per row) and its sensor-fault bit set: the longest pending rows
        flags = [
            FlagMessage(
                config.site,
                plant,
                float(s - first) + 0.123456789 * k,
                s,
                s % 2,
                (s // 2) % 2,
                math.inf,
                "v0",
                sensor_fault=True,
            )
            for s in range(first, first + most + 2 * horizon + 1)
            for k, plant in enumerate(plants[:-1])
        ]
        _, rejected = runtime.process_flags(encode_flags(flags))
        assert not rejected
        alone = _json(runtime.stage.get_state())
        # the ids it remembers are not in the record (their reserve is headroom)
        runtime.stage.remember([f"{k:016x}" for k in range(2 * MAX_REMEMBERED_VERDICTS)])
        state = runtime.stage.get_state()
        assert len(state["aligner"]["buffer"]) == most + 1
        assert _json(state) == alone
        assert len(_json(state)) <= MAX_KAFKA_RECORD, (path, len(_json(state)))
