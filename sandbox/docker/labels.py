"""Labels on everything the docker backend creates, so leaks can always be found."""

from __future__ import annotations

#: Every container, volume and network the backend creates carries this label.
MANAGED = "org.harness.managed"
TRIAL = "org.harness.trial"
RUN = "org.harness.run"
KIND = "org.harness.kind"
#: Content hash of a task image's build context (images are reused, never deleted per trial).
IMAGE_HASH = "org.harness.image-hash"
#: The long-lived volume holding the supervisor's Python runtime.
RUNTIME_KIND = "runtime"
