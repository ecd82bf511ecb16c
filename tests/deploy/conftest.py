"""Fixtures of the deployment tests: the rendered kustomizations (one ``kubectl kustomize`` each)."""

from __future__ import annotations

import shutil
from types import ModuleType

import pytest
import yaml

from fedrca.config import SiteConfig, parse_config
from tests.deploy import support


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[support.Doc]]:
    """Resources of every kustomization (``base`` and each overlay) by kustomization name."""
    return {name: support.render(path) for name, path in support.KUSTOMIZATIONS.items()}


@pytest.fixture(scope="session")
def base(rendered) -> list[support.Doc]:
    return rendered["base"]


@pytest.fixture(scope="session")
def sync() -> ModuleType:
    return support.sync_module()


@pytest.fixture(scope="session")
def site_config() -> SiteConfig:
    return parse_config(yaml.safe_load((support.REPO / "config" / "tep.yaml").read_text(encoding="utf-8")))


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found on PATH: install the Debian package 'prometheus' "
            "(`make test` does it through tools/ensure-system-deps.sh)"
        )
    return path
