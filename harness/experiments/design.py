"""A paired experiment as declared (``experiment.toml``) and its plan.

::

    [experiment]
    name = "docs-lift"           # names the experiment dir (default: the file's name)
    runs_per_variant = 2         # repetitions; one cannot establish stability
    control = "without_docs"     # default: the first variant
    treatments = ["with_docs"]   # default: every other variant, each against the control
    models = []                  # optional: the whole design once per model

    [run]                        # the base run config (the keys of a run config file)
    tasks.paths = ["../tasks"]
    agent.name = "builtin"

    [variants.without_docs]      # a partial run config over [run]
    model = "faux/without-docs"

    [variants.with_docs]
    model = "faux/with-docs"
    overlay.workspace = "docs-overlay"        # files added to every task's workspace
    overlay.instruction_append = "Read docs/HINTS.md first."

A variant may change anything of a run config (agent, model, agent command, ``[agent]
kwargs``, task paths, judges...) but ``run_name``, ``output_dir`` and ``rollouts`` (the
experiment names its runs and repeats them ``runs_per_variant`` times, one rollout each).
An ``overlay`` (a prompt or docs overlay) is applied to a copy of the variant's task set in
the experiment dir; the tasks keep their keys, so the arms still pair.

The plan interleaves the variants: odd repetitions run the control first, even ones run the
treatments first (the declared order, reversed), against order effects.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.config import RunConfig, deep_merge, file_layer, resolve_config
from harness.errors import ConfigError
from harness.runner.plan import slug

__all__ = [
    "ExperimentDesign",
    "ExperimentSection",
    "Overlay",
    "PlannedRun",
    "load_design",
    "plan_runs",
]

#: Run keys the experiment decides for every arm.
_FIXED_KEYS = ("run_name", "output_dir", "rollouts")
_STRICT = ConfigDict(extra="forbid", frozen=True)


class Overlay(BaseModel):
    """A prompt or docs overlay applied to a copy of a variant's task set.

    Attributes:
        instruction_prepend: Text put before every task's instruction.
        instruction_append: Text put after it.
        workspace: A dir (relative to the experiment file) whose files are added to every
            task's initial workspace (e.g. docs the agent may read).
    """

    model_config = _STRICT

    instruction_prepend: str | None = None
    instruction_append: str | None = None
    workspace: str | None = None

    @property
    def empty(self) -> bool:
        """Whether it changes nothing."""
        return not (self.instruction_prepend or self.instruction_append or self.workspace)


class ExperimentSection(BaseModel):
    """The ``[experiment]`` table.

    Attributes:
        name: Names the experiment dir.
        runs_per_variant: Repetitions of every arm.
        control: The control variant (default: the first).
        treatments: Variants compared with the control (default: every other one).
        models: Run the whole design once per model (each arm's ``model``).
    """

    model_config = _STRICT

    name: str | None = None
    runs_per_variant: int = Field(default=1, ge=1, le=50)
    control: str | None = None
    treatments: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)


class _File(BaseModel):
    model_config = _STRICT

    experiment: ExperimentSection = Field(default_factory=ExperimentSection)
    run: dict[str, Any] = Field(default_factory=dict)
    variants: dict[str, dict[str, Any]]

    @model_validator(mode="after")
    def _two_variants(self) -> _File:
        if len(self.variants) < 2:
            raise ValueError("an experiment declares at least two [variants.NAME]")
        return self


@dataclass(frozen=True)
class ExperimentDesign:
    """An experiment resolved: every arm's run config, checked as a config.

    Attributes:
        name: The experiment's name.
        source: The experiment file.
        control: The control variant.
        treatments: The variants compared with it, in declared order.
        variants: Variant → its run config (over ``[run]``), without the model axis.
        overlays: Variant → its overlay (empty ones left out).
        models: The model axis (empty: each arm's own model).
        runs_per_variant: Repetitions.
    """

    name: str
    source: Path
    control: str
    treatments: list[str]
    variants: dict[str, RunConfig]
    overlays: dict[str, Overlay]
    models: list[str]
    runs_per_variant: int

    @property
    def model_axis(self) -> list[str | None]:
        """The models arms run with (``[None]``: each variant's own)."""
        return [*self.models] or [None]

    @property
    def order(self) -> list[str]:
        """Control first, then the treatments."""
        return [self.control, *self.treatments]


@dataclass(frozen=True)
class PlannedRun:
    """One arm of one repetition.

    Attributes:
        repetition: 1-based.
        model: The model axis value (None: the variant's own).
        variant: The variant.
        position: Its place in the repetition's order (0 runs first).
        run_name: The run dir's name.
    """

    repetition: int
    model: str | None
    variant: str
    position: int
    run_name: str


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in item['loc']) or 'file'}: {item['msg']}"
        for item in exc.errors(include_url=False)
    )


def _read(path: Path) -> _File:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        return _File.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_problems(exc)}") from None


def _variant_layer(
    name: str, table: Mapping[str, Any], base: Path
) -> tuple[dict[str, Any], Overlay]:
    table = dict(table)
    try:
        overlay = Overlay.model_validate(table.pop("overlay", {}))
    except ValidationError as exc:
        raise ConfigError(f"variants.{name}.overlay: {_problems(exc)}") from None
    fixed = [key for key in _FIXED_KEYS if key in table]
    if fixed:
        raise ConfigError(
            f"variants.{name}: {', '.join(fixed)} is decided by the experiment "
            "(runs_per_variant repeats each arm; the experiment names and places its runs)"
        )
    return file_layer(table, base), overlay


def _choose(section: ExperimentSection, names: Sequence[str]) -> tuple[str, list[str]]:
    control = section.control or names[0]
    treatments = section.treatments or [n for n in names if n != control]
    unknown = [n for n in [control, *treatments] if n not in names]
    if unknown:
        raise ConfigError(
            f"[experiment]: no variant named {', '.join(unknown)} (declared: {', '.join(names)})"
        )
    if control in treatments or len(set(treatments)) != len(treatments) or not treatments:
        raise ConfigError(
            "[experiment]: the treatments must be other variants than the control, each once"
        )
    return control, treatments


def load_design(
    path: Path,
    *,
    sets: Sequence[str] = (),
    runs_per_variant: int | None = None,
) -> ExperimentDesign:
    """Read an experiment file and resolve every arm's config (nothing is written).

    Args:
        path: The experiment file.
        sets: ``--set KEY=VALUE`` items applied to every arm, last.
        runs_per_variant: Overrides ``[experiment] runs_per_variant``.

    Raises:
        ConfigError: A bad file, variant, overlay or resolved config.
    """
    path = Path(path)
    spec = _read(path)
    here = path.resolve().parent
    section = spec.experiment
    if runs_per_variant is not None:
        try:
            section = ExperimentSection.model_validate(
                {**section.model_dump(), "runs_per_variant": runs_per_variant}
            )
        except ValidationError as exc:
            raise ConfigError(f"--runs-per-variant: {_problems(exc)}") from None
    control, treatments = _choose(section, list(spec.variants))
    base = file_layer(spec.run, here)
    if any(key in base for key in ("run_name", "output_dir")) or base.get("rollouts", 1) != 1:
        raise ConfigError(
            f"{path}: [run] may not set run_name, output_dir or rollouts other than 1"
        )
    variants: dict[str, RunConfig] = {}
    overlays: dict[str, Overlay] = {}
    for name in [control, *treatments]:
        layer, overlay = _variant_layer(name, spec.variants[name], here)
        if section.models and "model" in layer:
            raise ConfigError(f"variants.{name}: sets model, but [experiment] models decides it")
        try:
            variants[name] = resolve_config(base=deep_merge(base, layer), sets=sets)
        except ConfigError as exc:
            raise ConfigError(f"variants.{name}: {exc}") from None
        if not overlay.empty:
            overlays[name] = overlay
    return ExperimentDesign(
        name=section.name or path.stem,
        source=path.resolve(),
        control=control,
        treatments=treatments,
        variants=variants,
        overlays=overlays,
        models=list(section.models),
        runs_per_variant=section.runs_per_variant,
    )


def plan_runs(design: ExperimentDesign) -> list[PlannedRun]:
    """Every arm of every repetition, in the order they run.

    Odd repetitions run the control first, even ones the treatments first (the declared
    order reversed), so neither side always goes first.
    """
    planned = []
    for repetition in range(1, design.runs_per_variant + 1):
        order = design.order if repetition % 2 else list(reversed(design.order))
        for model in design.model_axis:
            for position, variant in enumerate(order):
                parts = [f"rep-{repetition:03d}"]
                if model is not None:
                    parts.append(slug(model))
                parts.append(slug(variant))
                planned.append(PlannedRun(repetition, model, variant, position, "--".join(parts)))
    return planned
