"""Which recorded failures halt a run as a fault of the machine's disks (DiskGuard)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from harness.errors import EXIT_DISK_FULL
from harness.records import AgentRef, SandboxRef, TaskRef, TrialError, TrialRecord, TrialStatus
from harness.runner.faults import DiskGuard, Halting


def _failed(error_type: str, message: str) -> TrialRecord:
    now = datetime.now(UTC)
    return TrialRecord(
        id="t1",
        task=TaskRef(name="hello", key="hello", hash="abc123", path="tasks/hello"),
        agent=AgentRef(name="oracle"),
        sandbox=SandboxRef(backend="docker"),
        status=TrialStatus.ENVIRONMENT_ERROR,
        ok=False,
        errors=[TrialError(type=error_type, message=message, phase="prepare")],
        started_at=now,
        finished_at=now,
    )


def test_an_image_build_that_found_the_engine_store_full_halts_the_run(tmp_path: Path) -> None:
    halting = Halting()
    record = _failed(
        "ImageBuildError",
        "building harness-task/x failed: write /var/lib/docker/overlay2/abc/diff/big: "
        "no space left on device",
    )
    assert DiskGuard(tmp_path, halting).check_record(record)
    assert halting.halt is not None and halting.halt.exit_code == EXIT_DISK_FULL
    message = halting.halt.message(3, 10, tmp_path)
    assert "image store or build cache" in message and "no space left on device" in message
    assert "docker builder prune" in message and f"--resume {tmp_path}" in message


def test_a_trial_filling_its_own_storage_does_not_halt_a_run_whose_dir_is_writable(
    tmp_path: Path,
) -> None:
    halting = Halting()
    record = _failed("StorageLimitReached", "[Errno 28] No space left on device: 'big'")
    assert not DiskGuard(tmp_path, halting).check_record(record)
    assert halting.halt is None and not halting


def test_a_build_error_without_a_disk_error_is_the_trial_s(tmp_path: Path) -> None:
    halting = Halting()
    record = _failed("ImageBuildError", "RUN make: exit code 2")
    assert not DiskGuard(tmp_path, halting).check_record(record)
    assert halting.halt is None
