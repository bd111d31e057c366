"""The simulated system's wiring, checked: each side reaches the others only through the
protocols in ``replay.sim.ports``, the reference models and the sides themselves provide every
member those protocols name (with the same parameters), and no module of the replay package
imports one that imports it back."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from rolloutscope.replay.event_engine import Scheduler
from rolloutscope.replay.participants.agent import AgentParticipant
from rolloutscope.replay.participants.coordinator import CheckpointCoordinator
from rolloutscope.replay.participants.deadlines import DeadlineRegistry
from rolloutscope.replay.participants.environment import ResourcesParticipant
from rolloutscope.replay.participants.fleet_health import GenerationFleetHealth
from rolloutscope.replay.participants.model import ModelParticipant
from rolloutscope.replay.participants.router import GenerationRouter
from rolloutscope.replay.real.gym_agent import GymAgent
from rolloutscope.replay.real.rl_deadline import RealDeadlines
from rolloutscope.replay.real.rl_fleet import RealFleetHealth
from rolloutscope.replay.real.rl_router import RealRouter
from rolloutscope.replay.sim import ports
from rolloutscope.replay.sim.controller import ControllerSide
from rolloutscope.replay.sim.engines import ModelCallAnswers
from rolloutscope.replay.sim.fleet import FleetSide
from rolloutscope.replay.sim.gym import GymSide
from rolloutscope.replay.sim.notes import ParticipantNotes
from rolloutscope.replay.sim.retire import RetireCoordinator
from rolloutscope.replay.sim.rollout_state import RLTry
from rolloutscope.replay.sim.gym_run import RunOwner

REPLAY = Path(__file__).resolve().parents[2] / "replay"

IMPLEMENTATIONS = [
    (ports.Timeline, Scheduler),
    (ports.GymForController, GymSide),
    (ports.GymForCheckpoint, GymSide),
    (ModelCallAnswers, GymSide),
    (ports.FleetForGym, FleetSide),
    (ports.FleetForController, FleetSide),
    (ports.ControllerForSnapshot, ControllerSide),
    (ports.RetireCoordination, RetireCoordinator),
    (ports.NoteDrain, ParticipantNotes),
    (RunOwner, RLTry),
    (ports.DeadlineBook, DeadlineRegistry),
    (ports.DeadlineBook, RealDeadlines),
    (ports.FleetHealthModel, GenerationFleetHealth),
    (ports.FleetHealthModel, RealFleetHealth),
    (ports.RouterModel, GenerationRouter),
    (ports.RouterModel, RealRouter),
    (ports.AgentServer, AgentParticipant),
    (ports.AgentServer, GymAgent),
    (ports.PolicyModelServer, ModelParticipant),
    (ports.PolicyWorkers, ModelParticipant),
    (ports.ToolResources, ResourcesParticipant),
    (ports.Coordinator, CheckpointCoordinator),
]

# the modules of each side; a side imports only its own, the shared ones and the records
SIDES = {
    "controller": {"controller", "controller_deadlines", "controller_recorder"},
    "gym": {"gym", "gym_recorder"},
    "fleet": {"fleet", "fleet_path", "fleet_probes", "fleet_stays", "fleet_faults",
              "fleet_recorder"},
    "checkpoint": {"snapshot", "snapshot_recorder", "notes", "retire"},
}
SHARED = {"ports", "signals", "services", "gym_run", "engines", "rollout_state"}


def _members(proto: type) -> list[str]:
    names = [n for n in vars(proto) if not n.startswith("_")]
    return names + [n for n in getattr(proto, "__annotations__", {}) if n not in names]


def _attributes_set_in_init(cls: type) -> set[str]:
    """What ``self.X = ...`` in the ``__init__`` of ``cls`` or a base sets."""
    out = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if not inspect.isfunction(init):
            continue
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(init)))
        out |= {t.attr for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AnnAssign)
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Attribute)}
    return out


@pytest.mark.parametrize(("proto", "impl"), IMPLEMENTATIONS,
                         ids=[f"{p.__name__}-{i.__name__}" for p, i in IMPLEMENTATIONS])
def test_the_implementation_has_every_member_of_the_protocol_it_stands_behind(proto, impl):
    declared = vars(proto)
    for name in _members(proto):
        wanted = declared.get(name)
        if inspect.isfunction(wanted):
            got = getattr(impl, name, None)
            assert callable(got), f"{impl.__name__} lacks {name}()"
            params = [p for p in inspect.signature(wanted).parameters.values()
                      if p.name != "self"]
            have = inspect.signature(got).parameters
            for p in params:
                if p.kind is p.VAR_POSITIONAL:
                    assert any(q.kind is q.VAR_POSITIONAL for q in have.values()), (impl, name)
                    continue
                assert p.name in have, f"{impl.__name__}.{name} lacks parameter {p.name}"
                assert have[p.name].kind == p.kind, f"{impl.__name__}.{name}({p.name})"
        else:  # an attribute or a property
            assert (hasattr(impl, name) or name in _attributes_set_in_init(impl)
                    or name in getattr(impl, "__slots__", ())), f"{impl.__name__} lacks {name}"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {n.removeprefix("rolloutscope.replay.") for n in found
            if n.startswith("rolloutscope.replay.")}


def test_a_side_reaches_the_others_only_through_the_protocols():
    sim = {p.stem: _imports(p) for p in (REPLAY / "sim").glob("*.py")}
    offenders = {}
    for side, modules in SIDES.items():
        allowed = {f"sim.{m}" for m in modules | SHARED}
        for module in modules:
            bad = {i for i in sim[module] if i.removeprefix("sim.") in sim
                   and i.startswith("sim.") and i not in allowed}
            if bad:
                offenders[module] = sorted(bad)
    assert offenders == {}
    # nothing but the world builds the sides
    assert [m for m, imported in sim.items() if "sim.world" in imported] == []


def test_no_module_of_the_replay_package_imports_one_that_imports_it_back():
    """Every import counts: module level, inside a function, under TYPE_CHECKING."""
    modules = {}
    for path in REPLAY.rglob("*.py"):
        rel = path.relative_to(REPLAY).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        modules[name] = path
    graph = {name: {i for i in _imports(path) if i in modules and i != name}
             for name, path in modules.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    loops = sorted((a, b) for a, targets in graph.items() for b in targets if reaches(b, a))
    assert loops == []
