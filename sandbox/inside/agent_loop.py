"""The built-in tool-using agent: a small model <-> tools loop, stdlib only (Python >= 3.9).

The supervisor imports this module before it drops privileges and calls ``main(config)`` in
the dropped agent child, whose cwd is the workspace, whose stdout/stderr are the phase log
files and whose ``os.environ`` is the phase env (docs/model-access.md §1). Standalone:
``python3 agent_loop.py config.json``.

What one run does:
    * reads the per-trial token and the gateway URL from the environment, then removes every
      variable holding the token, so no tool subprocess can inherit it;
    * sends the instruction to the model (``openai-chat`` or ``anthropic-messages``, plain
      JSON over urllib), runs the tools it asks for, and repeats until it answers with text;
    * writes ``$HARNESS_SESSION_DIR/session.jsonl`` (doc §3) one flushed line at a time;
    * enforces the strict completion rules of doc §3.

Exit codes: 0 success, 3 strict-completion failure (the message is the ``end`` line's error
and the last stderr line), 4 configuration or internal error.
"""

from __future__ import annotations

# Everything is imported up front: after the privilege drop the agent user may not be able
# to read the Python installation's files any more than ours.
import encodings.idna  # noqa: F401 - looked up lazily by the socket layer for host names
import fnmatch
import json
import os
import re
import selectors
import signal
import stat
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

EXIT_OK = 0
EXIT_STRICT = 3
EXIT_INTERNAL = 4

APIS = ("openai-chat", "anthropic-messages")
ALL_TOOLS = ("read", "write", "edit", "ls", "grep", "find", "shell")
SESSION_FILE = "session.jsonl"
ANTHROPIC_VERSION = "2023-06-01"

DEFAULTS: Dict[str, Any] = {
    "max_turns": 30,
    "tool_timeout_sec": 120.0,
    "tool_output_bytes": 30000,
    "request_timeout_sec": 600.0,
    "max_tokens": 4096,
}
KNOWN_KEYS = (
    "api",
    "model",
    "model_label",
    "max_turns",
    "tools",
    "tool_timeout_sec",
    "tool_output_bytes",
    "request_timeout_sec",
    "max_tokens",
    "system_prompt",
)

# doc §3: stop reasons normalized across both APIs; anything else is kept raw.
STOP_REASONS = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_calls": "tool_use",
    "tool_use": "tool_use",
    "length": "length",
    "max_tokens": "length",
}

# The strict completion messages of doc §3, word for word.
MSG_NO_MESSAGE = "Agent run completed without an assistant message."
MSG_NO_TEXT = "Agent run produced no assistant text."
MSG_STOP_REASON = "Agent run ended with unexpected stop reason: {reason}."
MSG_MAX_TURNS = "Agent run reached max_turns ({n}) without finishing."
MSG_MODEL_CALL = "Model call failed: {detail}."

TOKEN_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")

GREP_MAX_MATCHES = 200
GREP_MAX_FILE_BYTES = 20 << 20
GREP_LINE_CHARS = 300
LIST_MAX_ENTRIES = 1000
SKIP_DIRS = (".git", ".hg", ".svn")
BINARY_SNIFF_BYTES = 8192
# After the shell exits, keep reading what its background children still write for at most
# this long: they may hold the pipe open forever, and must not hang the tool.
SHELL_DRAIN_SEC = 0.5


class ConfigError(Exception):
    """The config or the environment is unusable (exit 4)."""


class StrictFailure(Exception):
    """The run broke a strict completion rule; ``str(exc)`` is the exact message (exit 3)."""


class ToolError(Exception):
    """A tool failed in a way the model should read about (an ``is_error`` tool result)."""


# --- configuration ------------------------------------------------------------------------


@dataclass
class Settings:
    """A validated agent config (see ``main`` for the keys)."""

    api: str
    model: str
    model_label: str
    max_turns: int
    tools: List[str]
    tool_timeout_sec: float
    tool_output_bytes: int
    request_timeout_sec: float
    max_tokens: int
    system_prompt: Optional[str]


def _int_setting(config: Dict[str, Any], key: str) -> int:
    value = config.get(key)
    if value is None:
        return int(DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("%s must be a positive integer, got %r" % (key, value))
    return value


def _number_setting(config: Dict[str, Any], key: str) -> float:
    value = config.get(key)
    if value is None:
        return float(DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError("%s must be a positive number, got %r" % (key, value))
    return float(value)


def parse_settings(config: Any, env: Dict[str, str]) -> Settings:
    """Validate a config dict, filling defaults (and api/model from the phase env).

    Args:
        config: The config as given to ``main``.
        env: The environment; ``HARNESS_MODEL_API``, ``HARNESS_MODEL_NAME`` and
            ``HARNESS_MODEL`` stand in for a missing ``api``, ``model`` and ``model_label``.

    Returns:
        The settings.

    Raises:
        ConfigError: A value is missing or invalid.
    """
    if not isinstance(config, dict):
        raise ConfigError("the config must be a JSON object")
    api = config.get("api") or env.get("HARNESS_MODEL_API")
    if api not in APIS:
        raise ConfigError("api must be one of %s, got %r" % (", ".join(APIS), api))
    model = config.get("model") or env.get("HARNESS_MODEL_NAME")
    if not isinstance(model, str) or not model:
        raise ConfigError("model must be a non-empty string, got %r" % (model,))
    label = config.get("model_label") or env.get("HARNESS_MODEL") or model
    if not isinstance(label, str):
        raise ConfigError("model_label must be a string, got %r" % (label,))
    tools = config.get("tools")
    if tools is None:
        tools = list(ALL_TOOLS)
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise ConfigError("tools must be a list of tool names, got %r" % (tools,))
    unknown = [t for t in tools if t not in ALL_TOOLS]
    if unknown:
        raise ConfigError(
            "unknown tools %s (available: %s)" % (", ".join(unknown), ", ".join(ALL_TOOLS))
        )
    if len(set(tools)) != len(tools):
        raise ConfigError("tools lists a tool twice: %r" % (tools,))
    prompt = config.get("system_prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise ConfigError("system_prompt must be a string, got %r" % (type(prompt).__name__,))
    return Settings(
        api=str(api),
        model=model,
        model_label=label,
        max_turns=_int_setting(config, "max_turns"),
        tools=list(tools),
        tool_timeout_sec=_number_setting(config, "tool_timeout_sec"),
        tool_output_bytes=_int_setting(config, "tool_output_bytes"),
        request_timeout_sec=_number_setting(config, "request_timeout_sec"),
        max_tokens=_int_setting(config, "max_tokens"),
        system_prompt=prompt,
    )


def take_credentials(api: Any) -> Tuple[str, str]:
    """Read the token and base URL for ``api``, then scrub the token from ``os.environ``.

    Both key variables, and any other variable whose value holds the token, are removed,
    whichever API is used: tool subprocesses must never inherit it.

    Args:
        api: ``anthropic-messages`` reads the ``ANTHROPIC_*`` variables, anything else
            the ``OPENAI_*`` ones.

    Returns:
        ``(token, base_url)``; empty strings when unset.
    """
    prefix = "ANTHROPIC" if api == "anthropic-messages" else "OPENAI"
    token = os.environ.get(prefix + "_API_KEY", "")
    base_url = os.environ.get(prefix + "_BASE_URL", "")
    secrets = {os.environ.get(name, "") for name in TOKEN_VARS} - {""}
    for name in list(os.environ):
        value = os.environ.get(name, "")
        if name in TOKEN_VARS or any(len(s) >= 8 and s in value for s in secrets):
            del os.environ[name]
    return token, base_url


# --- session.jsonl ------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dumps(record: Dict[str, Any]) -> bytes:
    try:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from the model: escape everything instead
        return (json.dumps(record) + "\n").encode("ascii")


class SessionLog:
    """``session.jsonl``: one JSON object per line, each written with one unbuffered write."""

    def __init__(self, path: str) -> None:
        """Create (truncate) the file; a planted symlink or FIFO is refused, never followed.

        Raises:
            OSError: The file cannot be created, or is not a regular file.
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
        self.fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise OSError("%s is not a regular file" % path)

    def write(self, record: Dict[str, Any]) -> None:
        """Append one record, stamped with ``timestamp``."""
        record["timestamp"] = _now()
        data = memoryview(_dumps(record))
        while data:
            data = data[os.write(self.fd, data) :]

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# --- tools --------------------------------------------------------------------------------


@dataclass
class ToolContext:
    """What every tool needs: where relative paths start, and its limits."""

    workspace: str
    timeout_sec: float
    output_bytes: int

    def resolve(self, path: str) -> str:
        """Resolve a tool path: ``~`` expanded, relative paths against the workspace.

        ``~`` and ``~/...`` become ``$HOME``; ``~user`` is left as it is (no user lookup:
        nothing in the sandbox goes through NSS).
        """
        home = os.environ.get("HOME")
        if home and (path == "~" or path.startswith("~/")):
            path = os.path.join(home, path[2:])
        return os.path.join(self.workspace, path)


def cap_text(text: str, cap: int, total: Optional[int] = None) -> str:
    """Cut ``text`` to about ``cap`` UTF-8 bytes, saying how much was cut.

    Args:
        text: The output (possibly already a prefix of a longer one).
        cap: The byte budget, note included when it fits.
        total: The full output's size in bytes when ``text`` is only its prefix.

    Returns:
        ``text`` unchanged when within budget, else its head and a truncation note.
    """
    data = text.encode("utf-8", "replace")
    full = len(data) if total is None else max(total, len(data))
    if full <= cap:
        return text
    keep = cap - 96 if cap > 192 else cap
    head = data[:keep].decode("utf-8", "ignore")
    return "%s\n[output truncated: %d of %d bytes cut]" % (head, full - keep, full)


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


def _open_regular(path: str, shown: str) -> Any:
    """Open a regular file for reading in binary mode; a FIFO or device is refused.

    O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError("%s is not a regular file" % shown)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _tool_read(args: Dict[str, Any], ctx: ToolContext) -> Tuple[str, bool]:
    path = args["path"]
    offset = int(args.get("offset") or 1)
    limit = args.get("limit")
    numbers = bool(args.get("line_numbers"))
    if offset < 1:
        raise ToolError("offset must be >= 1 (the first line is 1)")
    if limit is not None and int(limit) < 1:
        raise ToolError("limit must be >= 1")
    # Leave room for the closing note inside the result cap.
    budget = max(ctx.output_bytes - 200, ctx.output_bytes // 2)
    out: List[str] = []
    used = 0
    note = ""
    lineno = 0
    with _open_regular(ctx.resolve(path), path) as f:
        size = os.fstat(f.fileno()).st_size
        if _is_binary(f.read(BINARY_SNIFF_BYTES)):
            raise ToolError("%s is a binary file (%d bytes)" % (path, size))
        f.seek(0)
        consumed = 0
        for lineno, raw in enumerate(f, 1):
            if lineno < offset:
                consumed += len(raw)
                continue
            if limit is not None and lineno >= offset + int(limit):
                note = "[more lines follow: continue with offset=%d]" % lineno
                break
            line = raw.decode("utf-8", "replace")
            piece = ("%6d\t%s" % (lineno, line)) if numbers else line
            cost = len(piece.encode("utf-8"))
            if used + cost > budget:
                if not out:  # one line longer than the whole budget: show its head
                    out.append(piece.encode("utf-8")[:budget].decode("utf-8", "ignore"))
                    note = "[line %d cut to %d bytes; %d bytes of the file not shown]" % (
                        lineno,
                        budget,
                        size - consumed - budget,
                    )
                else:
                    note = (
                        "[output truncated: %d bytes of the file not shown; "
                        "continue with offset=%d]" % (size - consumed, lineno)
                    )
                break
            out.append(piece)
            used += cost
            consumed += len(raw)
    if offset > 1 and lineno < offset:
        raise ToolError("offset %d is past the end of %s (%d lines)" % (offset, path, lineno))
    text = "".join(out)
    if lineno == 0:
        return "(empty file)", False
    if note:
        text = text + ("" if text.endswith("\n") or not text else "\n") + note
    return text, False


def _tool_write(args: Dict[str, Any], ctx: ToolContext) -> Tuple[str, bool]:
    path = ctx.resolve(args["path"])
    content = args["content"]
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    data = content.encode("utf-8", "replace")
    with open(path, "wb") as f:
        f.write(data)
    return "wrote %d bytes" % len(data), False


def _tool_edit(args: Dict[str, Any], ctx: ToolContext) -> Tuple[str, bool]:
    path = args["path"]
    old = args["old"]
    new = args["new"]
    if not old:
        raise ToolError("old must not be empty")
    full = ctx.resolve(path)
    try:
        with _open_regular(full, path) as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError("%s is not UTF-8 text: %s" % (path, exc)) from None
    count = text.count(old)
    if count == 0:
        raise ToolError("old text not found in %s (it must match exactly once)" % path)
    if count > 1:
        raise ToolError(
            "old text found %d times in %s; it must match exactly once: "
            "include more surrounding text" % (count, path)
        )
    # Bytes in and out: the file keeps its own line endings.
    with open(full, "wb") as f:
        f.write(text.replace(old, new, 1).encode("utf-8"))
    return "edited %s: replaced 1 occurrence" % path, False


def _tool_ls(args: Dict[str, Any], ctx: ToolContext) -> Tuple[str, bool]:
    path = args.get("path") or "."
    names = []
    with os.scandir(ctx.resolve(path)) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            names.append(entry.name + ("/" if is_dir else ""))
    names.sort()
    if not names:
        return "(empty directory)", False
    lines = names[:LIST_MAX_ENTRIES]
    if len(names) > LIST_MAX_ENTRIES:
        lines.append("[%d more entries not shown]" % (len(names) - LIST_MAX_ENTRIES))
    return "\n".join(lines), False


def _glob_match(pattern: str, rel: str) -> bool:
    """Match a name glob against the basename, a glob with ``/`` against the relative path."""
    if "/" not in pattern:
        return fnmatch.fnmatchcase(os.path.basename(rel), pattern)
    if fnmatch.fnmatchcase(rel, pattern):
        return True
    return pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:])


def _walk(top: str, deadline: float) -> Tuple[List[Tuple[str, str, bool]], bool]:
    """Every entry under ``top`` as ``(path on disk, path relative to top, is_dir)``, sorted.

    Symlinked directories are not followed and VCS directories are skipped. Stops at
    ``deadline``; the flag says whether it did.
    """
    found: List[Tuple[str, str, bool]] = []
    for root, dirs, files in os.walk(top):
        if time.monotonic() > deadline:
            return found, True
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel_root = os.path.relpath(root, top)
        for name in dirs:
            rel = name if rel_root == "." else os.path.join(rel_root, name)
            found.append((os.path.join(root, name), rel, True))
        for name in sorted(files):
            rel = name if rel_root == "." else os.path.join(rel_root, name)
            found.append((os.path.join(root, name), rel, False))
    return found, False


def _display(base: str, rel: str) -> str:
    return os.path.normpath(os.path.join(base, rel))


def _tool_grep(args: Dict[str, Any], ctx: ToolContext) -> Tuple[str, bool]:
    try:
        regex = re.compile(args["pattern"])
    except re.error as exc:
        raise ToolError("invalid regular expression: %s" % exc) from None
    path = args.get("path") or "."
    glob = args.get("glob")
    top = ctx.resolve(path)
    deadline = time.monotonic() + ctx.timeout_sec
    st = os.stat(top)
    if stat.S_ISDIR(st.st_mode):
        entries, timed_out = _walk(top, deadline)
        files = [
            (disk, _display(path, rel))
            for disk, rel, is_dir in entries
            if not is_dir and (not glob or _glob_match(glob, rel))
        ]
    else:
        files, timed_out = [(top, path)], False
    matches: List[str] = []
    stopped = ""
    for disk, shown in files:
        if time.monotonic() > deadline:
            timed_out = True
            break
        try:
            if not stat.S_ISREG(os.stat(disk).st_mode):
                continue  # a FIFO or device would block or never end
            with open(disk, "rb") as f:
                data = f.read(GREP_MAX_FILE_BYTES + 1)
        except OSError:
            continue
        if len(data) > GREP_MAX_FILE_BYTES or _is_binary(data[:BINARY_SNIFF_BYTES]):
            continue
        for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                if len(matches) >= GREP_MAX_MATCHES:
                    stopped = "[stopped after %d matches]" % GREP_MAX_MATCHES
                    break
                if len(line) > GREP_LINE_CHARS:
                    line = line[:GREP_LINE_CHARS] + "..."
                matches.append("%s:%d:%s" % (shown, lineno, line))
        if stopped:
            break
    if timed_out:
        stopped = "[search stopped after %gs; narrow the path]" % ctx.timeout_sec
    if not matches:
        return "no matches" + ("\n" + stopped if stopped else ""), False
    return "\n".join(matches + ([stopped] if stopped else [])), False


def _tool_find(args: Dict[str, Any], ctx: ToolContext) -> Tuple[str, bool]:
    pattern = args["pattern"]
    path = args.get("path") or "."
    top = ctx.resolve(path)
    if not os.path.isdir(top):
        raise ToolError("%s is not a directory" % path)
    entries, timed_out = _walk(top, time.monotonic() + ctx.timeout_sec)
    hits = [
        _display(path, rel) + ("/" if is_dir else "")
        for _, rel, is_dir in entries
        if _glob_match(pattern, rel)
    ]
    lines = hits[:LIST_MAX_ENTRIES]
    if len(hits) > LIST_MAX_ENTRIES:
        lines.append("[%d more matches not shown]" % (len(hits) - LIST_MAX_ENTRIES))
    if timed_out:
        lines.append("[search stopped after %gs; narrow the path]" % ctx.timeout_sec)
    return ("\n".join(lines) if lines else "no matches"), False


def _tool_shell(args: Dict[str, Any], ctx: ToolContext) -> Tuple[str, bool]:  # noqa: C901
    cap = ctx.output_bytes
    proc = subprocess.Popen(
        ["/bin/sh", "-c", args["command"]],
        cwd=ctx.workspace,
        env=dict(os.environ),  # already scrubbed of the token
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: a timeout kills all of it
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    head = bytearray()
    total = 0
    timed_out = False
    eof = False

    def pump(wait: float) -> bool:
        """Read what is there, waiting up to ``wait``; False when idle or at EOF."""
        nonlocal total, eof
        if not sel.select(timeout=wait):
            return False
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            eof = True
            return False
        total += len(chunk)
        if len(head) < cap:
            head.extend(chunk[: cap - len(head)])
        return True

    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        deadline = time.monotonic() + ctx.timeout_sec
        while proc.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # The leader is not reaped yet (poll just said so): its pgid is still valid.
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                break
            if eof:  # output closed early (exec >/dev/null ...): just wait, do not spin
                try:
                    proc.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    pass
            else:
                pump(min(0.05, remaining))
        # Drain: stop at EOF, when the pipe goes idle, or after SHELL_DRAIN_SEC at most.
        drain_until = time.monotonic() + SHELL_DRAIN_SEC
        while not eof and time.monotonic() < drain_until and pump(0.05):
            pass
    finally:
        sel.close()
        proc.stdout.close()
    text = cap_text(head.decode("utf-8", "replace"), cap, total) if total else "(no output)"
    if text.endswith("\n"):  # the notes below start on their own line anyway
        text = text[:-1]
    if timed_out:
        return (
            "%s\n[command timed out after %gs; its process group was killed]"
            % (text, ctx.timeout_sec),
            True,
        )
    code = proc.returncode
    if code < 0:
        return "%s\n[killed by signal %d]" % (text, -code), True
    if code != 0:
        return "%s\n[exit code %d]" % (text, code), True
    return text, False


ToolFunc = Callable[[Dict[str, Any], ToolContext], Tuple[str, bool]]


@dataclass
class ToolSpec:
    """A tool as the model sees it (JSON schema) and the function that runs it."""

    name: str
    description: str
    properties: Dict[str, Dict[str, str]]
    required: List[str]
    run: ToolFunc

    def schema(self) -> Dict[str, Any]:
        """The JSON schema of the tool's arguments."""
        return {
            "type": "object",
            "properties": self.properties,
            "required": list(self.required),
        }


def _prop(kind: str, description: str) -> Dict[str, str]:
    return {"type": kind, "description": description}


TOOLS: Dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "read",
            "Read a text file. Use offset (first line, 1-based) and limit (number of lines) "
            "for large files; line_numbers=true prefixes each line with its number.",
            {
                "path": _prop("string", "File path, relative to the workspace or absolute."),
                "offset": _prop("integer", "First line to show (1-based)."),
                "limit": _prop("integer", "Maximum number of lines to show."),
                "line_numbers": _prop("boolean", "Prefix lines with their numbers."),
            },
            ["path"],
            _tool_read,
        ),
        ToolSpec(
            "write",
            "Create or overwrite a file with the given content (parent directories are created).",
            {
                "path": _prop("string", "File path, relative to the workspace or absolute."),
                "content": _prop("string", "The complete new file content."),
            },
            ["path", "content"],
            _tool_write,
        ),
        ToolSpec(
            "edit",
            "Replace one exact occurrence of `old` with `new` in a file. Fails when `old` "
            "occurs zero or several times: include enough surrounding text to be unique.",
            {
                "path": _prop("string", "File path, relative to the workspace or absolute."),
                "old": _prop("string", "The exact text to replace."),
                "new": _prop("string", "The replacement text."),
            },
            ["path", "old", "new"],
            _tool_edit,
        ),
        ToolSpec(
            "ls",
            "List a directory (default: the workspace). Directories end with '/'.",
            {"path": _prop("string", "Directory path (default '.').")},
            [],
            _tool_ls,
        ),
        ToolSpec(
            "grep",
            "Search file contents recursively with a Python regular expression; prints "
            "path:line:text. Binary files and .git are skipped.",
            {
                "pattern": _prop("string", "Python regular expression."),
                "path": _prop("string", "File or directory to search (default '.')."),
                "glob": _prop("string", "Only files whose name matches, e.g. '*.py'."),
            },
            ["pattern"],
            _tool_grep,
        ),
        ToolSpec(
            "find",
            "Find files and directories whose name matches a glob (e.g. '*.py'); a glob "
            "containing '/' matches the path relative to `path`.",
            {
                "pattern": _prop("string", "Glob pattern."),
                "path": _prop("string", "Directory to search (default '.')."),
            },
            ["pattern"],
            _tool_find,
        ),
        ToolSpec(
            "shell",
            "Run a command with /bin/sh -c in the workspace; returns stdout and stderr "
            "combined, and the exit code when it is not 0. Long-running commands time out.",
            {"command": _prop("string", "The shell command line.")},
            ["command"],
            _tool_shell,
        ),
    )
}

_JSON_TYPES: Dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "boolean": lambda v: isinstance(v, bool),
}


def check_arguments(spec: ToolSpec, args: Dict[str, Any]) -> Optional[str]:
    """Validate tool arguments against the tool's schema.

    Returns:
        None when valid, else what is wrong.
    """
    for name in spec.required:
        if args.get(name) is None:
            return "missing required field %r" % name
    for name, prop in spec.properties.items():
        value = args.get(name)
        if value is not None and not _JSON_TYPES[prop["type"]](value):
            article = "an" if prop["type"] == "integer" else "a"
            return "field %r must be %s %s, got %s" % (
                name,
                article,
                prop["type"],
                type(value).__name__,
            )
    return None


def run_tool(
    tools: Dict[str, ToolSpec],
    name: str,
    args: Optional[Dict[str, Any]],
    parse_error: Optional[str],
    ctx: ToolContext,
) -> Tuple[str, bool]:
    """Run one tool call; every failure becomes an error result, never an exception.

    Args:
        tools: The tools this run enables, by name; any other name is refused.
        name: The tool the model called.
        args: Its parsed arguments, or None when they did not parse.
        parse_error: Why they did not parse.
        ctx: Workspace and limits.

    Returns:
        ``(content, is_error)``, content capped at ``ctx.output_bytes``.
    """
    spec = tools.get(name)
    if spec is None:
        return "Unknown tool %r (available: %s)." % (name, ", ".join(tools) or "none"), True
    if args is None:
        return "Invalid arguments for %s: %s." % (name, parse_error), True
    problem = check_arguments(spec, args)
    if problem is not None:
        return "Invalid arguments for %s: %s." % (name, problem), True
    try:
        content, is_error = spec.run(args, ctx)
    except ToolError as exc:
        content, is_error = "%s: %s" % (name, exc), True
    except OSError as exc:
        where = " (%s)" % exc.filename if exc.filename else ""
        content, is_error = "%s: %s%s" % (name, exc.strerror or exc, where), True
    except Exception as exc:  # a tool bug must not end the run: the model reads about it
        content, is_error = "%s failed: %s: %s" % (name, type(exc).__name__, exc), True
    return cap_text(content, ctx.output_bytes), is_error


# --- the model APIs -----------------------------------------------------------------------


@dataclass
class ToolCall:
    """One tool call from an assistant message."""

    id: str
    name: str
    #: As the model sent them: an object, or the raw text when it is not a JSON object.
    arguments: Any
    parsed: Optional[Dict[str, Any]]
    parse_error: Optional[str]


@dataclass
class Reply:
    """One assistant message, provider-neutral."""

    text: str
    tool_calls: List[ToolCall]
    stop_reason: Optional[str]
    raw_stop_reason: Any
    usage: Dict[str, Optional[int]]
    #: The provider's error message carried in a 200 body, if any.
    error: Optional[str]
    #: The message to send back in the conversation.
    replay: Dict[str, Any] = field(default_factory=dict)


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _provider_error(*objects: Any) -> Optional[str]:
    """The first ``error.message`` (or string ``error``) among JSON objects."""
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        err = obj.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            err = err["message"]
        if isinstance(err, str) and err.strip():
            return _one_line(err)
    return None


def _count(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _parse_arguments(raw: Any) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # some models send "" for a call without arguments
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            return None, "arguments are not valid JSON (%s)" % exc
    if not isinstance(raw, dict):
        return None, "arguments must be a JSON object, got %s" % type(raw).__name__
    return raw, None


# One process-wide opener without proxy handling: the gateway is on loopback, and an
# inherited HTTP(S)_PROXY must not reroute the token elsewhere.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post_json(url: str, headers: Dict[str, str], body: Dict[str, Any], timeout: float) -> Any:
    """POST a JSON body and return the decoded JSON answer.

    Raises:
        StrictFailure: ``Model call failed: …`` for an HTTP error status, a connection
            problem, a timeout or a body that is not JSON.
    """
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers=dict(headers, **{"Content-Type": "application/json"}),
        method="POST",
    )
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            status = response.status
            raw = response.read()
    except urllib.error.HTTPError as exc:
        try:
            err_body = exc.read()
        except Exception:
            err_body = b""
        message = _http_error_message(err_body, str(exc.reason or "no message"))
        raise StrictFailure(
            MSG_MODEL_CALL.format(detail="HTTP %d: %s" % (exc.code, message))
        ) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            detail = "no answer within %gs from %s" % (timeout, url)
        else:
            detail = "connection to %s failed: %s" % (url, reason)
        raise StrictFailure(MSG_MODEL_CALL.format(detail=_one_line(detail))) from None
    except OSError as exc:  # TimeoutError, and socket.timeout on 3.9, are OSErrors too
        if isinstance(exc, TimeoutError) or "timed out" in str(exc):
            detail = "no answer within %gs from %s" % (timeout, url)
        else:
            detail = "connection to %s failed: %s: %s" % (url, type(exc).__name__, exc)
        raise StrictFailure(MSG_MODEL_CALL.format(detail=_one_line(detail))) from None
    except Exception as exc:  # http.client.HTTPException and friends: a broken answer
        detail = "bad response from %s: %s: %s" % (url, type(exc).__name__, exc)
        raise StrictFailure(MSG_MODEL_CALL.format(detail=_one_line(detail))) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        detail = "HTTP %d: response is not JSON: %s" % (
            status,
            _one_line(raw.decode("utf-8", "replace"), 200) or "(empty body)",
        )
        raise StrictFailure(MSG_MODEL_CALL.format(detail=detail)) from None


def _http_error_message(body: bytes, fallback: str) -> str:
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    message = _provider_error(data)
    if message:
        return message
    return _one_line(text) or fallback


class ModelClient:
    """The parts of a chat API the loop needs; one subclass per API."""

    def __init__(self, settings: Settings, base_url: str, token: str, tools: List[ToolSpec]):
        """Keep what every request needs."""
        self.settings = settings
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.tools = tools
        self._ids = 0

    def _new_id(self) -> str:
        self._ids += 1
        return "call_%d" % self._ids

    def call(self, messages: List[Dict[str, Any]], system: str) -> Optional[Reply]:
        """One model call.

        Returns:
            The assistant message, or None when the answer holds none.

        Raises:
            StrictFailure: The call failed (``Model call failed: …``).
        """
        body = post_json(
            self.url(),
            self.headers(),
            self.body(messages, system),
            self.settings.request_timeout_sec,
        )
        return self.parse(body) if isinstance(body, dict) else None

    def url(self) -> str:
        """The endpoint."""
        raise NotImplementedError

    def headers(self) -> Dict[str, str]:
        """Auth and version headers."""
        raise NotImplementedError

    def body(self, messages: List[Dict[str, Any]], system: str) -> Dict[str, Any]:
        """The request body."""
        raise NotImplementedError

    def parse(self, body: Dict[str, Any]) -> Optional[Reply]:
        """The assistant message of a response body, or None."""
        raise NotImplementedError

    def first_messages(self, system: str, instruction: str) -> List[Dict[str, Any]]:
        """The conversation before the first call."""
        raise NotImplementedError

    def tool_results(self, results: List[Tuple[ToolCall, str, bool]]) -> List[Dict[str, Any]]:
        """Messages carrying the results of one assistant message's tool calls."""
        raise NotImplementedError


class OpenAIChat(ModelClient):
    """``POST {OPENAI_BASE_URL}/chat/completions`` with function tools."""

    def url(self) -> str:  # noqa: D102
        return self.base_url + "/chat/completions"

    def headers(self) -> Dict[str, str]:  # noqa: D102
        return {"Authorization": "Bearer " + self.token}

    def body(self, messages: List[Dict[str, Any]], system: str) -> Dict[str, Any]:  # noqa: D102
        body: Dict[str, Any] = {
            "model": self.settings.model,
            "messages": messages,
            # max_tokens is refused by OpenAI's reasoning models; this one works everywhere.
            "max_completion_tokens": self.settings.max_tokens,
        }
        if self.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.schema(),
                    },
                }
                for t in self.tools
            ]
        return body

    def first_messages(self, system: str, instruction: str) -> List[Dict[str, Any]]:  # noqa: D102
        return [{"role": "system", "content": system}, {"role": "user", "content": instruction}]

    def parse(self, body: Dict[str, Any]) -> Optional[Reply]:  # noqa: D102
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            return None
        content = message.get("content")
        if isinstance(content, list):  # some compatible servers send content parts
            content = "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, dict) and p.get("type") == "text"
            )
        text = content if isinstance(content, str) else ""
        calls = []
        for item in message.get("tool_calls") or []:
            if not isinstance(item, dict):
                continue
            function = item.get("function") if isinstance(item.get("function"), dict) else {}
            assert isinstance(function, dict)
            raw = function.get("arguments")
            parsed, error = _parse_arguments(raw)
            call_id = item.get("id") if isinstance(item.get("id"), str) and item["id"] else None
            calls.append(
                ToolCall(
                    id=call_id or self._new_id(),
                    name=str(function.get("name") or ""),
                    arguments=parsed if parsed is not None else raw,
                    parsed=parsed,
                    parse_error=error,
                )
            )
        replay: Dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            replay["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.arguments
                        if isinstance(c.arguments, str)
                        else json.dumps(c.arguments),
                    },
                }
                for c in calls
            ]
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        raw_stop = choice.get("finish_reason")
        return Reply(
            text=text,
            tool_calls=calls,
            stop_reason=STOP_REASONS.get(raw_stop, raw_stop) if isinstance(raw_stop, str) else None,
            raw_stop_reason=raw_stop,
            usage={
                "input_tokens": _count(usage.get("prompt_tokens")),
                "output_tokens": _count(usage.get("completion_tokens")),
            },
            error=_provider_error(choice, body),
            replay=replay,
        )

    def tool_results(self, results: List[Tuple[ToolCall, str, bool]]) -> List[Dict[str, Any]]:  # noqa: D102
        # Chat completions has no error flag: the content says it.
        return [{"role": "tool", "tool_call_id": c.id, "content": out} for c, out, _ in results]


class AnthropicMessages(ModelClient):
    """``POST {ANTHROPIC_BASE_URL}/v1/messages`` with tool_use / tool_result blocks."""

    def url(self) -> str:  # noqa: D102
        return self.base_url + "/v1/messages"

    def headers(self) -> Dict[str, str]:  # noqa: D102
        return {"x-api-key": self.token, "anthropic-version": ANTHROPIC_VERSION}

    def body(self, messages: List[Dict[str, Any]], system: str) -> Dict[str, Any]:  # noqa: D102
        body: Dict[str, Any] = {
            "model": self.settings.model,
            "max_tokens": self.settings.max_tokens,
            "system": system,
            "messages": messages,
        }
        if self.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.schema()}
                for t in self.tools
            ]
        return body

    def first_messages(self, system: str, instruction: str) -> List[Dict[str, Any]]:  # noqa: D102
        return [{"role": "user", "content": instruction}]

    def parse(self, body: Dict[str, Any]) -> Optional[Reply]:  # noqa: D102
        content = body.get("content")
        if not isinstance(content, list):
            return None
        texts = []
        calls = []
        blocks = []
        for block in content:
            if not isinstance(block, dict):
                continue
            block = dict(block)
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use":
                if not isinstance(block.get("id"), str) or not block["id"]:
                    block["id"] = self._new_id()
                raw = block.get("input")
                parsed, error = _parse_arguments(raw if raw is not None else {})
                calls.append(
                    ToolCall(
                        id=block["id"],
                        name=str(block.get("name") or ""),
                        arguments=parsed if parsed is not None else raw,
                        parsed=parsed,
                        parse_error=error,
                    )
                )
            blocks.append(block)
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        raw_stop = body.get("stop_reason")
        return Reply(
            text="\n".join(texts),
            tool_calls=calls,
            stop_reason=STOP_REASONS.get(raw_stop, raw_stop) if isinstance(raw_stop, str) else None,
            raw_stop_reason=raw_stop,
            usage={
                "input_tokens": _count(usage.get("input_tokens")),
                "output_tokens": _count(usage.get("output_tokens")),
            },
            error=_provider_error(body),
            replay={"role": "assistant", "content": blocks},
        )

    def tool_results(self, results: List[Tuple[ToolCall, str, bool]]) -> List[Dict[str, Any]]:  # noqa: D102
        blocks = [
            {"type": "tool_result", "tool_use_id": c.id, "content": out, "is_error": is_error}
            for c, out, is_error in results
        ]
        return [{"role": "user", "content": blocks}]


# --- the loop -----------------------------------------------------------------------------


def default_system_prompt(workspace: str, tools: List[ToolSpec]) -> str:
    """The system prompt used unless the config overrides it."""
    lines = [
        "You are an autonomous software agent working in the directory %s (the workspace)."
        % workspace,
        "Complete the user's task yourself using the tools below; nobody will answer "
        "questions. Relative paths are resolved against the workspace.",
        "",
        "Tools:",
    ]
    lines += ["- %s: %s" % (t.name, t.description) for t in tools]
    lines += [
        "",
        "When the task is done, reply with a short text summary of what you did and call no "
        "more tools.",
    ]
    return "\n".join(lines)


def _say(text: str) -> None:
    """Progress for the agent log (stdout); a broken log must not end the run."""
    try:
        print(text, flush=True)
    except (OSError, ValueError):
        pass


class Run:
    """One agent run: owns the session log and the turn count for the failure paths."""

    def __init__(self) -> None:
        """Start with nothing open."""
        self.session: Optional[SessionLog] = None
        self.turns = 0

    def finish(self, error: Optional[str], code: int) -> int:
        """Write the ``end`` line and, on failure, the message as the last stderr line.

        Never raises: it runs on every failure path.
        """
        if self.session is not None:
            try:
                self.session.write(
                    {"type": "end", "ok": error is None, "error": error, "turns": self.turns}
                )
            except Exception as exc:
                self._stderr("cannot write the end line: %s" % exc)
            try:
                self.session.close()
            except OSError:
                pass
        if error is not None:
            self._stderr(error)
        return code

    @staticmethod
    def _stderr(text: str) -> None:
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def execute(self, config: Any) -> int:  # noqa: C901
        """Run the agent to completion; strict failures raise ``StrictFailure``."""
        api = config.get("api") if isinstance(config, dict) else None
        token, base_url = take_credentials(api or os.environ.get("HARNESS_MODEL_API"))
        session_dir = os.environ.get("HARNESS_SESSION_DIR")
        if not session_dir:
            raise ConfigError("HARNESS_SESSION_DIR is not set")
        try:
            self.session = SessionLog(os.path.join(session_dir, SESSION_FILE))
        except OSError as exc:
            raise ConfigError("cannot create the session file: %s" % exc) from None
        unknown = (
            sorted(k for k in config if k not in KNOWN_KEYS) if isinstance(config, dict) else []
        )
        settings = parse_settings(config, dict(os.environ))
        if unknown:
            _say("ignoring unknown config keys: %s" % ", ".join(unknown))
        key_var = "ANTHROPIC" if settings.api == "anthropic-messages" else "OPENAI"
        if not token:
            raise ConfigError("%s_API_KEY is not set" % key_var)
        if not base_url:
            raise ConfigError("%s_BASE_URL is not set" % key_var)
        instruction_file = os.environ.get("HARNESS_INSTRUCTION_FILE")
        if not instruction_file:
            raise ConfigError("HARNESS_INSTRUCTION_FILE is not set")
        try:
            with open(instruction_file, "rb") as f:
                instruction = f.read().decode("utf-8", "replace")
        except OSError as exc:
            raise ConfigError("cannot read the instruction: %s" % exc) from None
        workspace = os.environ.get("HARNESS_WORKSPACE") or os.getcwd()
        try:
            os.chdir(workspace)  # shell commands and relative paths start here
        except OSError as exc:
            raise ConfigError("cannot enter the workspace: %s" % exc) from None
        workspace = os.getcwd()

        tools = [TOOLS[name] for name in settings.tools]
        enabled = {t.name: t for t in tools}
        ctx = ToolContext(workspace, settings.tool_timeout_sec, settings.tool_output_bytes)
        client_class = AnthropicMessages if settings.api == "anthropic-messages" else OpenAIChat
        client = client_class(settings, base_url, token, tools)
        system = settings.system_prompt
        if system is None:
            system = default_system_prompt(workspace, tools)
        log = self.session
        log.write(
            {
                "type": "session",
                "version": 1,
                "agent": "builtin",
                "api": settings.api,
                "model": settings.model_label,
                "tools": list(settings.tools),
                "max_turns": settings.max_turns,
            }
        )
        log.write({"type": "message", "role": "system", "content": system})
        log.write({"type": "message", "role": "user", "content": instruction})
        messages = client.first_messages(system, instruction)

        while True:
            if self.turns >= settings.max_turns:
                raise StrictFailure(MSG_MAX_TURNS.format(n=settings.max_turns))
            self.turns += 1
            reply = client.call(messages, system)
            if reply is None:
                raise StrictFailure(MSG_NO_MESSAGE)
            log.write(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": reply.text,
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments}
                        for c in reply.tool_calls
                    ],
                    "stop_reason": reply.stop_reason,
                    "usage": reply.usage,
                }
            )
            _say(
                "[turn %d] stop_reason=%s tool_calls=%s"
                % (self.turns, reply.stop_reason, [c.name for c in reply.tool_calls])
            )
            if reply.text:
                _say(reply.text)
            # Tool calls are run whenever the stop reason is not a failure: some compatible
            # servers say "stop" even when the message calls tools.
            if reply.tool_calls and reply.stop_reason in ("stop", "tool_use"):
                messages.append(reply.replay)
                results = []
                for call in reply.tool_calls:
                    started = time.perf_counter()
                    content, is_error = run_tool(
                        enabled, call.name, call.parsed, call.parse_error, ctx
                    )
                    log.write(
                        {
                            "type": "tool_result",
                            "tool_call_id": call.id,
                            "name": call.name,
                            "content": content,
                            "is_error": is_error,
                            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                        }
                    )
                    _say("  %s -> %s" % (call.name, "error" if is_error else "ok"))
                    results.append((call, content, is_error))
                messages.extend(client.tool_results(results))
                continue
            if reply.stop_reason == "stop":
                if not reply.text.strip():
                    raise StrictFailure(MSG_NO_TEXT)
                return self.finish(None, EXIT_OK)
            # Any other stop reason, and "tool_use" without a tool call to run (nothing
            # could continue the run), ends it.
            if reply.error:
                raise StrictFailure(reply.error)
            reason = reply.stop_reason if reply.stop_reason is not None else "null"
            raise StrictFailure(MSG_STOP_REASON.format(reason=reason))


def main(config: Dict[str, Any]) -> int:
    """Run the built-in agent once, in the current process; never raises.

    Args:
        config: ``api`` (``openai-chat`` | ``anthropic-messages``; default
            ``$HARNESS_MODEL_API``), ``model`` (the name sent; default
            ``$HARNESS_MODEL_NAME``), ``model_label`` (for session.jsonl; default
            ``$HARNESS_MODEL``), ``max_turns`` (model calls, 30), ``tools`` (default all
            of read, write, edit, ls, grep, find, shell), ``tool_timeout_sec`` (120),
            ``tool_output_bytes`` (30000), ``request_timeout_sec`` (600), ``max_tokens``
            (4096), ``system_prompt`` (optional override).

    Returns:
        The exit code: 0 success, 3 strict-completion failure, 4 config/internal error.
    """
    run = Run()
    try:
        # The supervisor resets SIGPIPE to the default for exec'd agents; in-process, a
        # gateway that hangs up mid-request would kill us instead of raising EPIPE. Tool
        # subprocesses get the default back (Popen's restore_signals).
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        return run.execute(config)
    except StrictFailure as exc:
        return run.finish(str(exc), EXIT_STRICT)
    except ConfigError as exc:
        return run.finish("Agent configuration error: %s" % exc, EXIT_INTERNAL)
    except BaseException as exc:  # noqa: B036 - main must never raise: report and exit 4
        try:
            traceback.print_exc()
        except Exception:
            pass
        return run.finish("Agent internal error: %s: %s" % (type(exc).__name__, exc), EXIT_INTERNAL)


def _cli(argv: List[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: agent_loop.py CONFIG.json\n")
        return EXIT_INTERNAL
    try:
        with open(argv[0], encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        sys.stderr.write("Agent configuration error: cannot load %s: %s\n" % (argv[0], exc))
        return EXIT_INTERNAL
    return main(config)


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
