"""Reading the verifier's reward: ``reward.json`` first, then ``reward.txt`` (docs/tasks.md)."""

from __future__ import annotations

import json
import math

from harness.errors import VerifierError
from sandbox.backend import Sandbox
from sandbox.inside.evidence import EvidenceEvent

MAX_REWARD_FILE_BYTES = 1 << 20


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def parse_reward_json(data: bytes) -> dict[str, float]:
    """Parse ``reward.json``: a flat JSON object of finite numbers.

    Raises:
        VerifierError: naming the file and what is wrong with it.
    """
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise VerifierError("reward.json is empty")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise VerifierError(f"reward.json is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict) or not parsed:
        raise VerifierError("reward.json must be a non-empty JSON object of numbers")
    rewards: dict[str, float] = {}
    for name, value in parsed.items():
        number = _number(value)
        if number is None:
            raise VerifierError(f"reward.json: {name!r} is not a finite number: {value!r}")
        rewards[str(name)] = number
    return rewards


def parse_reward_txt(data: bytes) -> float:
    """Parse ``reward.txt``: one finite number.

    Raises:
        VerifierError: naming the file and what is wrong with it.
    """
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise VerifierError("reward.txt is empty")
    try:
        number = float(text)
    except ValueError:
        raise VerifierError(f"reward.txt does not hold a number: {text[:80]!r}") from None
    if not math.isfinite(number):
        raise VerifierError(f"reward.txt does not hold a finite number: {text[:80]!r}")
    return number


def trial_reward(rewards: dict[str, float]) -> float:
    """The trial's reward: the value named ``reward``, else the mean of all values."""
    if "reward" in rewards:
        return rewards["reward"]
    return sum(rewards.values()) / len(rewards)


def read_rewards(sandbox: Sandbox) -> tuple[float, dict[str, float], list[EvidenceEvent]]:
    """Read the reward files from the sandbox's verifier dir.

    Returns:
        (reward, rewards, events) where events record refused files (symlinks, FIFOs).

    Raises:
        VerifierError: when neither file yields a reward, saying which and why.
    """
    events: list[EvidenceEvent] = []
    base = sandbox.paths.verifier
    for name in ("reward.json", "reward.txt"):
        data, event = sandbox.read_file(f"{base}/{name}", max_bytes=MAX_REWARD_FILE_BYTES)
        if event is not None:
            if event.kind == "missing":
                continue
            events.append(event)
            raise VerifierError(f"{name} is not a regular file ({event.kind}); refused to read it")
        assert data is not None
        if name == "reward.json":
            rewards = parse_reward_json(data)
        else:
            rewards = {"reward": parse_reward_txt(data)}
        return trial_reward(rewards), rewards, events
    raise VerifierError(
        "no reward file: the verifier wrote neither reward.json nor reward.txt "
        "into $HARNESS_VERIFIER_DIR"
    )


__all__ = [
    "MAX_REWARD_FILE_BYTES",
    "parse_reward_json",
    "parse_reward_txt",
    "read_rewards",
    "trial_reward",
]
