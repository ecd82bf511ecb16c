"""A wheel built from the repository runs ``fedrca demo`` to the end in a fresh venv outside the checkout.

The fresh venv holds the wheel alone; its dependencies are those of the test environment, made visible by a
``.pth`` line (a path added that way is not a site directory, so the checkout's editable install stays
inactive and ``fedrca`` is imported from the wheel — asserted). ``pip check`` then proves every requirement the
wheel declares is met. Resolving and downloading the dependencies again is pip's job, not fedrca's, and took
two minutes of the suite.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_installed_wheel_carries_its_files_and_runs_the_demo(tmp_path):
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
         tmp_path, 600)  # fmt: skip
    wheel = next(dist.glob("fedrca-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "fedrca/_bundled/config/tep.yaml" in names
    assert "fedrca/_bundled/config/tep.calibration.json" in names  # the map config/tep.yaml names
    assert {f"fedrca/_bundled/data/tep/{f}" for f in ("d00.dat", "d04_te.dat", "LICENSE.txt")} <= names

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        tmp_path, 60).strip())  # fmt: skip
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()}
    (purelib / "test-environment.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
         tmp_path, 600)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("FEDRCA_DATA", "PYTHONPATH", "VIRTUAL_ENV")}
    where = _run([str(python), "-c", "import fedrca; print(fedrca.__file__)"], tmp_path, 60, env=env).strip()
    assert Path(where).is_relative_to(env_dir), f"fedrca was imported from {where}, not from the wheel"
    _run([str(python), "-m", "pip", "check"], tmp_path, 120, env=env)  # every Requires-Dist of the wheel is met

    elsewhere = tmp_path / "elsewhere"  # no checkout here: config and data must come from the package
    elsewhere.mkdir()
    out = _run(
        [str(env_dir / "bin" / "fedrca"), "demo", "--faults", "04", "--speed", "asap", "--metrics-port", "0",
         "--out", str(elsewhere / "out")],
        elsewhere, 600, env=env,
    )  # fmt: skip
    assert "3/3 evaluation" in out and "d04_te.dat" in out
    assert "root cause reactor (p " in out and "uncalibrated" not in out  # the bundled map was found
    assert (elsewhere / "out" / "report" / "index.html").is_file()
