"""Moved to :mod:`sandbox.inside.supervisor` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/supervisor.py``; this module only keeps
the old import path.
"""

from sandbox.inside.supervisor import (
    MAX_SURVIVORS_LISTED,
    PROTOCOL_VERSION,
    main,
    op_archive,
    op_batch,
    op_chown_tree,
    op_put,
    op_read,
    op_reset_dir,
    op_scan_special,
    op_whois,
    run_phase,
)

__all__ = [
    "MAX_SURVIVORS_LISTED",
    "PROTOCOL_VERSION",
    "main",
    "op_archive",
    "op_batch",
    "op_chown_tree",
    "op_put",
    "op_read",
    "op_reset_dir",
    "op_scan_special",
    "op_whois",
    "run_phase",
]
