"""The parameter-server demos, a few steps each: examples/ps_train.py with
1 server + 1 worker and 1 + 3, and the C++ examples/ps_train.  Run as a
plain pytest process: it starts the worlds with hixlrun.

Needs HIXLRUN (the launcher) and HIXL_SOURCE_DIR; HIXL_PS_TRAIN_CC (the C++
binary) for the C++ test.  ctest sets them.
"""

import json
import os
import subprocess
import sys

import pytest

HIXLRUN = os.environ.get("HIXLRUN")
SOURCE_DIR = os.environ.get("HIXL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PS_TRAIN_PY = os.path.join(SOURCE_DIR, "examples", "ps_train.py")
PS_TRAIN_CC = os.environ.get("HIXL_PS_TRAIN_CC")

pytestmark = pytest.mark.skipif(not HIXLRUN, reason="HIXLRUN is not set (ctest sets it)")


def hixlrun(n, *argv, timeout=240):
    cmd = [HIXLRUN, "-n", str(n), "--timeout", str(timeout), *argv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    assert r.returncode == 0, f"{' '.join(cmd)} exited with {r.returncode}"
    return r.stdout


@pytest.mark.parametrize("ranks,extra", [(2, ["--params", "200k"]), (4, [])], ids=["1+1_wide", "1+3"])
def test_ps_train_py(tmp_path, ranks, extra):
    summary = tmp_path / "summary.json"
    steps = 80
    out = hixlrun(ranks, sys.executable, PS_TRAIN_PY, "--steps", str(steps), "--summary-json", str(summary),
                  "--threads", "1", *extra)
    s = json.loads(summary.read_text())
    losses = s["losses"]
    assert len(losses) == steps and s["workers"] == ranks - 1
    first, last = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    assert last < 0.5 * first, f"the loss did not fall enough: {first:.3f} -> {last:.3f}"
    assert s["test_accuracy"] > 0.85, f"test accuracy {s['test_accuracy']:.3f}"
    # Every step gets each worker's gradient (+ loss and batch size) and puts the parameters back.
    P = s["params"]
    assert s["bytes_get"] == steps * (ranks - 1) * (P + 2) * 4
    assert s["bytes_put"] == (steps + 1) * (ranks - 1) * P * 4
    assert "final test accuracy" in out and "one-sided transfers" in out
    # The workers evaluate the parameters the server put into them: the same model.
    assert out.count("done; the parameters it holds score") == ranks - 1


@pytest.mark.skipif(not PS_TRAIN_CC, reason="HIXL_PS_TRAIN_CC is not set (examples not built)")
def test_ps_train_cc():
    out = hixlrun(3, PS_TRAIN_CC, "--params", "1M", "--steps", "12")
    assert "largest distance to the optimum" in out and "one-sided transfers" in out
