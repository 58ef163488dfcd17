"""Exporting a run: one trajectory file per trial, in Harbor's layout or an output dir.

``<run>/trials/<trial-id>/agent/trajectory.json`` per trial (the Harbor layout), or
``<out>/<trial-id>/trajectory.json`` when an output dir is given. Every path is checked
before anything is written; a trial id or evidence dir that would escape is refused.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from harness.errors import CorruptRecordError, ExportError, UnknownFormatError
from harness.export.atif import trajectory_for_trial
from harness.records import TrialRecord, TrialStore, latest_by_id, write_json_atomic
from harness.records.layout import TRAJECTORY_DIRNAME, TRAJECTORY_FILENAME, trial_evidence_dir
from sandbox.beneath import is_dir_beneath

SUPPORTED_FORMATS: tuple[str, ...] = ("atif",)
"""Export formats :func:`export_run` knows."""


def _safe_id(trial_id: str) -> bool:
    """Whether a trial id is a single, harmless path component."""
    return (
        bool(trial_id) and trial_id not in (".", "..") and not any(ch in trial_id for ch in "/\\\0")
    )


def _evidence_dir(run_dir: Path, record: TrialRecord) -> Path:
    """The trial's evidence dir, refusing one outside the run dir."""
    if not _safe_id(record.id):
        raise ExportError(f"trial id {record.id!r} is not a valid directory name")
    relative = record.evidence_dir or trial_evidence_dir(record.id)
    evidence = run_dir / relative
    try:
        evidence.resolve().relative_to(run_dir.resolve())
    except ValueError:
        raise ExportError(
            f"trial {record.id}: evidence dir {relative!r} is outside the run dir"
        ) from None
    if (evidence.exists() or evidence.is_symlink()) and not is_dir_beneath(run_dir, relative):
        raise ExportError(
            f"trial {record.id}: evidence dir {relative!r} is reached through a symlink (a run "
            "dir never holds one; its evidence is not read)"
        )
    return evidence


def trajectory_path(run_dir: Path, record: TrialRecord, out_dir: Path | None = None) -> Path:
    """Where :func:`export_run` writes a trial's trajectory.

    Args:
        run_dir: The run directory.
        record: The trial's record.
        out_dir: The output dir, if any.

    Returns:
        ``<out_dir>/<trial-id>/trajectory.json``, or by default
        ``<evidence dir>/agent/trajectory.json`` (``<run>/trials/<trial-id>/agent/...``).

    Raises:
        ExportError: If the trial id or evidence dir is not safe to write under.
    """
    if out_dir is not None:
        if not _safe_id(record.id):
            raise ExportError(f"trial id {record.id!r} is not a valid directory name")
        return Path(out_dir) / record.id / TRAJECTORY_FILENAME
    return _evidence_dir(Path(run_dir), record) / TRAJECTORY_DIRNAME / TRAJECTORY_FILENAME


def export_run(run_dir: Path, fmt: str = "atif", out_dir: Path | None = None) -> list[Path]:
    """Export every trial of a run (its latest record per trial id).

    Args:
        run_dir: The run directory (holding ``trials.jsonl``).
        fmt: The export format; only ``atif`` is supported.
        out_dir: Write ``<out_dir>/<trial-id>/trajectory.json`` instead of the default
            ``<run_dir>/trials/<trial-id>/agent/trajectory.json``.

    Returns:
        The files written, in order of each trial id's first record.

    Raises:
        UnknownFormatError: If ``fmt`` is not supported.
        ExportError: If ``run_dir`` is not a run dir, ``trials.jsonl`` is missing or
            corrupt, or a record names an unsafe path.
        OSError: If a trajectory cannot be written.
    """
    if fmt not in SUPPORTED_FORMATS:
        raise UnknownFormatError(fmt, SUPPORTED_FORMATS)
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ExportError(f"{run_dir} is not a run directory")
    store = TrialStore(run_dir)
    if not store.path.is_file():
        raise ExportError(f"{run_dir} is not a run directory: it has no {store.path.name}")
    try:
        records = latest_by_id(store.load()).values()
    except CorruptRecordError as exc:
        raise ExportError(str(exc)) from None
    except (OSError, ValidationError) as exc:
        raise ExportError(f"cannot read {store.path}: {exc}") from None

    # Check every path before writing anything.
    plan = []
    for record in records:
        target = trajectory_path(run_dir, record, out_dir)
        if target.parent.is_symlink():
            raise ExportError(f"trial {record.id}: {target.parent} is a symlink")
        plan.append((record, _evidence_dir(run_dir, record), target))

    written: list[Path] = []
    for record, evidence, target in plan:
        data = trajectory_for_trial(record, evidence, session_id=run_dir.resolve().name)
        write_json_atomic(target, data)
        written.append(target)
    return written


__all__ = ["SUPPORTED_FORMATS", "TRAJECTORY_FILENAME", "export_run", "trajectory_path"]
