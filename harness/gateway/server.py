"""The model gateway: the only way from a sandbox to a model (docs/model-access.md).

:class:`Gateway` is the facade over three parts: :mod:`.http` (HTTP/1.1 on each trial's
unix socket, the stream relay), :mod:`.policy` (tokens, endpoints, budgets) and
:mod:`.recorder` (``model_calls.jsonl`` and the usage totals). It runs in the harness
process on its own asyncio loop (one thread). Each trial gets a revocable token and its own
unix socket in a root-only dir; the trial's supervisor relays loopback TCP connections from
inside the sandbox to that socket. The real key never leaves this process.

A trial can make this process hold only so much (:mod:`.limits`): connections, request
bytes and memory are capped per trial, and a budget counts a stream's tokens as they come.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import h11

from harness.errors import ProviderError
from harness.gateway import gemini, http, side
from harness.gateway.hosted_tools import ToolRefused, decide, error_body
from harness.gateway.limits import CONNECTION_BYTES, STREAM_BYTES, Hold, Limits, Meter, parse_cost
from harness.gateway.policy import (
    Allowance,
    Budget,
    Refused,
    Tokens,
    TrialUsage,
    check_call,
    check_target,
    token_of,
)
from harness.gateway.providers import Provider, ProviderCall, ProviderReply
from harness.gateway.recorder import (
    CallRecorder,
    StreamCopy,
    capped_json,
    capped_value,
    json_or_none,
)
from harness.gateway.sockets import make_socket_root, make_trial_socket
from harness.gateway.usage import request_chars, usage_from_body
from harness.models.catalog import ModelSpec
from sandbox.network_events import MAX_NETWORK_EVENTS
from sandbox.network_policy import NO_NETWORK, NetworkPolicy

T = TypeVar("T")


@dataclass(frozen=True)
class TrialAccess:
    """What one trial gets: a token, a socket and the environment that points at them."""

    trial_id: str
    socket_path: Path
    model: ModelSpec
    token: str = field(repr=False)

    def agent_env(self) -> dict[str, str]:
        """Non-secret variables of docs/model-access.md §1 (``{port}`` filled in-sandbox)."""
        return {
            "OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:{port}",
            "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:{port}",
            "HARNESS_MODEL": self.model.id,
            "HARNESS_PROVIDER": self.model.provider,
            "HARNESS_MODEL_NAME": self.model.upstream,
            "HARNESS_MODEL_API": self.model.api,
        }

    def secret_env(self) -> dict[str, str]:
        """The token, under the names clients read keys from (sent on stdin only)."""
        return {
            "OPENAI_API_KEY": self.token,
            "ANTHROPIC_API_KEY": self.token,
            "GEMINI_API_KEY": self.token,
        }


class TrialGateway(Protocol):
    """What a trial uses of the gateway: :class:`Gateway` here, a relay on a Ray worker."""

    def open_trial(
        self,
        trial_id: str,
        task_name: str,
        record_path: Path,
        *,
        network: NetworkPolicy | None = None,
    ) -> TrialAccess:
        """Give a trial its token and socket (calls recorded to ``record_path``).

        ``network`` is the agent phase's policy, which the trial's calls are held to
        (hosted tools, :mod:`.hosted_tools`); None: ``no-network``.
        """

    def set_network(self, trial_id: str, network: NetworkPolicy, step: str | None = None) -> None:
        """The agent phase now running has ``network`` (a step of a multi-step task)."""

    def network_events(self, trial_id: str) -> list[dict[str, Any]]:
        """The ``network_refused`` events of the trial's refused calls so far (drained)."""

    def revoke(self, trial_id: str) -> TrialUsage | None:
        """End the trial's access (idempotent); its usage totals."""

    def call(self, trial_id: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """A model call from trusted in-process agent code: status and JSON body."""


class _Trial:
    """One trial's access: its recorder and allowance, its socket server and connections."""

    def __init__(
        self,
        access: TrialAccess,
        task_name: str,
        recorder: CallRecorder,
        budget: Budget,
        limits: Limits,
        network: NetworkPolicy,
    ) -> None:
        self.access = access
        self.task_name = task_name
        self.recorder = recorder
        self.allowance = Allowance(budget, recorder.usage)
        self.meter = Meter(limits)
        self.server: asyncio.AbstractServer | None = None
        self.connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.revoked = False
        #: The agent its socket was handed over to (:meth:`Gateway.hand_over`), if any.
        self.successor: _Trial | None = None
        #: The policy of the agent phase running now, and its step (None: no steps).
        self.network = network
        self.step: str | None = None
        #: ``network_refused`` events not yet taken (:meth:`Gateway.network_events`).
        self.events: list[dict[str, Any]] = []
        self.events_dropped = 0

    def refused(self, api: str, refused: ToolRefused) -> None:
        """Keep the event of a call refused under the phase's policy (bounded)."""
        tool = refused.refusal.tool
        if tool is None:
            return  # ``background``: a budget matter, in model_calls.jsonl only
        if len(self.events) >= MAX_NETWORK_EVENTS:
            self.events_dropped += 1
            return
        event: dict[str, Any] = {
            "type": "network_refused",
            "phase": "agent",
            "protocol": "model_tool",
            "api": api,
            "tool": tool.name[:255],
            "kind": tool.kind,
            "policy": self.network.mode,
        }
        if refused.refusal.host is not None:
            event["host"] = refused.refusal.host[:255]
        event["reason"] = refused.reason[:1000]
        if self.step is not None:
            event["step"] = self.step
        self.events.append(event)

    def check_network(self, api: str, payload: dict[str, Any]) -> None:
        """Refuse a call the phase's network policy does not allow (hosted tools, background).

        Raises:
            ToolRefused: 400, its event kept.
        """
        refusal = decide(api, payload, self.network)
        if refusal is not None:
            refused = ToolRefused(refusal)
            self.refused(api, refused)
            raise refused

    def current(self) -> _Trial:
        """The access now answering on this socket (the last agent it was handed to)."""
        trial = self
        while trial.successor is not None:
            trial = trial.successor
        return trial


class Gateway:
    """The run's model gateway. ``start`` it, ``open_trial`` per trial, ``close`` at the end.

    Args:
        model: The run's model.
        provider: Where calls go.
        budget: Per-trial limits.
        limits: What one trial may make the gateway hold (connections, bytes, memory).
        redact: Scrubs secrets out of recorded text (the credential store's ``redact``).
        socket_root: Parent of the per-trial socket dirs (default: a root-only dir under
            /run when root, else a private temp dir).
    """

    def __init__(
        self,
        model: ModelSpec,
        provider: Provider,
        *,
        budget: Budget | None = None,
        limits: Limits | None = None,
        redact: Callable[[str], str] = lambda text: text,
        socket_root: Path | None = None,
    ) -> None:
        self.model = model
        self.provider = provider
        self.budget = budget or Budget()
        self.limits = limits or Limits()
        self.redact = redact
        self._socket_root_given = socket_root
        self.socket_root: Path | None = None
        self._owns_root = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._trials: dict[str, _Trial] = {}
        self._tokens = Tokens()
        self._lock = threading.Lock()

    # -- lifecycle (any thread) --------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread and create the socket root."""
        if self._loop is not None:
            return
        root = self._socket_root_given
        if root is None:
            root = make_socket_root()
            self._owns_root = True
        os.chmod(root, 0o700)
        self.socket_root = root
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="model-gateway", daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        if self._loop is None:
            raise RuntimeError("the gateway is not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def open_trial(
        self,
        trial_id: str,
        task_name: str,
        record_path: Path,
        *,
        network: NetworkPolicy | None = None,
    ) -> TrialAccess:
        """Give a trial its token and socket; calls are recorded to ``record_path``.

        ``network`` is the agent phase's policy (None: ``no-network``, fail closed): a call
        asking the provider for a hosted tool it does not allow is refused.
        """
        assert self.socket_root is not None
        access = TrialAccess(
            trial_id=trial_id,
            socket_path=make_trial_socket(self.socket_root),
            model=self.model,
            token=self._tokens.issue(trial_id),
        )
        trial = _Trial(
            access,
            task_name,
            self._recorder(record_path, trial_id),
            self.budget,
            self.limits,
            network or NO_NETWORK,
        )
        self.provider.open_trial(trial_id, task_name)
        with self._lock:
            self._trials[trial_id] = trial
        try:
            self._run(self._listen(trial))
        except BaseException:
            self.revoke(trial_id)
            raise
        return access

    def hand_over(
        self,
        trial_id: str,
        agent_id: str,
        task_name: str,
        record_path: Path,
        *,
        network: NetworkPolicy | None = None,
    ) -> TrialAccess:
        """Give the socket of ``trial_id`` to the next agent of the same sandbox.

        The old agent's token dies and its connections are cut (its usage stays readable
        under ``trial_id``); the new agent gets its own token, budget and call record under
        ``agent_id``, on the same socket (an episode's shared-sandbox judge). ``revoke``
        of ``agent_id`` closes the socket. ``network``: the new agent's policy (None: the
        old agent's).

        Raises:
            KeyError: ``trial_id`` has no open access.
        """
        with self._lock:
            old = self._trials.get(trial_id)
        if old is None or old.server is None:
            raise KeyError(f"no open gateway access for trial {trial_id}")
        access = TrialAccess(
            trial_id=agent_id,
            socket_path=old.access.socket_path,
            model=self.model,
            token=self._tokens.issue(agent_id),
        )
        recorder = self._recorder(record_path, agent_id)
        new = _Trial(access, task_name, recorder, self.budget, self.limits, network or old.network)
        self._tokens.revoke(old.access.token)
        with self._lock:
            old.revoked = True
            new.server, old.server = old.server, None
            self._trials[agent_id] = new
        self._run(self._cut(old))
        old.successor = new
        self.provider.close_trial(trial_id)
        self.provider.open_trial(agent_id, task_name)
        return access

    def set_network(self, trial_id: str, network: NetworkPolicy, step: str | None = None) -> None:
        """The agent phase now running (``step`` of a multi-step task) has ``network``.

        Raises:
            KeyError: ``trial_id`` has no access.
        """
        with self._lock:
            trial = self._trials.get(trial_id)
        if trial is None:
            raise KeyError(f"no gateway access for trial {trial_id}")
        trial.network, trial.step = network, step

    def network_events(self, trial_id: str) -> list[dict[str, Any]]:
        """The trial's ``network_refused`` events so far, and a count of those over the cap.

        Drained: each event is returned once (the trial's record keeps it).
        """
        with self._lock:
            trial = self._trials.get(trial_id)
            if trial is None:
                return []
            events, dropped = trial.events, trial.events_dropped
            trial.events, trial.events_dropped = [], 0
        if dropped:
            events.append({"type": "network_refused", "dropped": dropped, "reason": "over the cap"})
        return events

    def _recorder(self, path: Path, trial_id: str) -> CallRecorder:
        return CallRecorder(
            path, trial_id, self.model, max_refusals=self.limits.max_recorded_refusals
        )

    async def _cut(self, trial: _Trial) -> None:
        tasks = list(trial.connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        trial.recorder.close()

    async def _listen(self, trial: _Trial) -> None:
        def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # A connection belongs to the agent the socket serves when it opens (a socket
            # handed over to the sandbox's next agent cuts the old agent's connections).
            owner = trial.current()
            meter = owner.meter
            refused = self._over_connections(owner)
            if refused is not None:
                owner.recorder.refusal("?", "?", 503, refused, None)
                self._refuse(owner, reader, writer, refused)
                return
            meter.connections += 1
            meter.take(CONNECTION_BYTES)

            def handle(
                conn: h11.Connection,
                writer: asyncio.StreamWriter,
                request: h11.Request,
                body: bytes,
                hold: Hold,
            ) -> Coroutine[Any, Any, None]:
                return self._handle(owner, conn, writer, request, body, hold)

            def refused_while_read(method: str, path: str, status: int, reason: str) -> None:
                owner.recorder.refusal(method, path, status, reason, None)

            def closed(done: asyncio.Task[None]) -> None:
                owner.connections.pop(done, None)
                meter.connections -= 1
                meter.give_back(CONNECTION_BYTES)

            serving = http.serve(reader, writer, handle, refused_while_read, meter)
            task = asyncio.ensure_future(serving)
            owner.connections[task] = writer
            task.add_done_callback(closed)

        path = str(trial.access.socket_path)
        trial.server = await asyncio.start_unix_server(handler, path=path)
        os.chmod(path, 0o600)

    @staticmethod
    def _refuse(
        trial: _Trial, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: str
    ) -> None:
        """Answer a connection over the cap 503; read what it sends meanwhile if few do."""
        meter = trial.meter
        draining = meter.draining < meter.limits.max_connections
        drain = meter.limits.max_request_bytes if draining else 0
        task = asyncio.ensure_future(http.refuse_connection(reader, writer, 503, reason, drain))
        if draining:
            meter.draining += 1
        trial.connections[task] = writer

        def done(task: asyncio.Task[None]) -> None:
            trial.connections.pop(task, None)
            if draining:
                meter.draining -= 1

        task.add_done_callback(done)

    @staticmethod
    def _over_connections(trial: _Trial) -> str | None:
        """Why a new connection of ``trial`` is refused (None: it is taken)."""
        meter = trial.meter
        cap = meter.limits.max_connections
        if meter.connections >= cap:
            return (
                f"connection refused: the trial has {meter.connections} open, the cap "
                f"(gateway.max_connections) is {cap}"
            )
        if meter.headroom() < CONNECTION_BYTES:
            return meter.memory_reason("connection")
        return None

    def revoke(self, trial_id: str) -> TrialUsage | None:
        """End a trial's access: the token dies, the socket goes. Idempotent.

        Returns the trial's usage totals (None for an unknown trial).
        """
        with self._lock:
            trial = self._trials.get(trial_id)
            if trial is None:
                return None
            if trial.revoked:
                return trial.recorder.usage
            trial.revoked = True
        self._tokens.revoke(trial.access.token)
        if self._loop is not None and trial.server is not None:
            try:
                self._run(self._close_server(trial))
            except Exception:  # the socket dir is removed below either way
                pass
        else:
            trial.recorder.close()
        self.provider.close_trial(trial_id)
        if trial.successor is None:  # a handed-over socket is its last agent's to remove
            shutil.rmtree(trial.access.socket_path.parent, ignore_errors=True)
        return trial.recorder.usage

    async def _close_server(self, trial: _Trial) -> None:
        if trial.server is not None:
            trial.server.close()
        # Cut open connections too (keep-alive, or a stream still running): the token is dead.
        await self._cut(trial)

    def usage(self, trial_id: str) -> TrialUsage | None:
        """Usage totals of a trial so far."""
        with self._lock:
            trial = self._trials.get(trial_id)
        return None if trial is None else trial.recorder.usage

    def forget(self, trial_id: str) -> None:
        """Drop a revoked trial's bookkeeping (its token stays known as revoked)."""
        with self._lock:
            trial = self._trials.get(trial_id)
            if trial is not None and trial.revoked:
                del self._trials[trial_id]

    def call(self, trial_id: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """A model call from trusted in-process agent code (``python:`` agents).

        Goes through the same checks, budget and record as a sandbox call; never streamed.
        Returns the HTTP status and the parsed JSON body.
        """
        with self._lock:
            trial = self._trials.get(trial_id)
        if trial is None:
            raise KeyError(f"no gateway access for trial {trial_id}")
        return self._run(self._in_process(trial, path, body), timeout=None)

    def close(self) -> None:
        """Revoke every trial, stop the loop, remove the socket root."""
        with self._lock:
            ids = list(self._trials)
        for trial_id in ids:
            self.revoke(trial_id)
        if self._loop is not None:
            try:
                self._run(self.provider.aclose())
            except Exception:
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            self._loop.close()
            self._loop = None
        if self._owns_root and self.socket_root is not None:
            shutil.rmtree(self.socket_root, ignore_errors=True)

    # -- a request from the sandbox (loop thread) --------------------------------------------

    async def _handle(
        self,
        trial: _Trial,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        raw_body: bytes,
        hold: Hold,
    ) -> None:
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("latin-1")
        headers = http.headers_of(request)
        head = method == "HEAD"  # answered as GET, without the body (RFC 9110 §9.3.2)
        api: str | None = None
        try:
            if method == "OPTIONS" and target == "*":
                await self._local(trial, conn, writer, method, "*", self._options("*"))
                return
            path = gemini.gateway_path(target, check_target(target, headers))
            if method == "OPTIONS":
                await self._local(trial, conn, writer, method, path, self._options(path))
                return
            if path not in side.PUBLIC_PATHS:
                given = token_of(headers) or gemini.query_key(target)
                self._tokens.check(given, trial.access.token, revoked=trial.revoked)
            api = gemini.endpoint_api(path)
            if api is None:
                if path == side.COUNT_TOKENS_PATH or gemini.counts_tokens(path):
                    self._hold_parse(trial, hold, raw_body)
                local = side.answer(method, path, raw_body, self.model, self.provider.apis)
                if local is None:  # the Gemini API's model listing and countTokens
                    read = "GET" if head else method
                    found = gemini.local_answer(
                        read, path, raw_body, self.model, self.provider.apis
                    )
                    local = side.Local(200, found) if found is not None else None
                if local is not None:
                    await self._local(trial, conn, writer, method, path, local, head=head)
                    return
            self._hold_parse(trial, hold, raw_body)
            payload = check_call(
                method, path, api, raw_body, model=self.model, apis=self.provider.apis
            )
            payload = gemini.as_call(path, payload)
            assert api is not None
            trial.check_network(api, payload)
            trial.allowance.check()  # a spent budget is refused without waiting for a turn
            turn = await trial.allowance.turn()
        except Refused as refused:
            recorded = None
            if raw_body:
                # A body refused for the memory its parsing takes is recorded unparsed.
                memory = refused.status in (413, 503)
                recorded = capped_json(raw_body, parse=not memory)
            trial.recorder.refusal(
                method,
                target.split("?", 1)[0],
                refused.status,
                refused.reason,
                recorded,
                refused.outcome,
            )
            kind = "budget_exceeded" if refused.outcome == "budget" else "gateway_refused"
            if isinstance(refused, ToolRefused):
                body = error_body(api, refused.reason)
            else:
                body = http.error_body(api, kind, refused.reason)
            methods = side.allowed(target.split("?", 1)[0]) if refused.status == 405 else None
            extra = (("allow", ", ".join(methods)),) if methods else ()
            await http.send(
                conn, writer, refused.status, "application/json", body, head=head, extra=extra
            )
            return
        assert api is not None
        with turn, trial.allowance.reserved():  # no await since the budget check
            await self._forward(trial, path, api, payload, headers, conn, writer, hold)

    def _options(self, path: str) -> side.Local:
        """``OPTIONS path``: the methods it takes (204, no body).

        Raises:
            Refused: The gateway serves no such path (404).
        """
        local = side.options(path)
        if local is None:
            raise Refused(404, f"OPTIONS {path}: the gateway serves no such path")
        return local

    @staticmethod
    async def _local(
        trial: _Trial,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        local: side.Local,
        *,
        head: bool = False,
    ) -> None:
        """Send and record an answer the gateway made itself (no provider, no model call)."""
        trial.recorder.answered(method, path, local.body, local.status)
        await http.send(
            conn,
            writer,
            local.status,
            "application/json",
            local.encoded(),
            head=head,
            extra=local.headers,
        )

    @staticmethod
    def _hold_parse(trial: _Trial, hold: Hold, raw_body: bytes) -> None:
        """Hold what parsing ``raw_body`` will take, for as long as the request lives.

        Raises:
            Refused: More than the trial's whole memory cap (413), or than what it has
                left now (503).
        """
        cost = parse_cost(raw_body)
        if hold.take(cost):
            return
        cap = trial.meter.limits.max_memory_bytes
        if cost > cap:
            raise Refused(
                413,
                f"request body would take about {cost} bytes parsed, over the trial's "
                f"gateway memory cap ({cap} bytes, gateway.max_memory_mb)",
            )
        raise Refused(503, trial.meter.memory_reason("request body"))

    async def _forward(
        self,
        trial: _Trial,
        path: str,
        api: str,
        payload: dict[str, Any],
        headers: dict[str, str],
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        hold: Hold,
    ) -> None:
        call, line = self._prepare_call(trial, path, api, payload, headers)
        started = time.perf_counter()
        reply = await self._send_to_provider(trial, call, line, started)
        if isinstance(reply, str):
            body = http.error_body(api, "provider_error", reply)
            await http.send(conn, writer, 502, "application/json", body)
            return
        if reply.chunks is None:
            # Taken in already (within the headroom it was given): held while it is sent.
            hold.charge(len(reply.body or b""))
            body, _ = self._finish_whole(trial, line, api, reply, started)
            await http.send(
                conn, writer, reply.status, reply.content_type, body, extra=reply.headers
            )
            return
        if not hold.take(STREAM_BYTES):
            if reply.aclose is not None:
                await reply.aclose()
            reason = trial.meter.memory_reason("stream")
            trial.recorder.unanswered(line, reason, started)
            body = http.error_body(api, "gateway_refused", reason)
            await http.send(conn, writer, 503, "application/json", body)
            return
        copy = StreamCopy(api, request_chars(payload))
        with trial.allowance.live() as live:

            def over_budget() -> str | None:
                if copy.usage.final_seen:
                    return None  # generation is over: cutting saves nothing, the next call waits
                running = copy.usage.final(complete=False)
                if running is not None:
                    cost = self.model.prices.cost(
                        running.input_tokens, running.output_tokens, running.cached_tokens
                    )
                    live.update(running.reported, cost or 0.0)
                return trial.allowance.spent(calls_too=False)

            try:
                await http.relay_stream(conn, writer, reply, self._redact_bytes, copy, over_budget)
            finally:
                # Recorded before the client sees the end: once it has, the line is there.
                line["response"] = copy.response()
                line.update(reply.record)
                usage = copy.usage.final(complete=copy.failure is None)
                trial.recorder.finished(
                    line, reply.status, started, usage, copy.failure, copy.outcome
                )
                if reply.aclose is not None:
                    await reply.aclose()
        if copy.failure is None:
            await http.end_stream(conn, writer)
        # Else the response stays unfinished and the connection is closed (``serve`` cannot
        # start a next cycle): the client sees the stream break off, as it did upstream.

    # -- a call from a trusted in-process agent (loop thread) --------------------------------

    async def _in_process(
        self, trial: _Trial, path: str, payload: dict[str, Any]
    ) -> tuple[int, Any]:
        api = gemini.endpoint_api(path)
        try:
            if api is None or api not in self.provider.apis:
                raise Refused(404, f"POST {path} is not a model endpoint for {self.model.id}")
            if trial.revoked:
                raise Refused(401, "revoked token: the trial's model access has ended")
            trial.check_network(api, gemini.as_call(path, payload))
            trial.allowance.check()
            turn = await trial.allowance.turn()
        except Refused as refused:
            trial.recorder.refusal(
                "POST", path, refused.status, refused.reason, payload, refused.outcome
            )
            if refused.outcome == "budget":
                error = http.error_body(api, "budget_exceeded", refused.reason)
                return refused.status, json.loads(error)
            if isinstance(refused, ToolRefused):
                return refused.status, json.loads(error_body(api, refused.reason))
            return refused.status, {"error": {"message": refused.reason}}
        assert api is not None
        with turn, trial.allowance.reserved():  # no await since the budget check
            payload = {**gemini.as_call(path, payload), "stream": False}
            call, line = self._prepare_call(trial, path, api, payload, {})
            line["via"] = "in-process"
            started = time.perf_counter()
            reply = await self._send_to_provider(trial, call, line, started)
            if isinstance(reply, str):
                return 502, json.loads(http.error_body(api, "provider_error", reply))
            _, parsed = self._finish_whole(trial, line, api, reply, started)
            return reply.status, parsed

    # -- one provider call, for both ---------------------------------------------------------

    def _prepare_call(
        self,
        trial: _Trial,
        path: str,
        api: str,
        payload: dict[str, Any],
        headers: dict[str, str],
    ) -> tuple[ProviderCall, dict[str, Any]]:
        line = trial.recorder.line("POST", path)
        line["requested_model"] = payload.get("model")
        payload = {**payload, "model": self.model.upstream}
        stream = payload.get("stream") is True
        if stream and api == "openai-chat":
            # Usage arrives in a chat stream only when asked for; the budget and the record
            # need it, so it is asked for even when the agent said not to.
            options = payload.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            options["include_usage"] = True
            payload["stream_options"] = options
        line["stream"] = stream
        line["request"] = capped_value(payload)
        call = ProviderCall(
            trial_id=trial.access.trial_id,
            task_name=trial.task_name,
            api=api,
            path=path,
            body=payload,
            stream=stream,
            headers=headers,
            max_response_bytes=trial.meter.headroom(),
        )
        return call, line

    async def _send_to_provider(
        self, trial: _Trial, call: ProviderCall, line: dict[str, Any], started: float
    ) -> ProviderReply | str:
        """The provider's reply, or (recorded already) the redacted reason it gave none."""
        try:
            return await self.provider.send(call)
        except ProviderError as exc:
            message = self.redact(str(exc))
            trial.recorder.unanswered(line, message, started)
            return message

    def _finish_whole(
        self,
        trial: _Trial,
        line: dict[str, Any],
        api: str,
        reply: ProviderReply,
        started: float,
    ) -> tuple[bytes, Any]:
        """Redact and record a whole (non-streamed) reply; return its body and parsed copy."""
        body = self._redact_bytes(reply.body or b"")  # any other byte relayed as it came
        parsed = capped_json(body)
        line["response"] = parsed
        line.update(reply.record)
        usage = usage_from_body(api, json_or_none(body)) if reply.status < 400 else None
        trial.recorder.finished(line, reply.status, started, usage, reply.reason, reply.outcome)
        return body, parsed

    def _redact_bytes(self, data: bytes) -> bytes:
        """``data`` with every secret replaced; any other byte unchanged."""
        text = data.decode("utf-8", "surrogateescape")
        return self.redact(text).encode("utf-8", "surrogateescape")


__all__ = ["Budget", "Gateway", "TrialAccess", "TrialUsage"]
