"""The doctor's reading of a probe report, for the states a Gym environment can be in (the
reports are the probe's own JSON shape; test_gym_doctor.py runs the real probe)."""

from __future__ import annotations

from rolloutscope.collectors.gym_compat.doctor import TRAP_MESSAGE, Diagnosis, diagnose

BASE = {"python": "3.13.0", "executable": "/venv/bin/python", "purelib": "/venv/lib",
        "env": {}, "nemo_gym": "0.7.0", "nemo_lens": "0.1.0", "opentelemetry_sdk": "1.45.1"}
EXPORTING = {"init": {"handle": True, "exporting": True},
             "enabled_groups": ["agent", "http_client", "model_call", "rollout", "server",
                                "verify"],
             "gym_resolve": ["agent", "http_client", "model_call", "rollout", "server",
                             "verify"]}


def levels(findings) -> list[tuple[str, str]]:
    return [(f.level, f.what.split(":")[0]) for f in findings]


def test_no_nemo_gym_and_no_lens_are_named():
    assert diagnose({**BASE, "nemo_gym": None}, span_groups="per_rollout",
                    python="/x")[0].what == "nemo-gym is not installed in /x"
    (f,) = diagnose({**BASE, "nemo_lens": None}, span_groups="per_rollout")
    assert f.level == "problem" and f.fix == 'pip install "nemo-gym[telemetry]"'


def test_the_first_layer_alone_is_enough_to_fail():
    report = {**BASE, "lens_names": {"NV_DL_RANK": True, "NV_DL_WORLD_SIZE": True,
                                     "SpanRegistry": True, "patched_by_shim": []},
              "init": {"handle": False, "exporting": False}, "enabled_groups": [],
              "records": [{"level": "DEBUG", "logger": "nemo_gym.telemetry.setup",
                           "message": TRAP_MESSAGE}]}
    d = Diagnosis(report=report, findings=tuple(diagnose(report, span_groups="per_rollout")))
    assert not d.healthy and "says only, at DEBUG" in d.findings[0].what


def test_initialised_with_no_gym_group_on_is_a_problem_not_a_success():
    report = {**BASE, **EXPORTING, "enabled_groups": [], "gym_resolve": [],
              "lens_names": {"NV_DL_RANK": True, "NV_DL_WORLD_SIZE": True,
                             "SpanRegistry": True, "patched_by_shim": ["x"]}}
    findings = diagnose(report, span_groups="default")
    assert ("problem", "telemetry initialises but no Gym span group is on for 'default' "
            "(nemo-lens's own vocabulary has none of Gym's groups)") in levels(findings)


def test_a_healthy_environment_with_an_endpoint_that_did_or_did_not_store_the_span():
    report = {**BASE, **EXPORTING, "sent": True,
              "lens_names": {"NV_DL_RANK": True, "NV_DL_WORLD_SIZE": True,
                             "SpanRegistry": True, "patched_by_shim": []},
              "env": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}}
    ok = Diagnosis(report=report, findings=tuple(diagnose(
        report, span_groups="per_rollout", endpoint="http://c:4318", arrived=True)))
    assert ok.healthy
    assert "reached the collector at http://c:4318" in ok.lines()[-2]
    lost = diagnose(report, span_groups="per_rollout", endpoint="http://c:4318", arrived=False)
    assert ("problem", "the probe span did not reach http") in levels(lost)
    unknown = diagnose(report, span_groups="per_rollout", endpoint="http://c:4318",
                       arrived=None)
    assert levels(unknown)[-1][0] == "note"
