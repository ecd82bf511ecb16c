"""The severity order (``rca.severity_violation``): an effect is weaker than its cause (docs/rca.md)."""

from __future__ import annotations

from fedrca.config import RCASettings
from fedrca.rca import InterdependencyGraph, engine_for

PLANTS = ["p1", "p2"]


def together(strong: str, catch_up: int | None = None, T: int = 20, **settings) -> list:
    """Both plants alarm (1, 1) from row 0 on (the onset order says nothing); ``strong`` publishes level 3
    from row 0, the other level 1, and level 3 too from row ``catch_up`` (None: never). The verdicts of
    an engine on the complete graph with 4 published levels."""
    engine = engine_for(
        PLANTS, InterdependencyGraph.complete(PLANTS), severity_levels=4, settings=RCASettings(**settings)
    )
    weak = next(p for p in PLANTS if p != strong)
    verdicts = []
    for seq in range(T):
        levels = {strong: 3, weak: 3 if catch_up is not None and seq >= catch_up else 1}
        v = engine.update(seq, {p: (1, 1) for p in PLANTS}, levels=levels)
        if v is not None:
            verdicts.append(v)
    return verdicts


def test_of_two_plants_alarming_together_the_one_severe_first_is_the_root():
    for strong in PLANTS:
        verdicts = together(strong)
        assert verdicts and {v.root_cause for v in verdicts} == {strong}
        # the weaker plant reaching the same level later is still an effect that reached it after its cause
        verdicts = together(strong, catch_up=5)
        assert verdicts and {v.root_cause for v in verdicts} == {strong}


def test_without_the_severity_evidence_the_same_rows_name_no_root():
    """severity_violation 1: a plant severe before its root costs nothing, the two roots tie."""
    for strong in PLANTS:
        assert all(v.root_cause is None for v in together(strong, severity_violation=1.0))


def test_the_reason_names_the_severity_order_when_both_began_together():
    """Two plants began alarming in the same row: the reason names the severity order, not the onset order."""
    for strong in PLANTS:
        weak = next(p for p in PLANTS if p != strong)
        change = together(strong)[-1].reason.change
        assert change.startswith(f"the severity order decides: {strong} and {weak} began alarming in the same row")
        assert "alarmed before" not in change
