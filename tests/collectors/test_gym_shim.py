"""The compatibility shim on its own: what it adds to a nemo-lens that lacks Gym's names, and
that it leaves one alone that has them. nemo-lens with both names is unreleased, so that one is
a stand-in package with only the names the shim looks at; the released 0.1.0 is exercised in
test_gym_doctor.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from rolloutscope.collectors.gym_compat import SHIM_MODULE, packaged

PROBE = textwrap.dedent("""
    import json, sys
    import {shim} as shim
    import nemo.lens.semconv as semconv, nemo.lens.groups as groups
    out = {{"patched": sorted(shim.PATCHED), "rank": semconv.NV_DL_RANK,
           "registry_is_lens_own": groups.SpanRegistry is not shim.SpanRegistry}}
    if not out["registry_is_lens_own"]:
        groups.SpanRegistry.register("nemo_gym", groups=["rollout", "server", "verify"],
                                     presets={{"per_rollout": ["rollout", "server", "verify"]}},
                                     allow_override=True)
        out["per_rollout"] = sorted(groups.SpanGroup.resolve("per_rollout"))
        out["mixed"] = sorted(groups.SpanGroup.resolve("job,rollout,nonsense"))
    print(json.dumps(out))
""")


def lens(tmp_path: Path, *, new: bool) -> Path:
    pkg = tmp_path / ("new" if new else "old") / "nemo" / "lens"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "semconv.py").write_text('NV_DL_RANK = "lens.own.rank"\nNV_DL_WORLD_SIZE = "w"\n'
                                    if new else 'DL_RANK = "dl.rank"\n')
    groups = textwrap.dedent("""
        class SpanGroup:
            ALL_GROUPS = frozenset({"job", "step"})
            @classmethod
            def resolve(cls, spec):
                out = set()
                for part in spec.split(","):
                    if part not in cls.ALL_GROUPS:
                        raise ValueError(f"Unknown span group or preset: {part!r}")
                    out.add(part)
                return frozenset(out)
    """)
    if new:
        groups += "\nclass SpanRegistry:\n    pass\n"
    (pkg / "groups.py").write_text(groups)
    return pkg.parent.parent


def run(tmp_path: Path, *, new: bool) -> dict:
    path = f"{lens(tmp_path, new=new)}:{packaged(f'{SHIM_MODULE}.py').parent}"
    done = subprocess.run([sys.executable, "-c", PROBE.format(shim=SHIM_MODULE)],
                          capture_output=True, text=True, env={"PYTHONPATH": path},
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_nemo_lens_without_the_names_gets_them(tmp_path):
    out = run(tmp_path, new=False)
    assert out["patched"] == ["nemo.lens.groups.SpanGroup.resolve",
                              "nemo.lens.groups.SpanRegistry", "nemo.lens.semconv.NV_DL_RANK",
                              "nemo.lens.semconv.NV_DL_WORLD_SIZE"]
    assert out["rank"] == "nv.dl.rank"
    assert out["per_rollout"] == ["rollout", "server", "verify"]
    assert out["mixed"] == ["job", "rollout"]  # lens's own, Gym's, and no raise on the rest


def test_a_nemo_lens_that_has_the_names_is_left_alone(tmp_path):
    out = run(tmp_path, new=True)
    assert out == {"patched": [], "rank": "lens.own.rank", "registry_is_lens_own": True}
