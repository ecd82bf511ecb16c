"""The Faust / aiokafka private-API overrides refuse versions they were not checked against."""

from __future__ import annotations

import pytest

from fedrca.exceptions import ConfigError
from fedrca.streams.compat import SUPPORTED, check_versions


def test_the_installed_versions_are_supported():
    check_versions()  # would have failed at import already


@pytest.mark.parametrize(
    ("dist", "version"), [("faust-streaming", "0.16.0"), ("faust-streaming", "0.14.9"), ("aiokafka", "0.15.1")]
)
def test_an_unsupported_version_is_refused_with_the_fix(dist, version):
    installed = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0", dist: version}
    with pytest.raises(ConfigError, match=rf"{dist} {version} is not supported .* pip install '{dist}>="):
        check_versions(installed)


def test_the_pins_in_pyproject_match_the_guards():
    import tomllib
    from pathlib import Path

    deps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    pins = " ".join(deps["dependencies"])
    for dist, (low, high) in SUPPORTED.items():
        assert f"{dist}>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}" in pins
