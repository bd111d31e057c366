"""Refresh replay/real/upstream_signatures.json from real NeMo-RL / NeMo-Gym code.

The table records, for each upstream file the replay adapters drive, the commit it was read at,
its SHA-256 and the signatures of the members the adapters call. Run it against checkouts of
the commits named in ``FILES`` (or update a commit here first, then run it):

    .venv/bin/python scripts/record_upstream_signatures.py \\
        --root nemo_rl@7ea279abfbeb698b092856d0dab61e7cf39bc909=~/src/RL \\
        --root nemo_gym=~/src/Gym-checkpoint \\
        --file nemo_rl.experience.rollout_manager@00420a153d2c45366226de1eedf44609b5a7b144=rm.py

``--root UPSTREAM[@COMMIT]=DIR`` loads that upstream's files (for every commit, or only the
one named) from a checkout root; ``--file MODULE@COMMIT=PATH`` takes one module's classes from
a file (a branch version of a module, say). Entries whose code is not given keep their
recorded signatures. Prints what changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rolloutscope.replay.real import signatures
from rolloutscope.replay.real.sources import LoadMethod, Upstream, UpstreamCode, file_sha256

RL, GYM = "NVIDIA-NeMo/RL", "NVIDIA-NeMo/Gym"
RL_MAIN = "7ea279abfbeb698b092856d0dab61e7cf39bc909"
RL_REGISTRY = "00420a153d2c45366226de1eedf44609b5a7b144"
GYM_STACK = "011c3386d691fd51a0ee388026c59660fcbffdac"

INIT = "__init__"
FILES = [
    ("nemo_rl", RL, RL_MAIN, "nemo_rl.models.generation.fleet_health", {
        "ShardState": ["__members__"],
        "ShardHealth": [INIT, "is_serving"],
        "FleetHealthPolicy": [INIT],
        "GenerationFleetExhausted": ["__bases__"],
        "GenerationFleetHealth": [
            INIT, "membership_epoch", "shard_count", "snapshot", "serving_shards", "state_of",
            "serving_base_urls", "counts_by_state", "as_metrics", "record_probe",
            "report_failure", "report_success", "shard_for_base_url", "mark_restarting",
            "mark_loaded", "report_refit", "retire", "raise_if_exhausted"],
    }, ""),
    ("nemo_rl", RL, RL_MAIN, "nemo_rl.models.generation.generation_router", {
        "GenerationRouterImpl": [
            INIT, "base_url", "set_serving_backends", "drain_backend_failures", "metrics",
            "_pick_backend", "_target_url", "_handle", "_on_backend_error", "_forward"],
    }, ""),
    ("nemo_rl", RL, RL_MAIN, "nemo_rl.experience.failures", {
        "RolloutFailure": ["__bases__"], "RolloutInfraFailure": ["__bases__"],
        "RolloutTimeout": ["__bases__"],
    }, ""),
    ("nemo_rl", RL, RL_MAIN, "nemo_rl.experience.rollout_manager", {
        "_Deadline": [INIT, "__aenter__", "__aexit__"],
    }, ""),
    ("nemo_rl", RL, RL_REGISTRY, "nemo_rl.experience.rollout_manager", {
        "RequestDeadlineRegistry": [INIT, "add", "discard", "suspend", "resume"],
        "_Deadline": [INIT, "__aenter__", "__aexit__", "suspend", "resume"],
    }, "a branch version of the module (the commit is not on main); only these classes are "
       "recorded, so the file is not hashed whole"),
    ("nemo_gym", GYM, "05bf55ac50b5d95eb203ceb8f59145545c6def64", "nemo_gym.episode_types", {
        "EpisodeId": [INIT, "capture_key", "from_capture_key"],
    }, ""),
    ("nemo_gym", GYM, "7f40a593c7418bd98e566ee312e9c37f34ff520b", "nemo_gym._checkpoint.errors", {
        "ControlError": [INIT, "status_code", "code"],
        "StaleCheckpointError": ["code"], "CheckpointConflictError": ["code"],
        "InvalidPhaseError": ["code"], "DeadlineExceededError": ["code"],
        "StaleAttemptError": ["code"], "AdmissionClosedError": ["code"],
    }, ""),
    ("nemo_gym", GYM, GYM_STACK, "nemo_gym._checkpoint.control", {
        "CheckpointPhase": ["__members__"],
        "CheckpointRequest": [INIT, "remaining"],
        "CommitRequest": [INIT], "RestoreRequest": [INIT], "RetireRequest": [INIT],
        "ForgetRequest": [INIT],
        "PrepareReport": [INIT],
        "CheckpointParticipant": [
            INIT, "notify", "wait_changed", "close_admission", "open_admission", "readiness",
            "ready", "retire", "mark_retired", "forget", "export", "install",
            "restored_pending", "status_extra"],
        "ParticipantControlPlane": [
            INIT, "status", "renew", "prepare", "retire", "forget", "commit", "restore",
            "resume"],
        ".": ["next_attempt"],
    }, ""),
    ("nemo_gym", GYM, GYM_STACK, "nemo_gym._checkpoint.agent", {
        "RestoredAgentSession": [INIT],
        "Activation": [INIT, "boundary", "park", "awaiting_model"],
        "AgentSessionParticipant": [
            INIT, "open_session", "has_session", "close_session", "activation", "at_boundary",
            "park", "awaiting_model", "close_admission", "open_admission", "readiness",
            "retire", "export", "install", "restored_pending", "status_extra", "claim_key"],
    }, ""),
]


def _parse_roots(values: list[str]) -> dict[tuple[str, str | None], UpstreamCode]:
    out = {}
    for value in values:
        key, _, path = value.partition("=")
        upstream, _, commit = key.partition("@")
        code = UpstreamCode.locate(Upstream(upstream), paths={upstream: path})
        out[(upstream, commit or None)] = code
    return out


def _dump(doc: dict) -> str:
    """One line per member, so a diff of the table reads as a diff of signatures."""
    files = []
    for f in doc["files"]:
        head = {k: v for k, v in f.items() if k != "objects"}
        objects = []
        for qualname, members in f["objects"].items():
            rows = ",\n".join(f"    {json.dumps(n)}: {json.dumps(m)}" for n, m in members.items())
            objects.append(f"   {json.dumps(qualname)}: {{\n{rows}\n   }}")
        head_text = json.dumps(head)[1:-1]
        files.append(f"  {{{head_text},\n   \"objects\": {{\n" + ",\n".join(objects)
                     + "\n   }}")
    return (f'{{"format": {json.dumps(doc["format"])}, "version": {doc["version"]}, '
            f'"files": [\n' + ",\n".join(files) + "\n]}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", default=[], metavar="UPSTREAM[@COMMIT]=DIR")
    parser.add_argument("--file", action="append", default=[], metavar="MODULE@COMMIT=PATH")
    parser.add_argument("--table", type=Path, default=signatures.TABLE_PATH)
    args = parser.parse_args()
    roots = _parse_roots(args.root)
    files = {}
    for value in args.file:
        key, _, path = value.partition("=")
        module, _, commit = key.partition("@")
        files[(module, commit)] = Path(path).expanduser()
    previous = {(f.module, f.commit): f for f in signatures.load_table(args.table)} \
        if args.table.exists() else {}
    out, changed = [], []
    for upstream, repo, commit, module, objects, note in FILES:
        code = roots.get((upstream, commit)) or roots.get((upstream, None))
        sha = None
        if (module, commit) in files:
            path = files[(module, commit)]
            holder = code or UpstreamCode(Upstream(upstream), path.parent, "--file")
            loaded = holder._extracted(module, path, tuple(o for o in objects if o != "."),
                                       "recorded from a file")
            live = loaded.module
        elif code is not None and not note:
            loaded = code.module(module, classes=tuple(o for o in objects if o != "."))
            live = loaded.module
            sha = file_sha256(loaded.file) if loaded.loaded_by is not LoadMethod.DOUBLE \
                else None
        else:
            if (module, commit) in previous:
                out.append(previous[(module, commit)])
            else:
                print(f"skipped {module}@{commit[:7]}: no code given", file=sys.stderr)
            continue
        described = signatures.describe(live, objects)
        entry = signatures.FileSig(upstream=upstream, repository=repo, commit=commit,
                                   path=module.replace(".", "/") + ".py", module=module,
                                   sha256=sha, objects=described, note=note)
        old = previous.get((module, commit))
        if old is None or signatures.differences(old.objects, described) or old.sha256 != sha:
            changed.append(f"{module}@{commit[:7]}")
        out.append(entry)
    args.table.write_text(_dump(signatures.table_document(out)), encoding="utf-8")
    print(f"{args.table}: {len(out)} file(s); changed: {', '.join(changed) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
