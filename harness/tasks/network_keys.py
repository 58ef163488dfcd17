"""The network keys of a ``task.toml`` table: Harbor's ``network_mode`` and ``allowed_hosts``.

Harbor (>= 0.18) declares a phase's network in ``[environment]`` (every phase), ``[agent]``,
``[verifier]`` and, for a multi-step task, each step's ``agent`` and ``verifier`` tables:
``network_mode`` is ``public``, ``no-network`` or ``allowlist``; ``allowed_hosts`` lists
what an ``allowlist`` lets through (empty: nothing). An entry is a host name
(``pypi.org``), a ``*.`` wildcard (``*.github.com``: every name below it, not the name
itself), an IPv4 or IPv6 address, or a CIDR (``10.0.0.0/8``). Entries are checked and
normalised here (lower case, no trailing dot); how a phase's policy is resolved from the
tables is :mod:`harness.tasks.networks`.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import field_validator, model_validator

from harness.tasks.section import Section
from sandbox.network_policy import NetworkMode

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
#: Longest host name DNS carries (RFC 1035, without the trailing dot).
MAX_HOST_NAME = 253
#: Most entries one ``allowed_hosts`` may hold (a bound on what the proxy matches against).
MAX_ALLOWED_HOSTS = 256


def normalize_allowed_host(entry: str) -> str:
    """Check one ``allowed_hosts`` entry and return its canonical spelling.

    Raises:
        ValueError: The entry is not a host name, a ``*.`` wildcard, an IP or a CIDR (a
            URL, a port, a bare ``*`` or a wildcard in the middle are refused, with how to
            write it instead).
    """
    text = entry.strip().lower().rstrip(".")
    if not text:
        raise ValueError("an empty entry; list host names, '*.' wildcards, IPs or CIDRs")
    if "://" in text or any(char in text for char in "?#@ "):
        raise ValueError(f"{entry!r} is not a host; write the host alone (e.g. 'pypi.org')")
    if "/" in text:
        try:
            return str(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"{entry!r} is neither a host nor a CIDR (e.g. '203.0.113.0/24')"
            ) from None
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        pass
    if ":" in text:
        raise ValueError(
            f"{entry!r} names a port or is not an address; allowed_hosts takes hosts "
            "without ports (the proxy allows any port of a listed host)"
        )
    name = text[2:] if text.startswith("*.") else text
    labels = name.split(".")
    if len(name) > MAX_HOST_NAME or not all(_LABEL.match(label) for label in labels):
        raise ValueError(
            f"{entry!r} is not a host name; a wildcard is '*.' before a name "
            "('*.example.com'), nowhere else"
        )
    if text.startswith("*.") and len(labels) < 2:
        raise ValueError(f"{entry!r} matches a whole top-level domain; name a domain under it")
    return text


class NetworkKeys(Section):
    """The network keys a table may hold (``None``: the table does not say).

    Attributes:
        network_mode: ``public``, ``no-network`` or ``allowlist``.
        allowed_hosts: What an ``allowlist`` lets through.
    """

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if len(value) > MAX_ALLOWED_HOSTS:
            raise ValueError(f"more than {MAX_ALLOWED_HOSTS} entries")
        hosts: list[str] = []
        for entry in value:
            host = normalize_allowed_host(entry)
            if host not in hosts:
                hosts.append(host)
        return hosts

    @model_validator(mode="after")
    def _hosts_need_allowlist(self) -> NetworkKeys:
        if self.allowed_hosts and self.network_mode not in (None, "allowlist"):
            raise ValueError(
                f"allowed_hosts is given with network_mode = {self.network_mode!r}; it only "
                "applies to network_mode = 'allowlist'"
            )
        return self


__all__ = ["MAX_ALLOWED_HOSTS", "NetworkKeys", "normalize_allowed_host"]
