"""Maps the design's top-level folders onto one import namespace, and builds the compiled OTLP
trace decoder.

collectors/, dashboard/ and replay/ install as rolloutscope.collectors, rolloutscope.dashboard
and rolloutscope.replay, so no generic top-level module lands in site-packages. Subpackages are
found at build time, so a new folder needs no edit here.

The decoder (collectors/otlp/_fastdecode.c) and the exporter's span encoder
(collectors/_fastencode.c) are optional: where no C compiler or no Python
headers are found the install still succeeds, and the collector decodes (the exporter encodes) in
Python and says what that costs (rolloutscope.collectors.otlp.fastdecode, collectors.exporter).
"""

from setuptools import Extension, find_packages, setup

FOLDERS = {"rolloutscope": "rolloutscope", "collectors": "rolloutscope.collectors",
           "dashboard": "rolloutscope.dashboard", "replay": "rolloutscope.replay"}

package_dir = {}
packages = []
for folder, name in FOLDERS.items():
    package_dir[name] = folder
    packages.append(name)
    packages.extend(f"{name}.{sub}" for sub in find_packages(folder))

setup(
    package_dir=package_dir,
    packages=packages,
    package_data={name: ["*.sql", "**/*.sql", "*.json", "**/*.json"] for name in packages},
    include_package_data=True,
    ext_modules=[Extension("rolloutscope.collectors.otlp._fastdecode",
                           sources=["collectors/otlp/_fastdecode.c"],
                           depends=["collectors/_json_text.h", "collectors/_arrow_columns.h"],
                           extra_compile_args=["-O2", "-std=c11", "-Wall"],
                           optional=True),
                 Extension("rolloutscope.collectors._fastencode",
                           sources=["collectors/_fastencode.c"],
                           depends=["collectors/_json_text.h", "collectors/_arrow_columns.h"],
                           extra_compile_args=["-O2", "-std=c11", "-Wall"],
                           optional=True)],
)
