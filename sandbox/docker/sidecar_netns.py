"""Each compose sidecar in a network namespace filtered before the sidecar runs.

Where a compose task's network is guarded by the engine alone (``host_guard.kind =
"engine"``, :mod:`sandbox.docker.compose`), the bridge has no address of the host, yet it
is still the host's interface: a datagram a sidecar sends to the limited broadcast, its
subnet's broadcast or a multicast group is handed to the host's sockets bound to every
address. Nothing of the host may filter it there (no root), so it is stopped where it is
sent, in the sidecar's own namespace, which the sidecar never owns:

- the *holder* (``hxnet-<sidecar>``), a container of the harness's base image with no
  capability at all, is on the project's network under the sidecar's service name and
  aliases (so every name keeps resolving to it) with the sidecar's ``hostname``,
  ``dns`` and ``extra_hosts``; it only sleeps, and never restarts (a restarted holder
  would bring a new, unfiltered namespace);
- the *filter* (``hxrules-<sidecar>``), a one-shot container of the same image with
  ``NET_ADMIN`` alone, joins the holder's namespace, writes the sidecar's rules
  (:func:`sandbox.docker.netns_rules.sidecar_rules`, IPv4 and IPv6), reads them back
  with ``iptables -S`` and exits 0 only when the listing is exactly those rules;
- the sidecar joins the holder's namespace (``network_mode: service:<holder>``) and
  depends on the filter having completed successfully: compose does not start it
  before, and never if the rules could not be written or read back. There is no moment
  at which anything of the task runs in an unfiltered namespace.

The sidecar shares the namespace only (not its pid, IPC or mount namespace) and has no
``NET_ADMIN``: it cannot change the rules, nor reach the holder's process. The keys the
engine refuses on a joined namespace (``networks``, ``links``, ``hostname``,
``domainname``, ``dns*``, ``extra_hosts``, ``expose``) are reset on the sidecar and
carried by its holder instead (a link's alias becomes an alias of its target's holder).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sandbox.docker.netns_rules import SidecarRules

#: The filter's program: restore, read back, exit 0 only when the listing is exact.
_PROGRAM = r"""
import json, subprocess, sys
spec = json.loads(sys.argv[1])
for tool, family in (("iptables", "v4"), ("ip6tables", "v6")):
    done = subprocess.run([tool + "-restore", "-w"], input=spec[family]["restore"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("%s-restore failed: %s" % (tool, done.stderr.strip()[-500:]))
    shown = subprocess.run([tool, "-w", "-S"], capture_output=True, text=True)
    listing = shown.stdout.splitlines()
    if shown.returncode != 0 or listing != spec[family]["listing"]:
        sys.exit("%s rules read back differ: %r" % (tool, listing))
print("hx-sidecar-netns: rules written and read back", flush=True)
"""
#: Keys the engine refuses (or ignores) on a container that joins another's namespace:
#: reset on the sidecar; those that name its network identity move to its holder.
JOINED_RESET = (
    "networks",
    "links",
    "hostname",
    "domainname",
    "dns",
    "dns_search",
    "dns_opt",
    "extra_hosts",
    "expose",
    "mac_address",
)
#: The prefixes of the services the harness adds: a task's service never takes one (refused
#: by :mod:`sandbox.docker.compose_check`), so none of its keys merges into a holder or filter.
PREFIXES = ("hxnet", "hxrules")
_HOLDER_KEYS = ("hostname", "domainname", "dns_search", "dns_opt", "extra_hosts")
_ENVIRONMENT = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class SidecarNetns:
    """The holder and filter services of one sidecar."""

    sidecar: str
    holder: str
    filter: str


def plan(sidecars: Iterable[str], taken: Iterable[str]) -> list[SidecarNetns]:
    """A holder and a filter service name per sidecar, none clashing with ``taken``."""
    used = set(taken)
    made: list[SidecarNetns] = []
    for sidecar in sidecars:
        names = []
        for prefix in PREFIXES:
            name, index = f"{prefix}-{sidecar}", 1
            while name in used:
                index += 1
                name = f"{prefix}-{sidecar}-{index}"
            used.add(name)
            names.append(name)
        made.append(SidecarNetns(sidecar, names[0], names[1]))
    return made


def _aliases(spec: dict[str, Any]) -> list[str]:
    """The aliases a sidecar's (normalised) spec gives it on the default network."""
    networks = spec.get("networks")
    if not isinstance(networks, dict):
        return []
    settings = networks.get("default")
    if not isinstance(settings, dict):
        return []
    return [str(alias) for alias in settings.get("aliases") or []]


def _links(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """A sidecar's ``links`` as ``(target service, alias)``."""
    links = spec.get("links") or []
    found = []
    for link in links if isinstance(links, list) else []:
        target, _, alias = str(link).partition(":")
        found.append((target, alias or target))
    return found


def services(
    nets: list[SidecarNetns],
    specs: dict[str, dict[str, Any]],
    *,
    image: str,
    labels: dict[str, str],
    dns: list[str],
    rules: SidecarRules | None,
    reset: Any,
) -> dict[str, dict[str, Any]]:
    """The override's services: each sidecar's holder and filter, and the sidecar's own keys.

    Args:
        nets: The services' names (:func:`plan`).
        specs: Every service of the task, as compose normalised it.
        image: The harness's base image (``iptables``, ``python3``, ``sleep``).
        labels: The harness's labels.
        dns: The resolvers the holders' namespaces get.
        rules: The sidecars' rules; None before the project's network exists, when the
            filters fail closed (only the holders are created then).
        reset: The override's reset tag (compose's ``!reset``).
    """
    by_sidecar = {net.sidecar: net for net in nets}
    extra_aliases: dict[str, list[str]] = {net.sidecar: [] for net in nets}
    link_deps: dict[str, list[str]] = {net.sidecar: [] for net in nets}
    for net in nets:
        for target, alias in _links(specs.get(net.sidecar) or {}):
            if target in by_sidecar:
                extra_aliases[target].append(alias)
                link_deps[net.sidecar].append(target)
    if rules is None:
        command = ["false"]
    else:
        spec = {
            family: {"restore": rules.restore(listing), "listing": list(listing)}
            for family, listing in (("v4", rules.v4), ("v6", rules.v6))
        }
        command = ["python3", "-I", "-S", "-c", _PROGRAM, json.dumps(spec)]
    confined = {
        "image": image,
        "labels": labels,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "restart": "no",
        "environment": _ENVIRONMENT,
        "working_dir": "/",
    }
    made: dict[str, dict[str, Any]] = {}
    for net in nets:
        spec = specs.get(net.sidecar) or {}
        aliases = [net.sidecar, *_aliases(spec), *extra_aliases[net.sidecar]]
        holder: dict[str, Any] = {
            **confined,
            "command": ["sleep", "infinity"],
            "user": "65534:65534",
            "pids_limit": 4,
            "mem_limit": "32m",
            "dns": dns,
            "sysctls": {"net.ipv6.conf.all.disable_ipv6": "1"},
            "networks": {"default": {"aliases": list(dict.fromkeys(aliases))}},
        }
        holder.update({key: spec[key] for key in _HOLDER_KEYS if spec.get(key)})
        made[net.holder] = holder
        made[net.filter] = {
            **confined,
            "command": command,
            "user": "0:0",
            "cap_add": ["NET_ADMIN"],
            "pids_limit": 16,
            "mem_limit": "64m",
            "network_mode": f"service:{net.holder}",
            "depends_on": {net.holder: {"condition": "service_started", "required": True}},
        }
        # Required whatever the file says: compose merges a task's ``required: false`` on
        # the same name, and starts a sidecar past an optional dependency that failed or
        # was never run.
        depends = {net.filter: {"condition": "service_completed_successfully", "required": True}}
        declared = spec.get("depends_on")
        for target in link_deps[net.sidecar]:
            # A link ordered its target first: kept, unless the file orders it already.
            if not (isinstance(declared, dict) and target in declared):
                depends.setdefault(target, {"condition": "service_started"})
        made[net.sidecar] = {
            "network_mode": f"service:{net.holder}",
            "depends_on": depends,
            **{key: reset for key in JOINED_RESET},
        }
    return made


def listing(rules: SidecarRules) -> dict[str, list[str]]:
    """What the record says is enforced in every sidecar's namespace."""
    return {"ipv4": list(rules.v4), "ipv6": list(rules.v6)}


__all__ = ["JOINED_RESET", "PREFIXES", "SidecarNetns", "listing", "plan", "services"]
