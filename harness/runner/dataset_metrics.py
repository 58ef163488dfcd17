"""A run's dataset metrics: Harbor's built-ins, and a dataset's ``metric.py`` in a sandbox.

The metrics the run's datasets declare (pinned in ``datasets.lock.json``, or a local task
set's ``metric.py``: :mod:`harness.datasets.metrics`) are computed once the trials are
done, over every planned trial of the dataset, and go into ``summary.json`` as
``dataset_metrics``::

    {"mean": {"type": "mean", "source": "builtin", "dataset": "d@1", "value": 0.5,
              "trials_counted": 4, "graded": 3, "ungraded": 1, "error": null}}

Each trial the metric counts is one line of ``rewards.jsonl`` in plan order: its rewards
(``{"reward": 1.0, ...}``) when it was graded, else ``null`` (ungraded, or never
recorded), as Harbor writes it. A built-in counts ``null`` as 0 (so the mean is the
headline's); ``graded`` and ``ungraded`` say how many of the counted trials had a reward.

A script is the dataset's code, never run on the host: it runs as an agent phase of a
sandbox of its own on the run's backend (docker and local; any other backend's run uses
the local sandbox, which runs none unless the harness is root: without root it is no
boundary), with no network, :data:`SCRIPT_CPUS` CPU, :data:`SCRIPT_MEMORY_MB` MB,
:data:`SCRIPT_PIDS` processes, :data:`SCRIPT_TIMEOUT_SEC` seconds and
:data:`SCRIPT_OUTPUT_BYTES` of captured output, as ``python3 metric.py -i rewards.jsonl
-o metric.json`` (Harbor's arguments). It sees only its own file and ``rewards.jsonl``.
``metric.json`` is read without following a link, at most :data:`MAX_RESULT_BYTES`, and
must be a JSON object of at most :data:`MAX_RESULT_KEYS` short names to finite numbers.
Anything else (a failure, a timeout, garbage, too much) is the metric's ``error``: the
summary is written all the same, and no trial's record changes.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.backends.registry import open_backend
from harness.config import RunConfig, SandboxConfig
from harness.datasets.cache import TaskCache
from harness.datasets.metrics import (
    SCRIPT_METRIC,
    DeclaredMetric,
    builtin_value,
    cached_script,
    check_metric_name,
)
from harness.records.model import TrialRecord, latest_by_id
from harness.trial.settings import TrialPlan
from sandbox.backend import PhaseRequest, Resources, SandboxSpec
from sandbox.errors import HarnessError
from sandbox.users import is_root

#: The backends a metric script runs on as the run did; any other: ``local``.
SCRIPT_BACKENDS = ("docker", "local")
SCRIPT_CPUS = 1.0
SCRIPT_MEMORY_MB = 512
SCRIPT_PIDS = 512
SCRIPT_STORAGE_MB = 256
SCRIPT_TIMEOUT_SEC = 120.0
SCRIPT_OUTPUT_BYTES = 64 << 10
#: The largest ``metric.json`` read, and how many values it may hold.
MAX_RESULT_BYTES = 64 << 10
MAX_RESULT_KEYS = 64
_MAX_ERROR = 1024

Rows = list[dict[str, float] | None]


class MetricScriptError(HarnessError):
    """A metric script gave no usable value: why, on one line (recorded, never raised on)."""


def reward_rows(
    records: Sequence[TrialRecord], plans: Sequence[TrialPlan], keep: Callable[[str], bool]
) -> Rows:
    """One row per planned trial whose task ``keep`` keeps: its rewards, or None.

    A trial is graded when its reward is a finite number; its row is its rewards (only
    their finite values), or ``{"reward": reward}`` when it named none.
    """
    latest = latest_by_id(records)
    rows: Rows = []
    for plan in plans:
        if not keep(plan.task.key):
            continue
        record = latest.get(plan.id)
        if record is None or record.reward is None or not math.isfinite(record.reward):
            rows.append(None)
            continue
        named = {k: v for k, v in record.rewards.items() if math.isfinite(v)}
        rows.append(named or {"reward": record.reward})
    return rows


def rewards_jsonl(rows: Rows) -> bytes:
    """``rewards.jsonl``: one line per row, ``null`` for a trial without a reward."""
    return b"".join(
        (b"null" if row is None else json.dumps(row, sort_keys=True).encode()) + b"\n"
        for row in rows
    )


def parse_result(data: bytes | None) -> dict[str, float]:
    """A script's ``metric.json``: an object of short names to finite numbers.

    Raises:
        MetricScriptError: Missing, too large, not JSON, not an object, too many keys, a
            bad name, or a value that is not a finite number (``NaN``, a string, a bool).
    """
    if data is None:
        raise MetricScriptError("the script wrote no metric.json (a regular file)")
    if len(data) > MAX_RESULT_BYTES:
        raise MetricScriptError(f"metric.json is larger than {MAX_RESULT_BYTES} bytes")
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetricScriptError(f"metric.json is not JSON: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise MetricScriptError(f"metric.json is a {type(value).__name__}, not an object")
    if len(value) > MAX_RESULT_KEYS:
        raise MetricScriptError(f"metric.json has {len(value)} keys, more than {MAX_RESULT_KEYS}")
    result: dict[str, float] = {}
    for key, number in value.items():
        try:
            check_metric_name(key)
        except ValueError as exc:
            raise MetricScriptError(f"metric.json: {exc}") from None
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise MetricScriptError(f"metric.json: {key} is not a number")
        as_float = float(number)
        if not math.isfinite(as_float):
            raise MetricScriptError(f"metric.json: {key} is not a finite number")
        result[key] = as_float
    return result


def _refuse_constant(name: str) -> float:
    """``NaN``, ``Infinity``, ``-Infinity`` are not numbers a metric may hold."""
    raise ValueError(f"{name} is not a finite number")


def script_config(config: RunConfig) -> RunConfig:
    """The run's config as a metric script's sandbox takes it.

    The run's backend when it is docker or local (same runtime), else local; nothing the
    run exposes to its agents (``expose``), no root agent, no plug-in options.
    """
    sandbox = config.sandbox
    if sandbox.backend in SCRIPT_BACKENDS:
        chosen = sandbox.model_copy(update={"expose": [], "agent_root": "never", "kwargs": {}})
    else:
        chosen = SandboxConfig(backend="local")
    return config.model_copy(update={"sandbox": chosen})


def run_script(config: RunConfig, run_name: str, script: bytes, rows: Rows) -> dict[str, float]:
    """Run a metric script over ``rows`` in a sandbox of its own (see the module docstring).

    Raises:
        MetricScriptError: The sandbox could not run it, or it gave no usable value.
    """
    chosen = script_config(config)
    if chosen.sandbox.backend == "local" and not is_root():
        raise MetricScriptError(
            "the local sandbox is not a security boundary without root, and a metric script "
            "is the dataset's code: it did not run (run as root, or with --sandbox docker)"
        )
    try:
        backend = open_backend(chosen, run_name)
    except Exception as exc:  # a plug-in's own error types too: the summary still comes
        raise MetricScriptError(
            f"the {chosen.sandbox.backend} sandbox did not open: {exc}"
        ) from None
    try:
        backend.start()
        spec = SandboxSpec(
            trial_id=f"metric-{secrets.token_hex(4)}",
            resources=Resources(
                cpus=SCRIPT_CPUS,
                memory_mb=SCRIPT_MEMORY_MB,
                storage_mb=SCRIPT_STORAGE_MB,
                pids=SCRIPT_PIDS,
            ),
            allow_internet=False,
            task_name="dataset-metric",
            labels={"org.harness.kind": "dataset-metric"},
        )
        sandbox = backend.make_sandbox(spec)
        try:
            sandbox.build_image()
            sandbox.start()
            workspace = sandbox.paths.workspace
            sandbox.put_file(f"{workspace}/metric.py", script, agent_readable=True)
            sandbox.put_file(f"{workspace}/rewards.jsonl", rewards_jsonl(rows), agent_readable=True)
            result = sandbox.run_phase(
                PhaseRequest(
                    role="agent",
                    argv=["python3", "metric.py", "-i", "rewards.jsonl", "-o", "metric.json"],
                    cwd=workspace,
                    timeout_sec=SCRIPT_TIMEOUT_SEC,
                    max_output_bytes=SCRIPT_OUTPUT_BYTES,
                    log_name="metric",
                )
            )
            if result.timed_out:
                raise MetricScriptError(f"the script ran past {SCRIPT_TIMEOUT_SEC:g} seconds")
            if result.exit_code != 0:
                how = f"signal {result.signal}" if result.signal else f"exit {result.exit_code}"
                raise MetricScriptError(f"the script failed ({how})")
            data, event = sandbox.read_file(
                f"{workspace}/metric.json", max_bytes=MAX_RESULT_BYTES + 1
            )
            if data is None and event is not None and event.kind == "too_large":
                raise MetricScriptError(f"metric.json is larger than {MAX_RESULT_BYTES} bytes")
            if data is None and event is not None and event.kind != "missing":
                raise MetricScriptError(
                    f"the script wrote no metric.json as a regular file (a {event.kind})"
                )
            return parse_result(data)
        finally:
            sandbox.stop()
    except MetricScriptError:
        raise
    except Exception as exc:  # the sandbox's own failure: recorded, the summary comes
        raise MetricScriptError(f"the sandbox failed: {type(exc).__name__}: {exc}") from None
    finally:
        backend.close()


def compute(
    metrics: Sequence[DeclaredMetric],
    records: Sequence[TrialRecord],
    plans: Sequence[TrialPlan],
    *,
    task_datasets: Mapping[str, str],
    config: RunConfig,
    run_name: str,
    cache: TaskCache | None = None,
    log: Callable[[str], None] = lambda _line: None,
    run_scripts: bool = True,
) -> dict[str, dict[str, Any]]:
    """``summary.json``'s ``dataset_metrics``: each declared metric, or why it has none.

    Args:
        metrics: The metrics the run's datasets declare (its lock's, and a local task
            set's ``metric.py``).
        records: The run's records (the latest per trial counts).
        plans: The run's planned trials.
        task_datasets: Task key → the ``NAME@VERSION`` it came from: a metric counts the
            planned trials of its own dataset's tasks.
        config: The run's config (its backend runs a script).
        run_name: The run's name (the label of what a script's sandbox creates).
        cache: Where scripts are kept by digest.
        log: Where each metric error goes too.
        run_scripts: False: a script metric's ``error`` says it did not run (an
            interrupted run).
    """
    if not metrics:
        return {}
    cache = cache or TaskCache()
    out: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        dataset = metric.dataset

        def mine(key: str, dataset: str = dataset) -> bool:
            return task_datasets.get(key) == dataset

        rows = reward_rows(records, plans, mine)
        graded = sum(1 for row in rows if row is not None)
        entry: dict[str, Any] = {
            "type": metric.type,
            "source": metric.source,
            "dataset": metric.dataset,
            "value": None,
            "trials_counted": len(rows),
            "graded": graded,
            "ungraded": len(rows) - graded,
            "error": None,
        }
        try:
            if metric.type == SCRIPT_METRIC and metric.error is None and not run_scripts:
                raise MetricScriptError("the run was interrupted: the script did not run")
            entry["value"] = _value(metric, rows, config, run_name, cache)
        except MetricScriptError as exc:
            entry["error"] = str(exc)[:_MAX_ERROR]
        except Exception as exc:  # never lose the summary to a metric
            entry["error"] = f"{type(exc).__name__}: {exc}"[:_MAX_ERROR]
        if entry["error"] is not None:
            log(f"dataset metric {metric.name} not computed: {entry['error']}")
        out[metric.name] = entry
    return out


def _value(
    metric: DeclaredMetric, rows: Rows, config: RunConfig, run_name: str, cache: TaskCache
) -> float | dict[str, float] | None:
    if metric.error is not None:
        raise MetricScriptError(metric.error)
    if metric.type != SCRIPT_METRIC:
        return builtin_value(metric.type, rows)
    if metric.script_digest is None:
        raise MetricScriptError("the lock pins no script digest")
    script = cached_script(cache, metric.script_digest)
    if script is None:
        raise MetricScriptError(
            f"script {metric.script_digest} is not in this machine's cache (run the dataset "
            "anew with -d NAME@VERSION to fetch it)"
        )
    if not rows:
        return None
    return run_script(config, run_name, script, rows)


__all__ = [
    "MAX_RESULT_BYTES",
    "MAX_RESULT_KEYS",
    "SCRIPT_BACKENDS",
    "MetricScriptError",
    "compute",
    "parse_result",
    "reward_rows",
    "rewards_jsonl",
    "run_script",
    "script_config",
]
