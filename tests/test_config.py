"""The one config validator: a document onto a frozen dataclass, refusing unknown keys by name,
wrong types and values outside the bounds each field declares; and the three config blocks that
use it (the scenario, fleet health, the router) speaking through their own error types."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import StrEnum

import pytest

from rolloutscope.config import (
    ConfigError,
    ProblemKind,
    build,
    check_bounds,
    check_types,
    setting,
)
from rolloutscope.replay.errors import ScenarioError
from rolloutscope.replay.participants.fleet_health import FleetHealthConfig, FleetHealthConfigError
from rolloutscope.replay.participants.router import RouterConfig, RouterConfigError
from rolloutscope.replay.scenario import Scenario
from rolloutscope.replay.scenarios import get


class Mode(StrEnum):
    FAST = "fast"
    SLOW = "slow"


@dataclass(frozen=True, kw_only=True)
class Leg:
    at_s: float = setting(ge=0)


@dataclass(frozen=True, kw_only=True)
class Block:
    timeout_s: float | None = setting(None, gt=0)
    tries: int = setting(3, ge=1)
    mode: Mode = Mode.FAST
    legs: tuple[Leg, ...] = ()
    inner: Leg = field(default_factory=lambda: Leg(at_s=0.0))
    name: str = setting("a", one_of=("a",))


def _problem(data, **kw):
    with pytest.raises(ConfigError) as caught:
        block = build(Block, data, **kw)
        check_bounds(block, deep=True, path=kw.get("path", ""))
    return caught.value.problem


class TestBuild:
    def test_a_document_becomes_the_block_with_integer_seconds_as_floats(self):
        block = build(Block, {"timeout_s": 5, "legs": [{"at_s": 1}], "mode": "slow"})
        assert block == Block(timeout_s=5.0, legs=(Leg(at_s=1.0),), mode=Mode.SLOW)
        assert type(block.timeout_s) is float and type(block.legs[0].at_s) is float

    def test_unknown_keys_are_refused_by_name_with_the_known_ones(self):
        problem = _problem({"tries": 2, "tmeout_s": 1, "extra": {}}, path="block")
        assert problem.kind is ProblemKind.UNKNOWN_KEY
        assert (problem.path, problem.key) == ("block.extra", "extra")
        assert problem.message == ("block.extra: unknown key(s) extra, tmeout_s; known keys "
                                   "are inner, legs, mode, name, timeout_s, tries")

    def test_a_nested_problem_names_its_path(self):
        problem = _problem({"legs": [{"at_s": 1}, {"at_s": "2"}]})
        assert problem.kind is ProblemKind.WRONG_TYPE
        assert problem.message == "legs[1].at_s: must be a number, got '2'"

    @pytest.mark.parametrize("data,detail", [
        ({"tries": True}, "must be an integer, got True"),
        ({"tries": 2.0}, "must be an integer, got 2.0"),
        ({"timeout_s": False}, "must be a number, got False"),
        ({"mode": "medium"}, "must be one of fast, slow, got 'medium'"),
        ({"legs": {"at_s": 1}}, "must be a list, got dict"),
        ({"inner": [1]}, "must be an object, got list"),
        ({"name": 3}, "must be a string, got 3"),
    ])
    def test_a_value_of_the_wrong_type_is_refused(self, data, detail):
        problem = _problem(data)
        assert problem.kind is ProblemKind.WRONG_TYPE and problem.detail == detail

    def test_a_missing_required_key_is_refused(self):
        problem = _problem({"legs": [{}]})
        assert problem.kind is ProblemKind.MISSING_KEY
        assert (problem.path, problem.key) == ("legs[0]", "at_s")
        assert problem.detail == "missing required key 'at_s'"


class TestBounds:
    @pytest.mark.parametrize("data,path,detail", [
        ({"timeout_s": 0}, "timeout_s", "must be positive or null"),
        ({"tries": 0}, "tries", "must be >= 1"),
        ({"legs": [{"at_s": 0}, {"at_s": -1}]}, "legs[1].at_s", "must be >= 0"),
        ({"inner": {"at_s": -0.5}}, "inner.at_s", "must be >= 0"),
        ({"name": "b"}, "name", "only 'a' exists, got 'b'"),
    ])
    def test_a_declared_bound_is_checked_where_it_is_declared(self, data, path, detail):
        problem = _problem(data)
        assert problem.kind is ProblemKind.OUT_OF_BOUNDS
        assert (problem.path, problem.detail) == (path, detail)

    def test_an_optional_field_may_be_null(self):
        check_bounds(Block(timeout_s=None), deep=True)

    def test_only_the_top_level_is_checked_unless_deep(self):
        check_bounds(Block(legs=(Leg(at_s=-1.0),)))
        with pytest.raises(ConfigError, match=r"legs\[0\]\.at_s: must be >= 0"):
            check_bounds(Block(legs=(Leg(at_s=-1.0),)), deep=True)

    def test_the_owner_turns_a_problem_into_its_own_error(self):
        with pytest.raises(ScenarioError) as caught:
            check_bounds(Block(tries=0), path="config.block",
                         fail=lambda p: ScenarioError(p.path, p.detail))
        assert caught.value.path == "config.block.tries"
        assert str(caught.value) == "config.block.tries: must be >= 1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Flat:
    interval_s: float = 5.0
    tries: int = 3
    on: bool = False
    label: str | None = None


class TestTypesOfABlockBuiltInCode:
    def test_integer_seconds_become_floats_even_on_a_frozen_slotted_block(self):
        flat = Flat(interval_s=10)
        check_types(flat)
        assert flat.interval_s == 10.0 and type(flat.interval_s) is float

    @pytest.mark.parametrize("kw,message", [
        ({"tries": True}, "tries: must be an integer, got True"),  # a bool is never a number
        ({"on": 1}, "on: must be true or false, got 1"),
        ({"label": 7}, "label: must be a string, got 7"),
    ])
    def test_a_value_of_the_wrong_type_is_refused(self, kw, message):
        with pytest.raises(ConfigError) as caught:
            check_types(Flat(**kw))
        assert str(caught.value) == message


class TestTheThreeBlocks:
    """The scenario, fleet health and the router each validate through the helper."""

    def test_a_scenario_names_the_path_of_an_out_of_bounds_value(self):
        data = get("demo").to_dict()
        bad = copy.deepcopy(data)
        bad["config"]["checkpoint"]["policy_workers"] = 0
        with pytest.raises(ScenarioError) as caught:
            Scenario.from_dict(bad)
        assert str(caught.value) == "config.checkpoint.policy_workers: must be >= 1"
        bad = copy.deepcopy(data)
        bad["faults"]["shard_kills"][0]["at_s"] = -1
        with pytest.raises(ScenarioError) as caught:
            Scenario.from_dict(bad)
        assert caught.value.path == "faults.shard_kills[0].at_s"

    def test_a_scenario_reports_a_fleet_health_bound_once_under_its_own_path(self):
        bad = get("demo").to_dict()
        bad["config"]["fleet"]["unhealthy_threshold"] = 0
        with pytest.raises(ScenarioError) as caught:
            Scenario.from_dict(bad)
        assert str(caught.value) == "config.fleet.unhealthy_threshold: must be >= 1"

    def test_fleet_health_and_the_router_keep_their_error_types_and_keys(self):
        with pytest.raises(FleetHealthConfigError) as fleet:
            FleetHealthConfig.from_mapping({"healthy_threshold": 0})
        assert fleet.value.key == "healthy_threshold"
        assert str(fleet.value) == "healthy_threshold: must be >= 1"
        with pytest.raises(RouterConfigError) as router:
            RouterConfig.from_mapping({"enabled": "yes"})
        assert router.value.key == "enabled"
        assert str(router.value) == "generation_router.enabled: must be true or false, got 'yes'"
