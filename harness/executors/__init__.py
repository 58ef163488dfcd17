"""Trial executors: where a run's trials run (``--executor``; docs/scale-out.md).

- :mod:`.base` — the seam (:class:`TrialExecutor`);
- :mod:`.local` — ``local``: the harness process's thread pool (the default);
- :mod:`.ray` — ``ray``: one Ray task per trial attempt on a Ray cluster (needs
  ``pip install 'harness[ray]'``; imported only when chosen).
"""

from harness.executors.base import ExecutorOptions, TrialExecutor
from harness.executors.local import LocalExecutor

__all__ = ["ExecutorOptions", "LocalExecutor", "TrialExecutor"]
