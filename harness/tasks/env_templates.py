"""``${VAR}`` and ``${VAR:-default}`` in a task's env tables, resolved from the host.

Harbor resolves ``[environment].env``, ``[verifier].env`` and ``[solution].env`` values
from the host's environment when a trial starts. A value may mix text and templates
(``"http://${HOST:-localhost}:8080"``); ``$$`` is a literal ``$``.

A task is untrusted input, and the host's environment holds secrets (``AWS_SECRET_ACCESS_KEY``,
``GITHUB_TOKEN``...): a template reads only a variable the user allowed for the run
(``--task-env VAR``, ``tasks.env_allow``); any other takes its ``:-default``, and without
one is an error naming the option that allows it. A variable that is allowed but unset and
has no default is an error, and a provider credential the harness took from the
environment is refused even when allowed: a task must never pull a real key into a sandbox.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.tasks.task import Task

__all__ = [
    "EnvTemplateError",
    "check_templates",
    "env_tables",
    "map_env_tables",
    "resolve_env",
    "resolve_task_env",
]

_TOKEN = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bad>\$\{)"
)


class EnvTemplateError(UsageError, ValueError):
    """A template is malformed, names an unset variable, or names a taken credential."""


def _substitute(
    value: str,
    environ: Mapping[str, str],
    refused: Mapping[str, str],
    where: str,
    allowed: Collection[str] | None,
) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("bad") is not None:
            raise EnvTemplateError(f"{where}: malformed ${{...}} in {value!r}")
        name = match.group("name")
        if name in refused:
            raise EnvTemplateError(
                f"{where}: ${{{name}}} is a provider credential the harness keeps out of "
                "every sandbox; a task may not read it (agents reach models through the "
                "harness's gateway)"
            )
        if allowed is not None and name not in allowed:
            default = match.group("default")
            if default is None:
                raise EnvTemplateError(
                    f"{where}: ${{{name}}} reads the host's environment, which a task may do "
                    f"only for variables the run allows: pass --task-env {name} to harness "
                    f"run (or add it to tasks.env_allow), or write ${{{name}:-default}}"
                )
            return default
        found = environ.get(name)
        if found is None or (found == "" and match.group("default") is not None):
            default = match.group("default")
            if default is None:
                raise EnvTemplateError(
                    f"{where}: ${{{name}}} is not set on the host; set it, or write "
                    f"${{{name}:-default}}"
                )
            return default
        if any(secret and secret in found for secret in refused.values()):
            raise EnvTemplateError(
                f"{where}: ${{{name}}} holds a provider credential the harness keeps out of "
                "every sandbox; a task may not read it"
            )
        return found

    return _TOKEN.sub(replace, value)


def check_templates(env: Mapping[str, str], where: str) -> list[str]:
    """Syntax problems of the templates in ``env`` (empty when all are well formed)."""
    problems = []
    for key, value in env.items():
        for match in _TOKEN.finditer(value):
            if match.group("bad") is not None:
                problems.append(f"{where}.{key}: malformed ${{...}} in {value!r}")
                break
    return problems


def resolve_env(
    env: Mapping[str, str],
    environ: Mapping[str, str],
    *,
    refused: Mapping[str, str] | None = None,
    where: str = "env",
    allowed: Collection[str] | None = None,
) -> dict[str, str]:
    """Resolve every value of ``env`` against ``environ``.

    Args:
        env: A task's env table.
        environ: The host environment.
        refused: Credentials the harness took (name → value): neither the name may be
            read nor a value holding one used.
        where: The table's name, for messages (``environment.env``).
        allowed: The variables that may be read from ``environ`` (the run's
            ``tasks.env_allow``); any other takes its default. None: every variable (for
            callers that pass a curated ``environ``).

    Raises:
        EnvTemplateError: naming the key and what is wrong.
    """
    taken = refused or {}
    return {
        key: _substitute(value, environ, taken, f"{where}.{key}", allowed)
        for key, value in env.items()
    }


def map_env_tables(task: Task, change: Callable[[Mapping[str, str], str], dict[str, str]]) -> Task:
    """The task with each env table replaced by ``change(table, name)``.

    ``name`` says which table: ``environment.env``, ``verifier.env``, ``solution.env`` or
    ``steps[N].verifier.env``. The task's key and hash stay those of its files.
    """
    config = task.config

    def section(model: object, name: str) -> object:
        env = getattr(model, "env")  # noqa: B009 - every table here has an env dict
        return model.model_copy(update={"env": change(env, name)})  # type: ignore[attr-defined]

    steps = tuple(
        dataclasses.replace(
            step,
            config=step.config.model_copy(
                update={
                    "verifier": section(step.config.verifier, f"steps[{step.index}].verifier.env")
                }
            ),
        )
        for step in task.steps
    )
    resolved = config.model_copy(
        update={
            "environment": section(config.environment, "environment.env"),
            "verifier": section(config.verifier, "verifier.env"),
            "solution": section(config.solution, "solution.env"),
            "steps": [step.config for step in steps] if config.steps is not None else None,
        }
    )
    return dataclasses.replace(task, config=resolved, steps=steps)


def env_tables(task: Task) -> dict[str, dict[str, str]]:
    """Every env table of the task, by the names :func:`map_env_tables` gives them."""
    tables: dict[str, dict[str, str]] = {}

    def keep(table: Mapping[str, str], name: str) -> dict[str, str]:
        tables[name] = dict(table)
        return dict(table)

    map_env_tables(task, keep)
    return tables


def resolve_task_env(
    task: Task,
    environ: Mapping[str, str],
    *,
    refused: Mapping[str, str] | None = None,
    allowed: Collection[str] | None = None,
) -> Task:
    """The task with every env table resolved (its key and hash stay those of its files).

    Raises:
        EnvTemplateError: naming the task's ``task.toml``, the table and the key.
    """
    where = task.path / "task.toml"

    def resolve(table: Mapping[str, str], name: str) -> dict[str, str]:
        try:
            return resolve_env(table, environ, refused=refused, where=name, allowed=allowed)
        except EnvTemplateError as exc:
            raise EnvTemplateError(f"{where}: {exc}") from None

    return map_env_tables(task, resolve)
