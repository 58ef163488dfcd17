"""``experiment_report.json``'s model: what an experiment found, arm by arm.

It sits apart from the orchestrator (:mod:`harness.experiments.experiment`) so that the
text rendering (:mod:`harness.experiments.text`) and the comparisons read it without
importing the code that runs the arms.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.experiments.pairing import Comparison

__all__ = ["ExperimentReport"]


class ExperimentReport(BaseModel):
    """``experiment_report.json``.

    Attributes:
        schema_version: 1.
        name: The experiment.
        protocol_digest: sha256 of the plan (``experiment_plan.json`` without its digest).
        control: The control variant.
        treatments: The treatments.
        runs_per_variant: Repetitions.
        models: The model axis (``["-"]`` without one).
        threshold: Reward at or above which an arm passed.
        comparisons: One per treatment.
        operational_totals: Per variant: runs and each measured figure's total.
        runs: Every planned arm: where it is, whether it ran.
        notes: ``One repetition cannot establish stability.``, interrupted arms...
        published: Whether every comparison's headline is published.
    """

    model_config = ConfigDict(extra="allow")

    schema_version: int = 1
    name: str
    protocol_digest: str
    control: str
    treatments: list[str]
    runs_per_variant: int
    models: list[str]
    threshold: float
    comparisons: list[Comparison]
    operational_totals: list[dict[str, Any]] = Field(default_factory=list)
    runs: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    published: bool = False
