"""``fedrca whatif``: how would one plant's measurements change if another plant's inputs were different?

    fedrca whatif --params DIR --target PLANT --input-of PLANT --delta JSON [--steps K]
                  [--mode step|impulse] [--own-blocks] [--plot PNG] [--json FILE]

Reads the artifacts of a training run (``fedrca train --out DIR``): the learned global
model (A, B: the server's, or with estimator ``moments`` each plant's own row of it) and
the target plant's measurement map, and prints the
predicted change of every sensor of ``--target`` when the inputs of ``--input-of``
change by ``--delta`` (raw units of the inputs): one step later (the average
treatment effect ``C_mm B_mn du``) and after K steps of the change held
(``--mode step``, the default) or applied once (``impulse``). ``--delta`` is a JSON
list with one number per input of ``--input-of`` (in its configured order), an
object ``{"input name": change}`` (unnamed inputs do not change) or one number for
a plant with one input. A small PNG of the K-step response is written
(``--plot``, default ``whatif_<target>_<input-of>.png``). Every block of A and B is
the server's (the plants' rows with estimator ``moments``) unless ``--own-blocks`` puts
the plants' own A_mm, B_mm (their artifacts' private ``whatif.*`` arrays) on the
diagonal. The spectral radius of A on the plants the change reaches is printed: at or
above 1 the K-step response grows without bound and only the one-step answer (the ATE)
is meaningful. See docs/whatif.md.

Errors (unknown plant, wrong number of changes, artifacts trained without inputs)
are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, BinaryIO

import numpy as np

from fedrca.application.evaluation import json_safe
from fedrca.application.outputs import Outputs
from fedrca.application.params import load_params
from fedrca.config._json import strict_json
from fedrca.config.limits import MEMORY_LIMIT, gib, largest, whatif_bytes
from fedrca.contracts.artifacts import SERVER
from fedrca.datasets.nominal import MAX_ABS_VALUE
from fedrca.exceptions import ArtifactError, ConfigError
from fedrca.whatif import GlobalModel, PlantMap, WhatIfAnswer, what_if

__all__ = ["parse_delta", "register", "run_whatif"]

#: Sensors drawn in the PNG (the ones with the largest response).
PLOT_SENSORS = 8
#: Most steps of a response (its arrays and the plot; docs/limits.md).
MAX_STEPS = 100_000
#: Most points a response line of the PNG has (longer responses are drawn every k-th step).
PLOT_POINTS = 2_000


def parse_delta(text: str, plant: PlantMap, n_inputs: int) -> np.ndarray:
    """The ``--delta`` argument as (U,) changes of ``plant``'s inputs.

    Raises
    ------
    ConfigError
        Not JSON, not numbers, a wrong count or an unknown input name (key ``--delta``).

    Examples
    --------
    >>> pm = PlantMap("reactor", inputs=("XMV(10)",))
    >>> parse_delta('{"XMV(10)": 2.5}', pm, 1).tolist(), parse_delta("2.5", pm, 1).tolist()
    ([2.5], [2.5])
    """
    names = list(plant.inputs) if len(plant.inputs) == n_inputs else []
    described = f" ({', '.join(names)})" if names else ""
    try:
        value = strict_json(text, key="--delta")
    except ConfigError as exc:
        shown = text if len(text) <= 60 else f"{text[:28]} ... {text[-27:]}"
        raise ConfigError(
            f"{exc.reason}: {shown!r}; give a list of {n_inputs} number(s){described} or an object {{input: change}}",
            key="--delta",
        ) from None
    if isinstance(value, dict):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise ConfigError(
                f"plant '{plant.name}' has no input(s) {', '.join(map(repr, unknown))}; its inputs are "
                f"{', '.join(names) or f'{n_inputs} unnamed'}",
                key="--delta",
            )
        changes = [value.get(name, 0.0) for name in names]
    elif isinstance(value, list):
        changes = value
    else:
        changes = [value]
    if len(changes) != n_inputs:
        raise ConfigError(
            f"plant '{plant.name}' has {n_inputs} input(s){described}; give {n_inputs} change(s), got {len(changes)}",
            key="--delta",
        )
    if not all(isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c) for c in changes):
        raise ConfigError(f"the changes must be finite numbers, got {changes!r}", key="--delta")
    if any(abs(c) > MAX_ABS_VALUE for c in changes):
        shown = ", ".join(f"{c:g}" for c in changes)
        raise ConfigError(
            f"a change of [{shown}] is beyond +-{MAX_ABS_VALUE:g}, what a data file may hold (docs/limits.md): the "
            "answer would overflow; give a smaller change",
            key="--delta",
        )
    return np.asarray(changes, dtype=np.float64)


def _load(params: str, own_blocks: bool = False) -> GlobalModel:
    # every plant the server's model names must have its artifact (its measurement map and scales)
    artifacts = load_params(params, server=True)
    server = artifacts.pop(SERVER)
    return GlobalModel.from_artifacts(server, artifacts, local_blocks=own_blocks)


def run_whatif(
    params: str,
    target: str,
    source: str,
    delta: str,
    steps: int = 1,
    mode: str = "step",
    own_blocks: bool = False,
) -> tuple[GlobalModel, WhatIfAnswer]:
    """Load the artifacts, check the arguments and answer the query (no output)."""
    if not 1 <= steps <= MAX_STEPS:
        raise ConfigError(f"must be in 1..{MAX_STEPS} (a response of that many steps), got {steps}", key="--steps")
    model = _load(params, own_blocks)
    sensors = max((m.C.shape[0] for m in model.maps.values() if m.C is not None), default=0)
    need = whatif_bytes(steps, sum(model.state_dims), sensors)
    if need > MEMORY_LIMIT:
        fits = largest(MEMORY_LIMIT, lambda k: whatif_bytes(k, sum(model.state_dims), sensors), steps)
        raise ConfigError(
            f"{steps} steps of a model with {sum(model.state_dims)} states need about {gib(need)}, over the "
            f"{gib(MEMORY_LIMIT)} limit (docs/limits.md); give at most {fits}",
            key="--steps",
        )
    for plant, key in ((target, "--target"), (source, "--input-of")):
        if plant not in model.plants:
            raise ConfigError(f"unknown plant '{plant}'; plants are {', '.join(model.plants)}", key=key)
    n = model.plants.index(source)
    if model.input_dims[n] == 0:
        with_inputs = [p for p, d in zip(model.plants, model.input_dims, strict=True) if d]
        raise ConfigError(
            f"plant '{source}' has no inputs; plants with inputs: {', '.join(with_inputs) or 'none'}", key="--input-of"
        )
    if model.maps.get(target) is None or model.maps[target].C is None:
        raise ArtifactError(
            f"{params}: the artifact of plant '{target}' carries no measurement map (whatif.C): it was trained by "
            "an older fedrca; re-run fedrca train"
        )
    du = parse_delta(delta, model.maps.get(source, PlantMap(source)), model.input_dims[n])
    # numpy overflows to inf and nan without a word: an answer is finite or refused
    with np.errstate(over="ignore", invalid="ignore"):
        answer = what_if(model, target, source, du, steps=steps, mode="impulse" if mode == "impulse" else "step")
    _check_finite(answer, model)
    return model, answer


def _check_finite(answer: WhatIfAnswer, model: GlobalModel) -> None:
    """Refuse an answer that overflowed (a change too large for float64, or a response that grows past it)."""
    direct = [answer.direct_state, *([] if answer.direct_sensors is None else [answer.direct_sensors])]
    if not all(np.isfinite(a).all() for a in direct):
        shown = ", ".join(f"{v:g}" for v in answer.delta)
        raise ConfigError(
            f"a change of [{shown}] overflows the one-step answer (beyond the float range); give a smaller change",
            key="--delta",
        )
    responses = [answer.state_response, *([] if answer.sensor_response is None else [answer.sensor_response])]
    bad = [int(np.argmin(np.isfinite(r).all(axis=1))) for r in responses if not np.isfinite(r).all()]
    if bad:
        k = min(bad) + 1
        rho = model.spectral_radius_from(answer.source)
        grows = f" (spectral radius {rho:.4g}: it grows without bound)" if rho >= 1.0 else ""
        raise ConfigError(
            f"the response overflows the float range at step {k}{grows}; give at most {max(1, k - 1)} steps or a "
            "smaller --delta",
            key="--steps",
        )


def _sensor_names(answer: WhatIfAnswer, count: int) -> list[str]:
    return list(answer.sensors) if len(answer.sensors) == count else [f"#{j}" for j in range(count)]


def _table(answer: WhatIfAnswer) -> str:
    assert answer.sensor_response is not None and answer.direct_sensors is not None
    names = _sensor_names(answer, len(answer.direct_sensors))
    width = max(6, *(len(n) for n in names))
    K = answer.steps
    peak_idx = np.argmax(np.abs(answer.sensor_response), axis=0)
    peak = answer.sensor_response[peak_idx, np.arange(len(names))]
    head = f"{'sensor':<{width}}  {'k=1 (ATE)':>12}  {f'k={K}':>12}  {'largest':>12}  {'at k':>5}"
    lines = [head, "-" * len(head)]
    for j, name in enumerate(names):
        lines.append(
            f"{name:<{width}}  {answer.direct_sensors[j]:>12.5g}  {answer.sensor_response[-1, j]:>12.5g}  "
            f"{peak[j]:>12.5g}  {int(peak_idx[j]) + 1:>5d}"
        )
    return "\n".join(lines)


def _plot(answer: WhatIfAnswer, stream: BinaryIO) -> None:
    # start-up cost: matplotlib is imported only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    assert answer.sensor_response is not None
    response = answer.sensor_response
    names = _sensor_names(answer, response.shape[1])
    order = np.argsort(-np.max(np.abs(response), axis=0))[:PLOT_SENSORS]
    stride = max(1, answer.steps // PLOT_POINTS)
    k = np.arange(1, answer.steps + 1)[::stride]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    for j in order:
        line = response[::stride, j]
        ax.plot(k, line, marker="o" if answer.steps <= 30 else None, ms=3, lw=1.2, label=names[j])
    ax.axhline(0.0, color="#888888", lw=0.7)
    ax.set_xlabel("steps after the change (k)")
    ax.set_ylabel(f"change of {answer.target}'s sensors")
    change = ", ".join(f"{v:+.4g}" for v in answer.delta)
    ax.set_title(f"{answer.mode} of {answer.source}'s inputs by [{change}]", fontsize=10)
    ax.legend(fontsize=7, ncol=2, frameon=False)
    fig.tight_layout()
    try:
        fig.savefig(stream, format="png")
    finally:
        plt.close(fig)


def _whatif(args: argparse.Namespace) -> int:
    plot = args.plot or f"whatif_{args.target}_{args.input_of}.png"
    with Outputs.plan({}, {"--plot": plot, "--json": args.json}, input_folders={"--params": args.params}) as out:
        model, answer = run_whatif(
            args.params, args.target, args.input_of, args.delta, args.steps, args.mode, args.own_blocks
        )
        out.write_with("--plot", lambda f: _plot(answer, f))
        if args.json:
            # a growing response reaches inf: strict JSON has no such number ("inf" then)
            out.write("--json", json.dumps(json_safe(_payload(model, answer)), indent=2) + "\n")
    source_map = model.maps.get(answer.source, PlantMap(answer.source))
    inputs = list(source_map.inputs) if len(source_map.inputs) == len(answer.delta) else []
    change = ", ".join(
        f"{name} {v:+.6g}" for name, v in zip(inputs or [f"#{j}" for j in range(len(answer.delta))], answer.delta)
    )
    how = "held from t-1 on (step)" if answer.mode == "step" else "for one sample (impulse)"
    rows = f"rows of A and B learned by the plants {', '.join(model.rows)}"
    if model.local:
        cross = f"cross blocks of the {rows}" if model.rows else "server's cross blocks"
        blocks = f"own diagonal blocks of {', '.join(model.local)} with the {cross}"
    else:
        blocks = rows if model.rows else "learned A and B of the server"
    print(
        f"what if {answer.source}'s inputs changed by [{change}] {how}: predicted change of {answer.target}'s "
        f"sensors (raw units; model {model.version}, {blocks})"
    )
    print(_table(answer))
    state = ", ".join(f"{v:+.4g}" for v in answer.direct_state)
    print(f"\nstate change one step later (B_mn du): [{state}]")
    rho = model.spectral_radius_from(answer.source)
    settles = "the response settles" if rho < 1.0 else "the K-step response grows without bound: trust k=1 only"
    reached = ", ".join(model.reach(answer.source))
    print(f"spectral radius of A on the plants the change reaches ({reached}): {rho:.4g} ({settles})")
    print(f"k-step response: {plot}")
    return 0


def _payload(model: GlobalModel, answer: WhatIfAnswer) -> dict[str, Any]:
    """The answer as JSON (``--json``)."""
    return {
        "target": answer.target,
        "input_of": answer.source,
        "delta": answer.delta.tolist(),
        "mode": answer.mode,
        "steps": answer.steps,
        "model_version": model.version,
        "own_blocks": list(model.local),
        "spectral_radius": model.spectral_radius_from(answer.source),
        "reaches": list(model.reach(answer.source)),
        "rows": list(model.rows),
        "sensors": _sensor_names(answer, 0 if answer.direct_sensors is None else len(answer.direct_sensors)),
        "ate": None if answer.direct_sensors is None else answer.direct_sensors.tolist(),
        "response": None if answer.sensor_response is None else answer.sensor_response.tolist(),
        "state_response": answer.state_response.tolist(),
    }


def register(sub: Any) -> None:
    """Add ``whatif`` to the CLI."""
    p = sub.add_parser(
        "whatif",
        help="predict how a plant's sensors change if another plant's control inputs change",
        description="What-if (counterfactual) query on the learned global model (docs/whatif.md).",
    )
    p.add_argument("--params", required=True, help="directory of a training run's artifacts (fedrca train --out)")
    p.add_argument("--target", required=True, help="the plant whose sensors are predicted")
    p.add_argument("--input-of", dest="input_of", required=True, help="the plant whose inputs change")
    p.add_argument(
        "--delta", required=True, help='changes of its inputs (raw units): JSON list, {"name": change} or a number'
    )
    p.add_argument("--steps", type=int, default=10, help="steps K of the response (default 10)")
    p.add_argument("--mode", choices=("step", "impulse"), default="step", help="change held (step) or one sample")
    p.add_argument(
        "--own-blocks",
        action="store_true",
        help="use the plants' own A_mm, B_mm (from their artifacts) on the diagonal instead of the server's",
    )
    p.add_argument("--plot", default=None, help="PNG of the K-step response (default whatif_<target>_<input-of>.png)")
    p.add_argument("--json", default=None, help="also write the answer as JSON")
    p.set_defaults(func=_whatif)
