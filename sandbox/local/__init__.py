"""The local backend: trials as host processes, each phase in a fresh root view (docs/sandbox.md).

Its whole code is here: :mod:`sandbox.local.plugin` (``LocalBackend``, what a run opens),
:mod:`sandbox.local.sandbox` (``LocalSandbox``, one trial) and :mod:`sandbox.local.cgroups`
(the cgroup that holds each trial's limits).
"""
