"""Packages installed without their declared dependencies on Debian's runtime.

``openhands-tools`` declares dependencies with no wheel (``func-timeout``) or that its three
tools never import (``browser-use``, ``tom-swe``): the entry installs it with ``pip
--no-deps`` into a dir of its own and merges that into the runtime's packages, where
``openhands-sdk`` shares its ``openhands`` namespace package. A spec with no such package
keys as it did before (Terminus-2's entries stay valid).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.agents.installed.cache import InstallError
from harness.agents.installed.debian_runtime import _merge, debian_python_spec
from harness.agents.installed.openhands_sdk import OpenHandsSdk


def test_a_spec_without_no_deps_packages_keys_as_before() -> None:
    plain = debian_python_spec("terminus-2", "0.26.0", ("harbor==0.26.0",))
    assert "pypi_no_deps" not in plain.as_json()
    with_tools = debian_python_spec("a", "1", ("a==1",), no_deps=("b==1",))
    assert with_tools.as_json()["pypi_no_deps"] == ["b==1"]
    assert with_tools.key != debian_python_spec("a", "1", ("a==1",)).key


def test_openhands_tools_is_pinned_and_installed_without_its_dependencies() -> None:
    spec = OpenHandsSdk().install_spec()
    assert spec.pypi[0] == "openhands-sdk==1.58.2"
    assert spec.pypi_no_deps == ("openhands-tools==1.58.2",)
    assert not [r for r in spec.pypi if r.startswith(("browser-use", "func-timeout", "tom-swe"))]


def test_merging_fills_a_shared_namespace_dir_and_refuses_a_clash(tmp_path: Path) -> None:
    site, alone = tmp_path / "site", tmp_path / "alone"
    (site / "openhands" / "sdk").mkdir(parents=True)
    (site / "openhands" / "sdk" / "__init__.py").write_text("sdk")
    (alone / "openhands" / "tools").mkdir(parents=True)
    (alone / "openhands" / "tools" / "__init__.py").write_text("tools")
    spec = debian_python_spec("a", "1", ())
    _merge(spec, alone, site)
    assert (site / "openhands" / "sdk" / "__init__.py").read_text() == "sdk"
    assert (site / "openhands" / "tools" / "__init__.py").read_text() == "tools"
    assert not alone.exists()

    (alone / "openhands" / "sdk").mkdir(parents=True)
    (alone / "openhands" / "sdk" / "__init__.py").write_text("other")
    with pytest.raises(InstallError, match=r"openhands/sdk/__init__.py of its --no-deps"):
        _merge(spec, alone, site)
    assert (site / "openhands" / "sdk" / "__init__.py").read_text() == "sdk"
