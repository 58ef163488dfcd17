"""The base of every ``task.toml`` table: strict types, unknown and unsupported keys.

Every model of :mod:`harness.tasks.model` derives from :class:`Section`: strict about types,
immutable, and keeping the keys it does not know (Harbor keeps adding fields), so callers
can warn about them (:meth:`Section.unknown_keys`) and refuse the keys the harness knows but
does not implement (:data:`UNSUPPORTED_KEYS`, :meth:`Section.unsupported_keys`). The hash's
form of a table (:meth:`Section.hash_dump`) leaves out the fields added since the first
release while they are unset, so a task's hash survives upgrades. Also here: the value
types tables share (a user, a Harbor size string, a name).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator
from pydantic_core import PydanticCustomError


def _validate_user(value: object) -> str | int | None:
    """Accept a user name (non-empty string) or a numeric uid (non-negative integer)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise PydanticCustomError(
        "user_type", "Input should be a user name (string) or a uid (non-negative integer)"
    )


User = Annotated[str | int | None, PlainValidator(_validate_user)]
"""A user to run as: a name (``"agent"``) or a numeric uid (``1000``); None means the image's
default user."""

_STRICT = ConfigDict(extra="allow", strict=True, frozen=True, allow_inf_nan=False)

#: Keys Harbor defines that this harness knows and does not implement, with the reason. A
#: task using one is invalid (dropping the key would silently change what the trial means).
_TPU = (
    "TPUs exist only in Harbor's cloud TPU environments, on no engine the harness drives; "
    "run this task there"
)
UNSUPPORTED_KEYS: dict[str, str] = {
    "environment.tpu": _TPU,
    "verifier.environment.tpu": _TPU,
    # Judges score the trial's final state (its whole transcript and last workspace), not
    # a step's: a step's judges would silently never run.
    "steps[].verifier.judges": (
        "judges score the trial's final state, not a step's; declare them once in the "
        "task's [[verifier.judges]]"
    ),
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])i?B?\s*$", re.IGNORECASE)
_SIZE_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
#: Names that are safe as a directory name and as a container host name.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def size_to_mb(text: str) -> int:
    """Parse a Harbor size string (``"2G"``, ``"512M"``, ``"1.5GiB"``) into MiB.

    Raises:
        ValueError: the text is not a number followed by K, M, G or T.
    """
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"expected a size such as '2G' or '512M', got {text!r}")
    return max(1, int(float(match.group(1)) * _SIZE_MB[match.group(2).upper()]))


class Section(BaseModel):
    """Base for every ``task.toml`` model: strict types, unknown keys kept, immutable."""

    model_config = _STRICT

    def unknown_keys(self, prefix: str = "") -> list[str]:
        """List the keys this model and its sub-models did not recognise.

        Args:
            prefix: Dotted path of this model inside the document (``""`` at the top).

        Returns:
            Dotted paths (e.g. ``"environment.foo"``), sorted. The values of unknown
            keys are not descended into. Keys in :data:`UNSUPPORTED_KEYS` are not listed
            here (see :meth:`unsupported_keys`).
        """
        return sorted(k for k in self._extra_keys(prefix) if _unsupported(k) is None)

    def unsupported_keys(self, prefix: str = "") -> list[tuple[str, str]]:
        """List the keys the harness knows but does not implement, with the reason.

        Returns:
            ``(dotted path, reason)`` pairs, sorted by path.
        """
        found = []
        for key in self._extra_keys(prefix):
            reason = _unsupported(key)
            if reason is not None:
                found.append((key, reason))
        return sorted(found)

    def _extra_keys(self, prefix: str) -> list[str]:
        found = [f"{prefix}{key}" for key in (self.model_extra or {})]
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Section):
                found.extend(value._extra_keys(f"{prefix}{name}."))
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, Section):
                        found.extend(item._extra_keys(f"{prefix}{name}[{index}]."))
        return found

    def hash_dump(self) -> dict[str, Any]:
        """This model as JSON data for the task hash.

        Fields added after the first release are left out while unset, so a task that
        does not use them keeps the hash older versions gave it (a resume stays valid).
        """
        data = self.model_dump(mode="json")
        for name in _ADDED_FIELDS.get(type(self).__name__, ()):
            if name not in self.model_fields_set:
                data.pop(name, None)
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name not in data:
                continue  # an added field, unset
            if isinstance(value, Section):
                data[name] = value.hash_dump()
            elif isinstance(value, list) and any(isinstance(item, Section) for item in value):
                data[name] = [
                    item.hash_dump() if isinstance(item, Section) else dumped
                    for item, dumped in zip(value, data[name], strict=True)
                ]
        return data


def _unsupported(key: str) -> str | None:
    """Why ``key`` is refused (None: it is not).

    A step's key is looked up as a step's (``steps[1].verifier.judges`` →
    ``steps[].verifier.judges``), then as the task's (``steps[1].verifier.x`` →
    ``verifier.x``: steps share the task's rules).
    """
    as_step = re.sub(r"^steps\[\d+\]\.", "steps[].", key)
    if as_step != key and as_step in UNSUPPORTED_KEYS:
        return UNSUPPORTED_KEYS[as_step]
    return UNSUPPORTED_KEYS.get(as_step.removeprefix("steps[]."))


#: Per model, the fields that did not exist in the first release (see ``hash_dump``).
_NETWORK_FIELDS = ("network_mode", "allowed_hosts")
_ADDED_FIELDS: dict[str, tuple[str, ...]] = {
    "TaskSection": ("authors", "keywords", "version"),
    "Artifact": ("service",),
    "StepVerifier": (*_NETWORK_FIELDS, "collect"),
    "TaskConfig": ("source", "multi_step_reward_strategy", "steps", "artifacts", "harness"),
    "AgentSection": _NETWORK_FIELDS,
    "StepAgent": _NETWORK_FIELDS,
    "VerifierSection": (
        "environment_mode",
        "environment",
        "judges",
        "collect",
        *_NETWORK_FIELDS,
    ),
    "EnvironmentSection": (
        *_NETWORK_FIELDS,
        "os",
        "gpus",
        "gpu_types",
        "mcp_servers",
        "skills_dir",
        "healthcheck",
        "memory",
        "storage",
    ),
}


__all__ = ["NAME_PATTERN", "UNSUPPORTED_KEYS", "Section", "User", "size_to_mb"]
