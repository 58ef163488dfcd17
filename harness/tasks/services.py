"""Which compose services a task's collect hooks and artifacts name, checked against its file.

Schema 1.4 lets ``[[verifier.collect]]`` hooks and ``artifacts`` entries name a compose
service (a sidecar). A name is hostile input: it must be ``main`` (the agent's container)
or a service the task's ``environment/docker-compose.yaml`` defines, else the task is
invalid (``harness tasks check`` says which). The file is read by YAML's safe loader,
capped as :func:`sandbox.docker.compose_check.compose_file_problems` caps it, and never
through a link leaving the task (the loader refuses those first).
"""

from __future__ import annotations

from pathlib import Path

from harness.tasks.model import MAIN_SERVICE, TaskConfig

#: The largest compose file read (as the allowlist's reader).
MAX_COMPOSE_BYTES = 1 << 20


def named_services(config: TaskConfig) -> list[tuple[str, str]]:
    """``(field, service)`` for every sidecar a hook or an artifact of ``config`` names."""
    found: list[tuple[str, str]] = []
    tables = [("", config.verifier.collect, config.artifacts)]
    for index, step in enumerate(config.steps or []):
        tables.append((f"steps[{index}].", step.verifier.collect, step.artifacts))
    for prefix, hooks, artifacts in tables:
        for number, hook in enumerate(hooks):
            if hook.service != MAIN_SERVICE:
                found.append((f"{prefix}verifier.collect[{number}].service", hook.service))
        for number, artifact in enumerate(artifacts):
            if artifact.sidecar is not None:
                found.append((f"{prefix}artifacts[{number}].service", artifact.sidecar))
    return found


def compose_services(compose: Path) -> list[str] | None:
    """The service names of a compose file (None: no file, or it cannot be read)."""
    import yaml

    try:
        with open(compose, "rb") as handle:
            text = handle.read(MAX_COMPOSE_BYTES + 1)
        if len(text) > MAX_COMPOSE_BYTES:
            return None
        data = yaml.safe_load(text)
    except (OSError, ValueError, RecursionError, yaml.YAMLError):
        return None
    services = data.get("services") if isinstance(data, dict) else None
    return [str(name) for name in services] if isinstance(services, dict) else None


def service_problems(task_dir: Path, config: TaskConfig) -> list[tuple[str, str]]:
    """``(field, message)`` for each service named that the task does not define."""
    named = named_services(config)
    if not named:
        return []
    compose = task_dir / "environment" / "docker-compose.yaml"
    defined = compose_services(compose) if compose.is_file() else None
    problems = []
    for field, service in named:
        if defined is None:
            problems.append(
                (
                    field,
                    f"names the compose service {service!r}, but the task has no readable "
                    "environment/docker-compose.yaml; define the service there or drop it",
                )
            )
        elif service not in defined:
            problems.append(
                (
                    field,
                    f"names the compose service {service!r}, which "
                    "environment/docker-compose.yaml does not define (it has: "
                    f"{', '.join(sorted(defined)) or 'none'})",
                )
            )
    return problems


__all__ = ["compose_services", "named_services", "service_problems"]
