"""Built-in env ``user-sim``: a simulated user and the assistant converse, turn by turn.

The user is a model the harness calls through the gateway with its own token and budget
(its own trial id, ``<episode>-user``); its goal is the task's ``user/goal.md``
(``goal_file``), given to it privately in its system prompt: it never enters a sandbox. The
assistant is the run's agent, one agent phase per turn in one sandbox: its instruction is
the task's plus the conversation so far; its reply is the file ``$HARNESS_REPLY_FILE`` (new
each turn) if it writes one, else its last message. The conversation ends when the user
answers with the done marker or after ``max_turns``; it is recorded with its speakers in
``trials/<episode>/conversation.jsonl``, and the task's verifier then grades the assistant.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import Field
from typing_extensions import override

from harness.episodes.env import Agents, Env, EnvParams
from harness.episodes.records import Episode, Trace
from harness.episodes.trials import EpisodeTrial
from harness.errors import UsageError
from harness.gateway import TrialGateway
from harness.records import TrialError, TrialStatus, Usage
from harness.records.layout import (
    MODEL_CALLS_FILENAME,
    episode_agent_evidence_dir,
    trial_evidence_dir,
)
from harness.tasks import Task
from harness.tasks.limits import MAX_TASK_TEXT_BYTES, read_task_text
from harness.trial.lifecycle import usage_of

PERSONA = """You are a user talking to an AI assistant. Your goal, which you must not reveal
all at once: {goal}
Answer the assistant as this user would. When your goal is met, or you give up, answer with
exactly {done} and nothing else."""
CONVERSATION_FILE = "conversation.jsonl"


class UserSimParams(EnvParams):
    """The user's goal file, persona, the end marker and the turn limit."""

    goal_file: str = "user/goal.md"
    persona: str = PERSONA
    done_marker: str = "###DONE###"
    max_turns: int = Field(default=8, ge=1, le=256)
    greeting: str = "Hello! How can I help you today?"


class SimulatedUser:
    """The user: the run's model through the gateway, under its own trial id."""

    def __init__(self, gateway: TrialGateway, trial_id: str, task: str, evidence: Path) -> None:
        evidence.mkdir(parents=True, exist_ok=True)
        self.gateway = gateway
        self.trial_id = trial_id
        self.evidence = evidence
        self.access = gateway.open_trial(trial_id, f"{task}@user", evidence / MODEL_CALLS_FILENAME)
        self.errors: list[TrialError] = []

    def say(self, system: str, history: list[dict[str, str]]) -> str | None:
        """The user's next message (None when the model call failed: on its trace)."""
        body: dict[str, Any] = {
            "model": self.access.model.id,
            "messages": [{"role": "system", "content": system}, *history],
        }
        status, answer = self.gateway.call(self.trial_id, "/v1/chat/completions", body)
        if status != 200:
            self.errors.append(
                TrialError(type="ModelCallError", message=f"HTTP {status}: {answer}", phase="user")
            )
            return None
        try:
            return str(answer["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError) as exc:
            self.errors.append(TrialError(type="ModelCallError", message=str(exc), phase="user"))
            return None

    def close(self) -> Usage:
        """Revoke its access; its usage."""
        return usage_of(self.gateway.revoke(self.trial_id))


class UserSimEnv(Env):
    """A simulated user (with a private goal) and the assistant, turn by turn."""

    id = "user-sim"
    roles = {"assistant": None}
    Params = UserSimParams

    @property
    def _params(self) -> UserSimParams:
        assert isinstance(self.params, UserSimParams)
        return self.params

    @override
    def check(self, task: Task) -> None:
        # Beneath the task dir, no link followed, at most MAX_TASK_TEXT_BYTES (else TaskError).
        if read_task_text(task.path, self._params.goal_file, MAX_TASK_TEXT_BYTES) is None:
            raise UsageError(
                f"{task.name}: the user-sim env needs the user's goal at "
                f"{self._params.goal_file} in the task dir (or set env.goal_file)"
            )

    @override
    def run(self, task: Task, agents: Agents) -> None:
        context = agents.context
        gateway = context.settings.gateway
        if gateway is None:
            raise UsageError("the user-sim env needs a model for its user: pass --model")
        params = self._params
        goal = (read_task_text(task.path, params.goal_file, MAX_TASK_TEXT_BYTES) or "").strip()
        system = params.persona.format(goal=goal, done=params.done_marker)
        run_dir, episode = context.settings.run_dir, context.plan.id
        episode_dir = run_dir / trial_evidence_dir(episode)
        user_dir = run_dir / episode_agent_evidence_dir(episode, "user")
        user = SimulatedUser(gateway, f"{episode}-user", task.name, user_dir)
        started = datetime.now(UTC)
        conversation: list[dict[str, Any]] = []
        stop = ["max_turns"]

        def converse(trial: EpisodeTrial) -> None:
            stop[0] = _converse(trial, user, system, params, task, conversation)
            trial.info["stop_condition"] = stop[0]
            trial.metrics["user_turns"] = float(
                sum(1 for m in conversation if m["speaker"] == "user")
            )
            trial.final_phase = True
            trial.revoke_model_access()

        try:
            agents.assistant.run(task, drive=converse)
        finally:
            _write_conversation(episode_dir / CONVERSATION_FILE, conversation)
            usage = user.close()
            context.episode.add(
                Trace(
                    name="user",
                    role="user",
                    agent="simulated-user",
                    id=user.trial_id,
                    status=TrialStatus.AGENT_ERROR if user.errors else TrialStatus.COMPLETED,
                    ok=not user.errors,
                    usage=usage,
                    errors=user.errors,
                    evidence_dir=str(user.evidence.relative_to(context.settings.run_dir)),
                    info={"stop_condition": stop[0]},
                    started_at=started,
                    finished_at=datetime.now(UTC),
                )
            )

    @override
    def finalize(self, task: Task, episode: Episode) -> None:
        assistant = episode.by_role("assistant")
        if assistant:
            episode.reward, episode.rewards = assistant[0].reward, dict(assistant[0].rewards)
            episode.metrics["user_turns"] = assistant[0].metrics.get("user_turns", 0.0)


def _converse(
    trial: EpisodeTrial,
    user: SimulatedUser,
    system: str,
    params: UserSimParams,
    task: Task,
    conversation: list[dict[str, Any]],
) -> str:
    """Relay turns until the user ends it, a side fails, or ``max_turns``; the stop reason."""
    # The user's view: the assistant's words are what it hears ("user" is the other side).
    history = [{"role": "user", "content": params.greeting}]
    for turn in range(1, params.max_turns + 1):
        said = user.say(system, history)
        if said is None:
            return "error"
        if said.strip() == params.done_marker:
            return "user_closed"
        conversation.append({"turn": turn, "speaker": "user", "text": said, "at": time.time()})
        history.append({"role": "assistant", "content": said})
        reply = trial.agent_turn(_instruction(task, conversation), last=False)
        if reply is None:
            return "error"
        conversation.append(
            {"turn": turn, "speaker": "assistant", "text": reply, "at": time.time()}
        )
        history.append({"role": "user", "content": reply})
    return "max_turns"


def _instruction(task: Task, conversation: list[dict[str, Any]]) -> str:
    lines = [task.instruction.strip(), "", "The conversation with the user so far:"]
    for message in conversation:
        lines.append(f"[{message['speaker']}] {message['text']}")
    lines += [
        "",
        "Reply to the user's last message. Your final message is your reply (or write it to",
        "the file named by $HARNESS_REPLY_FILE).",
    ]
    return "\n".join(lines) + "\n"


def _write_conversation(path: Path, conversation: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(m) + "\n" for m in conversation))


__all__ = ["CONVERSATION_FILE", "UserSimEnv", "UserSimParams"]
