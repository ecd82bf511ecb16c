"""The simulated plant over OPC UA (serve_rows) read by the edge: every row comes back as it was served,
with the imperfections marked; and the commands' errors are one line (exit 2)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fedrca.cli import main
from fedrca.edge.opcua_server import Imperfections, TagServer, serve_rows
from fedrca.edge.runtime import EdgeRuntime
from fedrca.edge.tags import Quality
from fedrca.exceptions import ConfigError
from tests.edge.support import site, wait_for

COLUMNS = ["a", "b", "c", "d"]


def run_through(rows: np.ndarray, period: float, imperfections: Imperfections | None = None):
    async def scenario():
        async with TagServer(COLUMNS) as server:
            config = site(server.url, COLUMNS, publishing_interval=period / 4)
            config = config.model_copy(
                update={"edge": config.edge.model_copy(update={"grace_seconds": 1.0, "staleness_seconds": 60.0})}
            )
            runtime = EdgeRuntime(config, ["p"], keep_rows=True, speed=0.2 / period)
            done = asyncio.Event()
            task = asyncio.create_task(runtime.run(until=done.is_set))
            await wait_for(lambda: runtime.sources[0].counters.connected, what="connected")
            served = await serve_rows(server, enumerate(rows), period, imperfections)
            first = served.first_slot + 1
            await wait_for(lambda: (runtime.assemblers["p"].next_seq or 0) > first + len(rows), what="rows closed")
            done.set()
            await task
            by_seq = {r.seq: r for r in runtime.rows["p"]}
            return [by_seq[first + k] for k in range(len(rows))], served

    return asyncio.run(scenario())


def test_served_rows_come_back_as_they_were():
    rows = np.random.default_rng(3).normal(size=(15, len(COLUMNS))).round(6)
    out, served = run_through(rows, period=0.1)
    assert served.rows == 15
    np.testing.assert_array_equal(np.stack([r.values for r in out]), rows)
    assert all(r.usable == len(COLUMNS) for r in out)


def test_bad_quality_injected_is_marked_and_the_rest_is_untouched():
    rows = np.arange(20 * len(COLUMNS), dtype=float).reshape(20, len(COLUMNS))
    out, _ = run_through(rows, period=0.1, imperfections=Imperfections(bad=0.2, seed=5))
    quality = np.stack([r.quality for r in out])
    values = np.stack([r.values for r in out])
    assert (quality == Quality.BAD).any() and set(np.unique(quality)) <= {Quality.GOOD, Quality.BAD}
    good = quality == Quality.GOOD
    assert good.any()  # the untouched cells are checked on something
    np.testing.assert_array_equal(values[good], rows[good])
    assert np.isnan(values[~good]).all()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["edge", "--config", "config/synthetic.yaml", "--broker", "kafka://127.0.0.1:9"], "no edge: section"),
        (["edge", "--config", "config/tep.yaml", "--broker", "kafka://127.0.0.1:9", "--group", "nope"],
         "no edge group or plant 'nope'"),
        (["edge", "--config", "config/tep.yaml", "--broker", "kafka://127.0.0.1:9", "--source-url", "x=opc.tcp://a:1"],
         "--source-url"),
        (["edge", "--config", "config/tep.yaml", "--broker", "kafka://127.0.0.1:9", "--source-url",
          "tep-sim=http://a"], "--source-url"),
        (["edge", "--config", "config/tep.yaml", "--broker", "kafka://127.0.0.1:9", "--speed", "asap"], "--speed"),
        (["edge", "--config", "config/tep.yaml", "--broker", "http://127.0.0.1:9"], "--broker"),
        (["simulate", "--hours", "1", "--seed", "1", "--to", "opcua://127.0.0.1:99999"], "--to"),
        (["simulate", "--hours", "1", "--seed", "1", "--to", "opcua://127.0.0.1:4840", "--imperfect", "drop=1"],
         "--imperfect"),
        (["simulate", "--hours", "1", "--seed", "1", "--to", "opcua://127.0.0.1:4840", "--speed", "asap"], "--speed"),
        (["simulate", "--hours", "1", "--seed", "1", "--out", "x.dat", "--imperfect", "bad=0.1"], "--imperfect"),
        (["demo", "--source", "opcua"], "--broker"),
    ],
)  # fmt: skip
def test_command_errors_are_one_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err and "Traceback" not in err, err


def test_imperfections_parse_and_refuse():
    spec = Imperfections.parse("dropout=0.1,bad=0.05,stuck=0.01,stuck_samples=3,jitter=0.2,skew=-2,restart=7")
    assert spec.restart_at == 7 and spec.stuck_samples == 3 and spec.any
    for text in ("dropout=2", "jitter=-1", "restart=1.5", "skew=inf", "what=1", "bad"):
        with pytest.raises(ConfigError):
            Imperfections.parse(text)
