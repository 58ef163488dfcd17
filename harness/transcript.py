"""The trial transcript: ``transcript.jsonl`` derived from the trial's evidence.

This module moved to :mod:`harness.records.transcript`; this path re-exports its public names.
"""

from harness.records.transcript import (
    MODEL_CALLS_FILENAME,
    SESSION_FILENAME,
    TRANSCRIPT_FILENAME,
    JsonlRead,
    ModelCallUsage,
    content_text,
    derive_transcript,
    parse_timestamp,
    read_jsonl,
    usage_from_model_calls,
    write_transcript,
)

__all__ = [
    "MODEL_CALLS_FILENAME",
    "SESSION_FILENAME",
    "TRANSCRIPT_FILENAME",
    "JsonlRead",
    "ModelCallUsage",
    "content_text",
    "derive_transcript",
    "parse_timestamp",
    "read_jsonl",
    "usage_from_model_calls",
    "write_transcript",
]
