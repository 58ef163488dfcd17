"""``$HARNESS_AGENT_EXEC``: run a command as the agent, from the verifier (stdlib, 3.9).

Usage (in a task's tests)::

    "$HARNESS_AGENT_EXEC" [--timeout SEC] [--cwd DIR] [--env NAME=VALUE]... [--stdin]
                          [--max-output BYTES] [--json] -- COMMAND [ARG...]

The command runs as the agent's user, confined like the agent phase, in the workspace by
default, with the agent's environment (plus ``--env``), and stdin empty unless ``--stdin``
forwards this process's stdin. Its stdout and stderr are written to ours; the exit status
is the command's, 124 when it timed out, 128+N when signal N killed it, and 125 when it
could not be run at all or was refused (the reason is on stderr): a verifier with a
``[verifier].env`` gets no agent commands where the agent's code could read that
environment (gVisor; a verifier of the agent's own uid). ``--json`` prints the whole answer
instead: ``exit_code``, ``signal``, ``timed_out``, ``stdout``/``stderr`` (base64),
``truncated``, ``survivors`` ...

Judge what it printed as data, in the grader's own process: never import the agent's code
into the grader.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
from typing import Any, Dict, List, Optional

EXIT_TIMEOUT = 124
EXIT_CANNOT_RUN = 125
SOCKET_ENV = "HARNESS_AGENT_EXEC_SOCKET"


def _parse(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="harness-agent-exec", description="Run a command as the agent, for the verifier."
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds (default: phase)")
    parser.add_argument("--cwd", default=None, help="working dir (default: the workspace)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--stdin", action="store_true", help="forward our stdin")
    parser.add_argument("--max-output", type=int, default=None, metavar="BYTES")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("a command is required after --")
    return args


def _request(args: argparse.Namespace) -> Dict[str, Any]:
    env: Dict[str, str] = {}
    for pair in args.env:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError("--env expects NAME=VALUE, got %r" % pair)
        env[name] = value
    stdin = sys.stdin.buffer.read() if args.stdin else b""
    return {
        "argv": list(args.command),
        "cwd": args.cwd,
        "env": env,
        "timeout_sec": args.timeout,
        "max_output_bytes": args.max_output,
        "stdin": base64.b64encode(stdin).decode(),
    }


def call(request: Dict[str, Any], path: Optional[str] = None) -> Dict[str, Any]:
    """Send one request to the supervisor and return its answer.

    Raises:
        OSError: the socket is missing or unreachable (not in a verifier phase).
        ValueError: the answer is not a JSON object.
    """
    path = path or os.environ.get(SOCKET_ENV) or ""
    if not path:
        raise OSError("%s is not set: this only works in a verifier phase" % SOCKET_ENV)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall((json.dumps(request) + "\n").encode())
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        sock.close()
    answer = json.loads(b"".join(chunks).decode("utf-8") or "null")
    if not isinstance(answer, dict):
        raise ValueError("the supervisor answered no result")
    return answer


def exit_status(answer: Dict[str, Any]) -> int:
    """The shell-style exit status of an answer."""
    if answer.get("error"):
        return EXIT_CANNOT_RUN
    if answer.get("timed_out"):
        return EXIT_TIMEOUT
    if answer.get("signal") is not None:
        return 128 + int(answer["signal"])
    code = answer.get("exit_code")
    return EXIT_CANNOT_RUN if code is None else int(code)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; see the module docstring."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        answer = call(_request(args))
    except (OSError, ValueError) as exc:
        sys.stderr.write("harness-agent-exec: %s\n" % exc)
        return EXIT_CANNOT_RUN
    if args.json:
        sys.stdout.write(json.dumps(answer) + "\n")
        return 0
    sys.stdout.buffer.write(base64.b64decode(answer.get("stdout") or ""))
    sys.stderr.buffer.write(base64.b64decode(answer.get("stderr") or ""))
    error = answer.get("error")
    if error:
        sys.stderr.write("harness-agent-exec: %s: %s\n" % (error.get("type"), error.get("message")))
    return exit_status(answer)


if __name__ == "__main__":
    sys.exit(main())
