"""Answers on the supervisor's channel must echo their request's nonce (docs/security.md).

A root agent under gVisor can open the supervisor's fds through ``/proc/1/fd`` and write
a forged phase result into its channel: the session refuses any answer without the nonce
of the request it answers, and keeps accepting the supervisor's own.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from sandbox.backend import SupervisorSession
from sandbox.errors import ChannelForged


def _session() -> tuple[SupervisorSession, int, int]:
    """A session over two pipes: (session, fd the fake supervisor reads, fd it writes)."""
    req_r, req_w = os.pipe()
    ans_r, ans_w = os.pipe()
    session = SupervisorSession()
    session.attach(os.fdopen(req_w, "wb"), os.fdopen(ans_r, "rb"))
    return session, req_r, ans_w


def _answer(req_r: int, ans_w: int, *, forge: bool) -> threading.Thread:
    def serve() -> None:
        with os.fdopen(req_r, "rb") as requests:
            request = json.loads(requests.readline())
            answer = {"version": 1, "error": None, "exit_code": 0}
            if not forge:
                answer["nonce"] = request["nonce"]
            os.write(ans_w, (json.dumps(answer) + "\n").encode())

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


@pytest.mark.parametrize("forge", [False, True])
def test_only_an_answer_with_the_nonce_is_taken(forge: bool) -> None:
    session, req_r, ans_w = _session()
    thread = _answer(req_r, ans_w, forge=forge)
    try:
        if forge:
            with pytest.raises(ChannelForged, match="nonce"):
                session.request({"op": "read", "path": "/x"}, timeout=10)
        else:
            answer = session.request({"op": "read", "path": "/x"}, timeout=10)
            assert answer == {"version": 1, "error": None, "exit_code": 0}
    finally:
        thread.join(timeout=10)
        os.close(ans_w)
