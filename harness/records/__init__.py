"""Trial records (:mod:`.model`) and the run dir's ``trials.jsonl`` (:mod:`.store`).

Beside them: every run-dir path (:mod:`.layout`), the one run-dir reader (:mod:`.run`),
the run's metrics (:mod:`.metrics`), its live status (:mod:`.status`) and the trial
transcript (:mod:`.transcript`).

See docs/run-dir.md for the record schema (a contract: fields are added, never renamed).
"""

from harness.errors import CorruptRecordError
from harness.records.atomic import write_json_atomic
from harness.records.lines import original, parse_record, record_line
from harness.records.model import (
    AgentRef,
    AttemptSummary,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    Usage,
    latest_by_id,
)
from harness.records.store import (
    LOCK_FILENAME,
    TRIALS_FILENAME,
    CompactReport,
    LoadReport,
    StoreSnapshot,
    TrialStore,
)

__all__ = [
    "LOCK_FILENAME",
    "TRIALS_FILENAME",
    "AgentRef",
    "AttemptSummary",
    "CompactReport",
    "CorruptRecordError",
    "LoadReport",
    "SandboxRef",
    "StoreSnapshot",
    "TaskRef",
    "TrialError",
    "TrialRecord",
    "TrialStatus",
    "TrialStore",
    "Usage",
    "latest_by_id",
    "original",
    "parse_record",
    "record_line",
    "write_json_atomic",
]
