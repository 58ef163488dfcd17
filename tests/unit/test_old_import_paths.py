"""Every module that moved in issue 23 keeps its old import path, with every public name.

The names are those the old module defined at top level or listed in ``__all__`` before the
moves (commit 0c0497e, the merge base of the issue's branches), read from its source then.
A re-export that drops one, or an old path removed, breaks code that imported it.
``harness.transcript.logger`` is left out on purpose: the module logs under
``harness.records.transcript`` now, and a logger of the old name would log nothing.
"""

from __future__ import annotations

import importlib

import pytest

#: Old module -> the public names it had, space-separated.
OLD_PATHS: dict[str, str] = {
    "harness.engine": (
        "CleanupReport DEFAULT_IMAGE DoctorReport ImageResult ImageRow TEMP_PATTERNS "
        "build_images cleanup doctor engine list_images prune_images"
    ),
    "harness.episodes.prepare": (
        "SINGLE check_tasks is_single model_agent prepare_env refuse_executor role_configs"
    ),
    "harness.grading": (
        "MAX_REWARD_FILE_BYTES parse_reward_json parse_reward_txt read_rewards trial_reward"
    ),
    "harness.metrics": (
        "DurationSummary Summary TaskSummary USAGE_FIELDS UsageTotal bootstrap_ci bootstrap_cis "
        "pass_at_k pass_hat_k summarize trial_duration"
    ),
    "harness.model_access": "gateway_limits resolve_model start_gateway",
    "harness.plugins": (
        "AGENTS AGENTS_GROUP ENVS ENVS_GROUP EXECUTORS EXECUTORS_GROUP PYTHON_PREFIX Plugin "
        "PluginInfo Registry SANDBOXES SANDBOXES_GROUP T build_agent env_class open_backend "
        "open_executor subclass_of"
    ),
    "harness.status": "RunState RunStateName RunningTrial STATUS_FILENAME StatusWriter read_status",
    "harness.transcript": (
        "JsonlRead MODEL_CALLS_FILENAME ModelCallUsage SESSION_FILENAME TRANSCRIPT_FILENAME "
        "content_text derive_transcript parse_timestamp read_jsonl usage_from_model_calls "
        "write_transcript"
    ),
    "sandbox.agent_exec": "AgentExecServer DEFAULT_MAX_OUTPUT MAX_REQUEST_BYTES",
    "sandbox.agent_loop": (
        "ALL_TOOLS ANTHROPIC_VERSION APIS AnthropicMessages BINARY_SNIFF_BYTES ConfigError "
        "DEFAULTS EXIT_INTERNAL EXIT_OK EXIT_STRICT GREP_LINE_CHARS GREP_MAX_FILE_BYTES "
        "GREP_MAX_MATCHES KNOWN_KEYS LIST_MAX_ENTRIES MSG_MAX_TURNS MSG_MODEL_CALL "
        "MSG_NO_MESSAGE MSG_NO_TEXT MSG_STOP_REASON ModelClient OpenAIChat Reply Run "
        "SESSION_FILE SHELL_DRAIN_SEC SKIP_DIRS STOP_REASONS SessionLog Settings StrictFailure "
        "TOKEN_VARS TOOLS ToolCall ToolContext ToolError ToolFunc ToolSpec cap_text "
        "check_arguments default_system_prompt main parse_settings post_json run_tool "
        "take_credentials"
    ),
    "sandbox.confine": (
        "FILTER_ERROR FILTER_PROGRAM LIBC PR_CAPBSET_DROP PR_CAP_AMBIENT PR_CAP_AMBIENT_IS_SET "
        "PR_GET_NO_NEW_PRIVS PR_SET_CHILD_SUBREAPER PR_SET_DUMPABLE PR_SET_NO_NEW_PRIVS "
        "PR_SET_PDEATHSIG PostureError check check_unreadable confine drop_bounding_set "
        "drop_privileges erase_environ install_filter last_cap observe prctl read_status "
        "set_rlimits verify_dropped verify_seccomp"
    ),
    "sandbox.evidence": (
        "BLOCK DEFAULT_LIMITS EvidenceEvent FD_WINDOW Limits SPECIAL_KINDS copy_file copy_path "
        "copy_tree read_fd read_file walk_tree"
    ),
    "sandbox.forwarder": "Forwarder select_fds start_forwarder",
    "sandbox.launch": (
        "Capture DRAIN_GRACE_SEC ENTRY_MODULES Launch PROTECTED READ_CHUNK START_TIMEOUT_SEC "
        "close_all_but drain join_cgroups load_entry run_until"
    ),
    "sandbox.processes": (
        "Reaper cmdline descendants describe kill_all live_entries pid_ns proc_entries "
        "stat_entry uid_processes"
    ),
    "sandbox.rootview": (
        "CLONE_NEWIPC CLONE_NEWNET CLONE_NEWNS CLONE_NEWPID CLONE_NEWUTS DEVICES IFF_UP "
        "MNT_DETACH MS_BIND MS_NODEV MS_NOEXEC MS_NOSUID MS_PRIVATE MS_RDONLY MS_REC MS_REMOUNT "
        "SIOCGIFFLAGS SIOCSIFFLAGS SYSTEM_PATHS bring_up_loopback enter make_mounts_private "
        "mount unshare"
    ),
    "sandbox.run_as_agent": "EXIT_CANNOT_RUN EXIT_TIMEOUT SOCKET_ENV call exit_status main",
    "sandbox.services": "start_service",
    "sandbox.supervisor": (
        "MAX_SURVIVORS_LISTED PROTOCOL_VERSION main op_archive op_batch op_chown_tree op_put "
        "op_read op_reset_dir op_scan_special op_whois run_phase"
    ),
    "sandbox.syscall_filter": (
        "CLONE_NEWUSER DENIED FilterUnavailable PR_SET_SECCOMP PTRACE_ATTACH PTRACE_SEIZE "
        "RET_ALLOW RET_ERRNO RET_KILL_PROCESS SECCOMP_MODE_FILTER X32_SYSCALL_BIT build install"
    ),
}


def test_the_list_is_not_empty() -> None:
    assert sum(len(names.split()) for names in OLD_PATHS.values()) > 200


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_path_still_exports_every_public_name(old: str) -> None:
    module = importlib.import_module(old)
    missing = [name for name in OLD_PATHS[old].split() if not hasattr(module, name)]
    assert not missing, (
        f"{old} no longer has {', '.join(missing)}: re-export them from where they moved "
        "(the module's public names must keep working, docs/architecture.md)"
    )
