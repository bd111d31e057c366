"""The project's shape, checked: the contract sits on the ground floor and imports nothing above
it, no library imports the command line, and the SQL views speak only the vocabulary's names and
the config's defaults."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from rolloutscope import vocabulary
from rolloutscope.replay.scenario import Config
from rolloutscope.store import views

ROOT = Path(__file__).resolve().parents[1]
# folder on disk -> import name (setup.py's mapping)
FOLDERS = {"collectors": "rolloutscope.collectors", "dashboard": "rolloutscope.dashboard",
           "replay": "rolloutscope.replay", "rolloutscope": "rolloutscope"}
GROUND_FLOOR = ("rolloutscope.vocabulary", "rolloutscope.store", "rolloutscope.errors",
                "rolloutscope.clock", "rolloutscope.config")
LIBRARIES = ("rolloutscope.collectors", "rolloutscope.dashboard", "rolloutscope.replay",
             "rolloutscope.postmortem", *GROUND_FLOOR)


@cache
def modules() -> dict[str, Path]:
    out = {}
    for folder, prefix in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([prefix, *parts])] = path
    return out


def imports_of(path: Path) -> set[str]:
    """Every rolloutscope module ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules()
                         else node.module for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name.split(".")[0] == "rolloutscope"}


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


class TestLayers:
    def test_every_module_is_where_its_import_name_says(self):
        for name, path in modules().items():
            folder = path.relative_to(ROOT).parts[0]
            assert name.startswith(FOLDERS[folder]), (name, path)

    def test_the_ground_floor_imports_nothing_above_it(self):
        offenders = {name: sorted(i for i in imports_of(path) if not within(i, GROUND_FLOOR)
                                  and i != "rolloutscope")
                     for name, path in modules().items() if within(name, GROUND_FLOOR)}
        assert {k: v for k, v in offenders.items() if v} == {}

    def test_no_library_imports_the_command_line(self):
        offenders = {name: sorted(i for i in imports_of(path) if within(i, ("rolloutscope.cli",)))
                     for name, path in modules().items() if within(name, LIBRARIES)}
        assert {k: v for k, v in offenders.items() if v} == {}

    def test_collectors_know_nothing_of_replay_or_the_dashboard(self):
        up = ("rolloutscope.replay", "rolloutscope.dashboard", "rolloutscope.postmortem")
        offenders = {name: sorted(i for i in imports_of(path) if within(i, up))
                     for name, path in modules().items()
                     if within(name, ("rolloutscope.collectors",))}
        assert {k: v for k, v in offenders.items() if v} == {}

    def test_the_dashboard_reads_runs_only_through_the_store(self):
        offenders = {name: sorted(i for i in imports_of(path)
                                  if within(i, ("rolloutscope.replay", "rolloutscope.collectors")))
                     for name, path in modules().items()
                     if within(name, ("rolloutscope.dashboard",))}
        assert {k: v for k, v in offenders.items() if v} == {}


# -- the SQL and the vocabulary -----------------------------------------------------------------
def vocabulary_names() -> set[str]:
    names = set()
    for cls in (vocabulary.ResourceAttr, vocabulary.Attr, vocabulary.SpanName,
                vocabulary.EventName, vocabulary.MetricName, vocabulary.GenAIAttr,
                vocabulary.OpenInferenceAttr, vocabulary.VllmAttr):
        names.update(v for k, v in vars(cls).items() if not k.startswith("_")
                     and isinstance(v, str))
    return names


_DOTTED = re.compile(r"'([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)'")
_JSON_PATH = re.compile(r"'\$\.([a-z_.]+)'")
_DEFAULTED = re.compile(
    r"coalesce\(TRY_CAST\(coalesce\(config->>'\$\.([a-z_.]+)',\s*config->>'\$\.[a-z_]+'\)"
    r"\s+AS\s+\w+\),\s*([0-9.]+)\)\s+AS\s+(\w+)", re.S)


def sql_texts() -> dict[str, str]:
    # comments name keys in prose; only the statements count
    return {name: re.sub(r"--[^\n]*", "", text) for name, text in views.definitions()}


class TestSqlSpeaksTheVocabulary:
    def test_every_span_event_and_attribute_name_in_the_views_is_in_the_vocabulary(self):
        known = vocabulary_names()
        unknown = {name: sorted(set(_DOTTED.findall(text)) - known)
                   for name, text in sql_texts().items()}
        assert {k: v for k, v in unknown.items() if v} == {}

    def test_every_incident_view_is_a_vocabulary_incident_kind_and_the_union_has_them_all(self):
        kinds = {k.value for k in vocabulary.IncidentKind}
        texts = sql_texts()
        # an incident view names its own kind as a literal: 'stall' AS kind
        literal = {name: set(re.findall(r"'([a-z_]+)'\s+AS\s+kind\b", text))
                   for name, text in texts.items()}
        incident_views = {name for name, found in literal.items() if found}
        assert incident_views == kinds
        for kind in kinds:
            assert literal[kind] == {kind}
            assert re.search(rf"\bFROM\s+{kind}\b", texts["incidents"]), kind

    @pytest.mark.parametrize("path", sorted(
        {m.group(1) for m in _DEFAULTED.finditer(dict(views.definitions())["run_thresholds"])}))
    def test_each_threshold_default_in_the_sql_is_the_configs_default(self, path):
        text = dict(views.definitions())["run_thresholds"]
        (default,) = [float(m.group(2)) for m in _DEFAULTED.finditer(text) if m.group(1) == path]
        value = Config()
        for part in path.split("."):
            value = getattr(value, part)
        assert float(value) == default

    def test_the_defaults_are_found_at_all(self):
        # the parametrised check above would pass vacuously if the pattern stopped matching
        found = {m.group(3) for m in _DEFAULTED.finditer(dict(views.definitions())["run_thresholds"])}
        assert {"prepare_timeout_s", "lease_grace_s", "stall_timeout_s", "watchdog_interval_s",
                "unhealthy_threshold", "backend_timeout_s"} <= found

    def test_every_config_path_the_sql_reads_exists_in_the_config(self):
        text = dict(views.definitions())["run_thresholds"]
        nested = [p for p in _JSON_PATH.findall(text) if "." in p]
        assert nested
        for path in nested:
            value = Config()
            for part in path.split("."):
                assert hasattr(value, part), path
                value = getattr(value, part)
