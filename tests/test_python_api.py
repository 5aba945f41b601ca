"""The Python API: the snippet docs/python-api.md shows runs as written, and the package roots stay light."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import predictor
import simulator

ROOT = Path(__file__).resolve().parents[1]
SACCT = Path(__file__).parent / "data" / "slurm-22.05.sacct"


def test_the_documented_snippets_run_on_a_real_sacct_log(tmp_path, monkeypatch, capsys):
    """Every python block of docs/python-api.md, in order, as cells of one notebook."""
    snippets = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "python-api.md").read_text(), re.DOTALL)
    assert len(snippets) >= 3
    shutil.copy(SACCT, tmp_path / "cluster.sacct")
    monkeypatch.chdir(tmp_path)
    notebook: dict[str, object] = {}
    for snippet in snippets:
        exec(compile(snippet, "docs/python-api.md", "exec"), notebook)
    printed = capsys.readouterr().out
    assert "16 the most in use at once in the log True" in printed
    assert "\nselective\n" in printed and "mode selective" in printed and "'lgbm-quantile': 1.0" in printed
    assert "cancelled before start" in printed
    assert re.search(r"model\s+0\.\d+", printed) and re.search(r"percentile\s+0\.\d+", printed)
    assert (tmp_path / "frontier.png").stat().st_size > 0
    assert (tmp_path / "models" / "cluster" / "manifest.json").exists()


def test_every_public_name_resolves():
    for package in (predictor, simulator):
        for name in package.__all__:
            assert getattr(package, name) is not None, name


def test_importing_the_packages_loads_nothing_heavy():
    probe = "import sys, predictor, simulator; print(sorted({'pandas', 'lightgbm', 'grpc'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_command_line_and_the_light_estimators_start_without_scikit_learn():
    """scikit-learn loads SciPy (about 2 s of CPU): the command line, and the estimators that do not train
    LightGBM models, use scikit-learn's protocol without importing it (only `clone` and the checks do)."""
    probe = (
        "import sys; from tsched.cli import build_parser; build_parser()\n"
        "from predictor.registry import make_estimator\n"
        "from kernel.jobs import FinishedJob, JobRequest\n"
        "done = [FinishedJob(JobRequest(i, i, 1, 1, 100, 1), 100 + i, 50) for i in range(20)]\n"
        "for spec in ('request', 'percentile:min_jobs=3', 'last2', 'mean-std'):\n"
        "    estimator = make_estimator(spec).fit(done).set_params()\n"
        "    estimator.predict_many([JobRequest(99, 500, 1, 1, 100, 1)], intervals=True); repr(estimator)\n"
        "print('sklearn' in sys.modules)"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded == "False\n"
