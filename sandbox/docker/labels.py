"""Labels and names on everything the docker backend creates, so leaks can always be found.

Labels are set in the request that creates an object. A crash of the engine can still lose
them (a volume created while the engine shut down comes back without its labels), so every
object of a run is also *named* for it: ``harness-<10 hex of the run name>-...``
(:func:`run_prefix`), and a sweep removes unlabelled objects by that name too.
"""

from __future__ import annotations

import hashlib
import re

#: Every container, volume and network the backend creates carries this label.
MANAGED = "org.harness.managed"
TRIAL = "org.harness.trial"
#: The task of a trial's container (not on a warm one: it is made before its task is known).
TASK = "org.harness.task"
RUN = "org.harness.run"
KIND = "org.harness.kind"
#: Content hash of a task image's build context (images are reused, never deleted per trial).
IMAGE_HASH = "org.harness.image-hash"
#: The long-lived volume holding the supervisor's Python runtime.
RUNTIME_KIND = "runtime"

#: The name of an object of some run (see :func:`run_prefix`).
RUN_OBJECT_NAME = re.compile(r"^harness-[0-9a-f]{10}-")


def run_prefix(run: str) -> str:
    """How the name of every container, volume and network of the run ``run`` starts."""
    return f"harness-{hashlib.sha256(run.encode()).hexdigest()[:10]}-"
