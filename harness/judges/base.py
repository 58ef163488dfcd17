"""The judge seam: a judge type scores one trial's evidence.

A judge type is a :class:`Judge` subclass with an ``Options`` model (its own keys of the
judge table). :meth:`Judge.score` gets a :class:`JudgeInput` (the trial's evidence, task and
id, and — for judges that call a model — :class:`ModelAccess`) and returns a
:class:`Verdict`: a score in [0, 1] and what it is based on. A low score is data; a judge
that cannot score (its model answered garbage, the evidence it needs does not exist) raises
:class:`~harness.errors.JudgeError`, which makes the trial a ``verifier_error``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.config.judges import JudgeSpec
from harness.errors import ConfigError, JudgeError
from harness.judges.evidence import TrialEvidence
from harness.tasks import Task

__all__ = [
    "Judge",
    "JudgeError",
    "JudgeInput",
    "JudgeOptions",
    "ModelAccess",
    "ModelReply",
    "ModelRequest",
    "Verdict",
]


class JudgeOptions(BaseModel):
    """Base of a judge type's options: frozen, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Verdict:
    """What a judge decided.

    Attributes:
        score: In [0, 1].
        detail: What the score rests on (shown in the record's ``judges``).
    """

    score: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelReply:
    """A judge's model call, as the gateway answered it.

    Attributes:
        status: The HTTP status.
        body: The parsed JSON answer.
        usage: Token and call totals of the judge's gateway access (``TrialUsage``).
    """

    status: int
    body: Any
    usage: Any = None


class ModelAccess(Protocol):
    """How a judge calls its model: through the model gateway, with the judge's own budget."""

    def api(self, model: str) -> str:
        """The API the model speaks (``openai-chat``, ``openai-responses``, ...)."""

    def upstream(self, model: str) -> str:
        """The model's name in requests."""

    def call(self, request: ModelRequest) -> ModelReply:
        """One non-streamed call; every request is recorded to ``request.record``."""


@dataclass(frozen=True)
class ModelRequest:
    """One judge's model call.

    Attributes:
        model: ``provider/name``.
        budget: ``max_calls``, ``max_tokens``, ``max_cost_usd`` (None: unbounded).
        path: The gateway path (``/v1/chat/completions``, ...).
        body: The request body.
        record: Where the gateway records the call (``model_calls.jsonl`` format).
        trial_id: The trial judged.
        task_name: Its task (a faux script answers per task name).
    """

    model: str
    budget: Mapping[str, Any]
    path: str
    body: dict[str, Any]
    record: Path
    trial_id: str
    task_name: str


@dataclass(frozen=True)
class JudgeInput:
    """What a judge gets for one trial.

    Attributes:
        evidence: The trial's evidence dir, read as data.
        task: The task.
        trial_id: The trial's id.
        models: Model access (None when the run has no judge that calls a model).
    """

    evidence: TrialEvidence
    task: Task
    trial_id: str
    models: ModelAccess | None = None


class Judge(ABC):
    """A judge type. Subclasses set ``type_name``, ``Options`` and implement :meth:`score`.

    Args:
        spec: The judge table.
        options: Its options, validated by ``Options``.
    """

    type_name: ClassVar[str] = "judge"
    Options: ClassVar[type[JudgeOptions]] = JudgeOptions

    def __init__(self, spec: JudgeSpec, options: JudgeOptions) -> None:
        self.spec = spec
        self.options = options

    @property
    def name(self) -> str:
        """The key of its score in ``rewards``."""
        return self.spec.key

    @classmethod
    def from_spec(cls, spec: JudgeSpec, where: str) -> Judge:
        """Build the judge, checking its options.

        Raises:
            ConfigError: Naming ``where`` and each bad option.
        """
        try:
            options = cls.Options.model_validate(spec.options)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or 'options'}: {item['msg']}"
                for item in exc.errors(include_url=False)
            )
            raise ConfigError(f"{where}: {cls.type_name} judge {spec.key!r}: {problems}") from None
        return cls(spec, options)

    def models(self) -> list[str]:
        """The models this judge calls (checked before any trial)."""
        return []

    def fail(self, reason: str) -> JudgeError:
        """A :class:`JudgeError` naming this judge."""
        return JudgeError(f"{self.type_name} judge {self.name!r}: {reason}")

    @abstractmethod
    def score(self, trial: JudgeInput) -> Verdict:
        """Score the trial.

        Raises:
            JudgeError: The judge cannot score it (never for a low score).
        """
