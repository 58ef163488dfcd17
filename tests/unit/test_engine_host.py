"""The probe that asks the engine for its host's addresses holds nothing but its question."""

from __future__ import annotations

from sandbox.docker.engine_host import create_args


def test_the_probe_reads_the_hosts_routing_table_with_nothing_else() -> None:
    args = create_args("harness/base:bookworm")
    assert args["network_mode"] == "host"
    assert args["command"] == ["cat", "/proc/net/fib_trie"] and args["entrypoint"] == []
    assert args["cap_drop"] == ["ALL"] and "cap_add" not in args
    assert args["user"] == "65534:65534" and args["read_only"] is True
    assert "no-new-privileges" in args["security_opt"]
    assert "mounts" not in args and "volumes" not in args and "privileged" not in args
    assert args["remove"] is True and args["labels"]["org.harness.managed"] == "1"
