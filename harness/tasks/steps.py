"""The steps of a multi-step task (``[[steps]]`` with ``steps/<name>/``), Harbor's layout.

Each step has its own ``instruction.md`` and may have ``tests/`` (merged over the task's
shared ``tests/`` when graded; its ``test.sh`` wins over the shared one), ``solution/``
(the oracle's, for that step) and ``workdir/`` (uploaded into the working dir before the
step; its ``setup.sh`` then runs there, as the agent would).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.tasks.model import StepSection
from harness.tasks.paths import STEPS_DIR, dir_or_none, file_or_none

__all__ = ["STEPS_DIR", "Step"]


@dataclass(frozen=True)
class Step:
    """One step of a multi-step task.

    Attributes:
        index: 0-based position in ``[[steps]]``.
        path: Absolute ``steps/<name>/`` dir.
        instruction: The text of the step's ``instruction.md``.
        config: The step's ``[[steps]]`` entry.
    """

    index: int
    path: Path
    instruction: str = field(repr=False)
    config: StepSection = field(repr=False)

    @property
    def name(self) -> str:
        """The step's name (its dir name)."""
        return self.config.name

    @property
    def tests_dir(self) -> Path | None:
        """The step's own ``tests/`` dir, or None."""
        return dir_or_none(self.path / "tests")

    @property
    def test_script(self) -> Path | None:
        """The step's own ``tests/test.sh``, or None."""
        return file_or_none(self.path / "tests" / "test.sh")

    @property
    def solution_dir(self) -> Path | None:
        """The step's ``solution/`` dir, or None."""
        return dir_or_none(self.path / "solution")

    @property
    def solve_script(self) -> Path | None:
        """The step's ``solution/solve.sh``, or None."""
        return file_or_none(self.path / "solution" / "solve.sh")

    @property
    def workdir_dir(self) -> Path | None:
        """The step's ``workdir/`` dir (uploaded into the working dir), or None."""
        return dir_or_none(self.path / "workdir")

    @property
    def setup_script(self) -> Path | None:
        """The step's ``workdir/setup.sh`` (run before its agent), or None."""
        return file_or_none(self.path / "workdir" / "setup.sh")
