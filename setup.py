"""Maps the top-level folders onto the one import package ``ember``.

``tir/`` installs as ``ember.tir``, ``codegen_llvm/`` as ``ember.codegen_llvm``
and so on, so nothing generic lands in site-packages. Subpackages are found by
walking each folder, which keeps ``pyproject.toml`` free of a hand-kept list.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {
    "ember": "ember",
    "ember.tir": "tir",
    "ember.codegen_llvm": "codegen_llvm",
    "ember.codegen_cuda": "codegen_cuda",
    "ember.frontend": "frontend",
    "ember.tuner": "tuner",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    here = Path(__file__).parent
    packages, package_dir = [], {}
    for pkg, folder in ROOTS.items():
        for init in sorted((here / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(here)
            name = ".".join([pkg, *rel.parts[1:]])
            packages.append(name)
            package_dir[name] = rel.as_posix()
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
