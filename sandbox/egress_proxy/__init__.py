"""The allowlist egress proxy (issue 24): HTTP/CONNECT by Host and SNI, DNS for listed names.

Host-side (it never runs in a sandbox); a backend starts a :class:`ProxyServer` per sandbox
whose phase has an ``allowlist`` policy, where only that sandbox reaches it, and routes the
sandbox's traffic to it (``HTTP_PROXY``/``HTTPS_PROXY``, or a redirect of its TCP 80/443
and UDP 53). What it lets through is in :mod:`sandbox.egress_proxy.rules`; docs/security.md
has the policy table. ``python -m sandbox.egress_proxy --help`` runs one by hand.
"""

from sandbox.egress_proxy.proxy import EgressProxy, ProxyLimits
from sandbox.egress_proxy.rules import Allowlist, forbidden
from sandbox.egress_proxy.server import ProxyServer, allowlist_of

__all__ = ["Allowlist", "EgressProxy", "ProxyLimits", "ProxyServer", "allowlist_of", "forbidden"]
