"""Helpers shared by the test suite (not tests: pytest collects nothing here).

``tests/`` is on ``sys.path`` under pytest (``tests/conftest.py`` is a rootdir conftest in a
directory without ``__init__.py``), so every test module imports these as ``support.<name>``:

- ``support.docker``: connect to the engine, or skip/fail (``HARNESS_REQUIRE_DOCKER=1``).
- ``support.private_engine``: a private dockerd of a test's own, to stop and restart.
- ``support.egress_runtime``: a DockerRuntime for the egress tests (runc, or runsc-net).
- ``support.cli``: the harness CLI as a user runs it, in a subprocess.
- ``support.faults``: the CLI as a subprocess, small filesystems, polling of a run dir.
- ``support.episodes``: episode configs and run dirs of the examples.
- ``support.installed_agents``: what the installed-agent tests share (one run, probes).
- ``support.net``: TCP listeners and the host's addresses, for network attacks.
- ``support.netns``: a network namespace of the test's own, with servers in it.
- ``support.loopback``: a real HTTP server on 127.0.0.1, for scripted upstreams.
- ``support.tb1``: Terminal-Bench 1 task builders.
- ``support.ray_cluster``: a real local Ray cluster of several nodes.
"""
