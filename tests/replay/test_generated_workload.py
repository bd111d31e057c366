"""A generated workload is what ``Random.uniform``/``randint`` and ``Turn``'s own constructor
would make: the fast drawing in ``scenario._generate`` changes no value, no field and no
order of draws."""

from __future__ import annotations

import dataclasses
import random

import pytest

from rolloutscope.replay.scenario import GeneratedPrompts, Prompt, Row, Turn, _generate


def _by_the_constructors(gen: GeneratedPrompts, rows: int, rng: random.Random) -> list[Prompt]:
    """The plain way: ``uniform``, ``randint`` and ``Turn(...)``, in the same order."""
    prompts = []
    for i in range(gen.count):
        arrival = round(rng.uniform(0.0, gen.arrival_window_s), 3)
        group = []
        for _ in range(rows):
            turns = tuple(
                Turn(model_s=round(rng.uniform(gen.model_s_min, gen.model_s_max), 3),
                     tool_s=round(rng.uniform(gen.tool_s_min, gen.tool_s_max), 3),
                     input_tokens=gen.input_tokens, output_tokens=gen.output_tokens)
                for _ in range(rng.randint(gen.turns_min, gen.turns_max)))
            group.append(Row(turns=turns))
        prompts.append(Prompt(idx=gen.first_idx + i, arrival_s=arrival, rows=tuple(group)))
    return prompts


def _slots(turn: Turn) -> list[tuple[str, object]]:
    return [(name, getattr(turn, name)) for name in Turn.__slots__]


GENS = [
    GeneratedPrompts(count=40, arrival_window_s=300.0, turns_min=4, turns_max=8,
                     model_s_min=60.0, model_s_max=240.0, tool_s_min=10.0, tool_s_max=90.0,
                     input_tokens=2048, output_tokens=1024),
    GeneratedPrompts(count=25, arrival_window_s=0.5, turns_min=1, turns_max=1,
                     model_s_min=0.0, model_s_max=0.0, first_idx=7),
    GeneratedPrompts(count=10, arrival_window_s=1e6, turns_min=2, turns_max=30,
                     model_s_min=0.001, model_s_max=3.7, tool_s_min=5.0, tool_s_max=5.0),
]


@pytest.mark.parametrize("gen", GENS)
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_generated_prompts_are_what_the_constructors_make(gen, seed):
    fast = _generate(gen, 3, random.Random(seed))
    plain = _by_the_constructors(gen, 3, random.Random(seed))
    assert fast == plain
    for fp, pp in zip(fast, plain, strict=True):
        for frow, prow in zip(fp.rows, pp.rows, strict=True):
            for ft, pt in zip(frow.turns, prow.turns, strict=True):
                assert type(ft) is Turn
                assert _slots(ft) == _slots(pt)  # every field set, to the same value
                assert hash(ft) == hash(pt) and repr(ft) == repr(pt)
                assert dataclasses.replace(ft) == pt
    # the generator is left where the plain way leaves it
    a, b = random.Random(seed), random.Random(seed)
    _generate(gen, 3, a)
    _by_the_constructors(gen, 3, b)
    assert a.random() == b.random()


def test_a_turn_is_slotted_in_field_order_so_a_draft_becomes_one():
    assert Turn.__slots__ == tuple(f.name for f in dataclasses.fields(Turn))
    assert not hasattr(Turn(model_s=1.0), "__dict__")


def test_a_generated_turn_stays_frozen():
    turn = _generate(GENS[0], 1, random.Random(0))[0].rows[0].turns[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.model_s = 1.0  # type: ignore[misc]
