"""Who a docker trial's agent is: the rule (``sandbox.agent_root``) applied to the task and image.

Harbor's agent is ``[agent].user``, else the image's ``USER`` (root when unset). Here:

- ``never`` (the default): that user when it is not root, else an unprivileged uid
  (:data:`DEFAULT_UID`); a task that wanted root is named in the run's line and its record;
- ``isolated``: that user, root included, only behind a second boundary (gVisor, a
  remapped user namespace; :mod:`sandbox.docker.boundary`), else the trial is refused;
- ``allow``: that user, root included, on any runtime.

A root agent stays uid 0 with :data:`~sandbox.docker.container.ROOT_AGENT_CAPS` only
(:func:`sandbox.inside.confine.confine_root`). The record's ``posture.identity`` says what
applied (:meth:`AgentIdentity.to_json`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.docker.boundary import isolated_refusal
from sandbox.errors import PermanentStartError

DEFAULT_UID = 65532
DEFAULT_GID = 65532


@dataclass(frozen=True)
class AgentIdentity:
    """The agent's identity in one trial.

    Attributes:
        rule: ``sandbox.agent_root``.
        wanted: The user Harbor's rule names (``[agent].user``, else the image's ``USER``,
            else ``root``).
        wanted_root: Whether that user is root.
        user: The user the agent runs as (None: the harness's unprivileged uid).
        uid: The uid the agent runs as.
        gid: Its gid.
        boundary: ``gvisor``, ``userns-remap``, ``rootless`` or ``none``.
    """

    rule: str
    wanted: str
    wanted_root: bool
    user: str | None
    uid: int
    gid: int
    boundary: str

    @property
    def root(self) -> bool:
        """Whether the agent runs as uid 0."""
        return self.uid == 0

    def to_json(self) -> dict[str, Any]:
        """The identity as the record's ``posture.identity`` stores it."""
        return {
            "rule": self.rule,
            "wanted": self.wanted,
            "wanted_root": self.wanted_root,
            "user": self.user,
            "uid": self.uid,
            "gid": self.gid,
            "boundary": self.boundary if self.root else None,
        }

    @property
    def demoted(self) -> bool:
        """Root was wanted and an unprivileged uid runs instead (``never``)."""
        return self.wanted_root and not self.root


def wanted_user(agent_user: str | int | None, image_user: str | None) -> str:
    """The user name (or uid) Harbor's rule gives the agent: the task's, the image's, root."""
    if agent_user not in (None, ""):
        return str(agent_user).split(":")[0]
    user = str(image_user or "").split(":")[0]
    return user or "root"


def resolve(
    rule: str,
    agent_user: str | int | None,
    image_user: str | None,
    whois: Callable[[str], tuple[int, int]],
    boundary: str,
) -> AgentIdentity:
    """Apply ``rule`` to the task's and the image's user.

    Args:
        rule: ``never``, ``isolated`` or ``allow``.
        agent_user: The task's ``[agent].user`` (None: unset).
        image_user: The image's ``USER`` (None or "": unset).
        whois: Resolves a name or uid against the image's ``/etc/passwd``.
        boundary: The second boundary around a root agent here.

    Raises:
        PermanentStartError: ``isolated`` without a second boundary, or the task's user
            is unknown to the image.
    """
    wanted = wanted_user(agent_user, image_user)
    if wanted in ("root", "0"):
        uid, gid = 0, 0
    elif rule == "never" and agent_user in (None, ""):
        # As before: the image's USER does not pick the agent under the card's rule.
        return AgentIdentity(rule, wanted, False, None, DEFAULT_UID, DEFAULT_GID, boundary)
    else:
        uid, gid = whois(wanted)
    wanted_root = uid == 0
    if not wanted_root:
        return AgentIdentity(rule, wanted, False, wanted, uid, gid, boundary)
    if rule == "never":
        return AgentIdentity(rule, wanted, True, None, DEFAULT_UID, DEFAULT_GID, boundary)
    if rule == "isolated" and boundary == "none":
        raise PermanentStartError(isolated_refusal(None))
    return AgentIdentity(rule, wanted, True, wanted, 0, 0, boundary)


__all__ = ["DEFAULT_GID", "DEFAULT_UID", "AgentIdentity", "resolve", "wanted_user"]
