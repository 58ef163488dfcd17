"""``python -m sandbox.egress_proxy --allow pypi.org --listen 127.0.0.1:3128``: one by hand."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from sandbox.egress_proxy.server import ProxyServer
from sandbox.network_policy import NetworkPolicy


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; print each refusal as a JSON line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m sandbox.egress_proxy")
    parser.add_argument("--allow", action="append", default=[], help="allowed_hosts entry")
    parser.add_argument("--public", action="store_true", help="every host but the forbidden")
    parser.add_argument("--listen", default="127.0.0.1:3128", help="HOST:PORT of the proxy")
    parser.add_argument("--dns-port", type=int, default=None, help="UDP+TCP port of the responder")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    policy = (
        NetworkPolicy("public") if args.public else NetworkPolicy("allowlist", tuple(args.allow))
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ProxyServer(
        policy, host=host.strip("[]"), port=int(port), dns_port=args.dns_port
    ) as server:
        print(json.dumps({"proxy": server.address, "dns": server.dns_address}), flush=True)
        while not stop.wait(1.0):
            for event in server.events():
                print(json.dumps(event), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
