"""The package's public names: each resolves, on first use, to its module's object."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import harness


@pytest.mark.parametrize("name", sorted(set(harness.__all__) - {"__version__"}))
def test_each_public_name_is_its_modules_object(name: str) -> None:
    module = importlib.import_module(harness._EXPORTS[name])
    assert getattr(harness, name) is getattr(module, name)
    assert name in dir(harness)


def test_every_exported_name_is_public_and_every_public_name_exported() -> None:
    assert set(harness._EXPORTS) == set(harness.__all__) - {"__version__"}


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = harness.nope


def test_importing_the_package_imports_no_runner_nor_third_party_stack() -> None:
    # `harness --version` and a plug-in's `from harness.errors import ...` stay cheap.
    probe = (
        "import sys, harness; "
        "print(sorted(m for m in ('harness.runner', 'harness.api', 'harness.config', "
        "'pydantic', 'httpx', 'docker') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_command_line_loads_no_http_client_until_a_model_or_registry_is_read() -> None:
    # The gateway and the datasets readers import httpx where they call out, not at the top.
    probe = "import sys, harness.cli.app; print('httpx' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
