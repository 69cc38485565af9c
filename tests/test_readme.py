"""Every code block in the README runs, exactly as written (issue 22, item 34).

Python blocks run in a fresh interpreter, shell blocks in bash with this environment's
``bin/`` (``ember``, ``python``) first on the PATH, each in an empty folder of its own. A
block preceded by ``<!-- not run: REASON -->`` is skipped with that reason (the quick
start, which is CI's own command); one preceded by ``<!-- nightly: REASON -->`` runs only
in the nightly run (``EMBER_NIGHTLY=1``), the reason naming the tests that cover it in CI.
Blocks are self-contained: one that needs a model makes it (``zoo.save``), so a block can
be read and pasted alone.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nightly import NIGHTLY

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(
    r"(<!-- (?P<kind>not run|nightly): (?P<why>[^>]*) -->\s*\n)?"
    r"```(?P<lang>python|bash)\n(?P<code>.*?)```",
    re.S,
)


def _blocks() -> list:
    text = README.read_text()
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("code"))
        marks = []
        if m["kind"] == "not run" or (m["kind"] == "nightly" and not NIGHTLY):
            marks = [pytest.mark.skip(reason=f"{m['kind']}: {m['why']}")]
        out.append(pytest.param(m["lang"], m["code"], id=f"line{line}-{m['lang']}", marks=marks))
    return out


def test_the_readme_has_blocks_to_run():
    langs = [p.values[0] for p in _blocks() if not p.marks]
    assert langs.count("python") >= 4 and langs.count("bash") >= 1


@pytest.mark.parametrize("lang,code", _blocks())
def test_readme_block_runs_as_written(tmp_path, tmp_path_factory, lang, code):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("EMBER_NUM_THREADS", "2")
    # as a user runs it: the suite's IR verification after every pass (conftest) is for
    # the suite's own builds, and doubled the quick start's ResNet-18 compile here
    env["EMBER_VERIFY_IR"] = "0"
    # The disk kernel cache on, as a user has it, in one folder for the whole run (the
    # pytest-xdist workers' base folders share a parent): the blocks that compile the same
    # model (the Python and shell quick starts) then build its kernels once. One block runs
    # at a time (a lock in that folder), or two workers would each compile ResNet-18 cold.
    run = tmp_path_factory.getbasetemp()
    run = run.parent if run.name.startswith("popen-gw") else run
    env["EMBER_DISK_CACHE"] = "1"
    env["EMBER_CACHE_DIR"] = str(run / "readme-cache")
    cmd = (
        [sys.executable, "-c", code]
        if lang == "python"
        else ["bash", "-eu", "-c", code]  # no pipefail: `| head` may close a pipe early
    )
    with open(run / "readme.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
    assert done.returncode == 0, (
        f"README block failed:\n{code}\n--- output ---\n{done.stdout}\n{done.stderr}"
    )
    assert "Traceback" not in done.stderr, done.stderr
