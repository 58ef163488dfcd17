"""Reading the verifier's reward: moved to :mod:`harness.trial.grading` (this path stays)."""

from harness.trial.grading import (
    MAX_REWARD_FILE_BYTES,
    parse_reward_json,
    parse_reward_txt,
    read_rewards,
    trial_reward,
)

__all__ = [
    "MAX_REWARD_FILE_BYTES",
    "parse_reward_json",
    "parse_reward_txt",
    "read_rewards",
    "trial_reward",
]
