"""The ``faux`` provider: scripted responses, a per-trial queue consumed in order.

The script format is in docs/model-access.md §5. Responses are rendered in whichever API
the agent called (chat completions, responses, messages), streamed when asked. Usage is
estimated as ceil(chars/4); faux models have no cost. A turn with a ``when`` answers only
the requests it matches; any other request (a CLI's background call) gets the script's
canned ``background`` answer and leaves the queue as it was. An exhausted queue is
answered 410 (a client error CLIs do not retry), naming the trial.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import override

from harness.errors import UsageError
from harness.gateway import gemini
from harness.gateway.faux_match import When, parse_when
from harness.gateway.providers import Provider, ProviderCall, ProviderReply
from harness.gateway.usage import estimate_tokens, request_chars

NO_MORE_RESPONSES = "No more faux responses queued"
#: HTTP status of an exhausted script: 410 Gone, a client error that is permanent (for this
#: trial the script is used up). SDKs and CLIs do not retry it: they retry 408, 409, 429 and
#: 5xx (for minutes: Claude Code took 175 s on a 502), and Claude Code answers a 400
#: ``invalid_request_error`` by trying its feature fallbacks (six more calls).
EXHAUSTED_STATUS = 410
#: What a background call gets when the script names no ``background`` answer.
BACKGROUND_TEXT = "OK"


@dataclass(frozen=True)
class FauxToolCall:
    """One scripted tool call."""

    name: str
    arguments: dict[str, Any]
    id: str | None = None
    #: A freeform (Responses ``custom``) tool call's input, e.g. Codex's ``apply_patch``
    #: patch text; None for a function call with JSON ``arguments``.
    input: str | None = None

    @property
    def custom(self) -> bool:
        """Whether this is a freeform (``custom``) tool call."""
        return self.input is not None

    @property
    def chars(self) -> int:
        """Characters of the call as the model would write it (for the usage estimate)."""
        body = self.input if self.input is not None else json.dumps(self.arguments)
        return len(self.name) + len(body)


@dataclass(frozen=True)
class FauxResponse:
    """One scripted model answer."""

    text: str = ""
    tool_calls: tuple[FauxToolCall, ...] = ()
    stop_reason: str | None = None
    error_status: int | None = None
    error_message: str = ""
    #: Which requests this turn answers (None: the script's default, else any).
    when: When | None = None

    @property
    def stop(self) -> str:
        """The normalized stop reason (``tool_use`` with tool calls, else ``stop``)."""
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if self.tool_calls else "stop"


@dataclass(frozen=True)
class FauxScript:
    """A whole script: default responses and per-task ones."""

    path: Path
    responses: tuple[FauxResponse, ...] = ()
    tasks: Mapping[str, tuple[FauxResponse, ...]] = field(default_factory=dict)
    #: The ``when`` of every turn that has none of its own (None: they answer any request).
    when: When | None = None
    #: The answer of a request no turn is for (a background call).
    background: FauxResponse = FauxResponse(text=BACKGROUND_TEXT)

    def queue_for(self, task_name: str) -> deque[FauxResponse]:
        """A fresh queue for one trial of ``task_name``.

        An episode's agent asks for ``<task>@<role>`` (e.g. ``fix-bug@judge``): its own
        script if there is one, else the task's, else the default responses.
        """
        if task_name in self.tasks:
            return deque(self.tasks[task_name])
        base = task_name.rpartition("@")[0]
        return deque(self.tasks.get(base, self.responses) if base else self.responses)


def _parse_response(where: str, item: Any) -> FauxResponse:
    if not isinstance(item, dict):
        raise UsageError(f"{where}: a response must be an object")
    unknown = sorted(set(item) - {"text", "tool_calls", "stop_reason", "error", "when"})
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}")
    text = item.get("text", "")
    if not isinstance(text, str):
        raise UsageError(f"{where}.text must be a string")
    calls = []
    for n, call in enumerate(item.get("tool_calls") or []):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise UsageError(f"{where}.tool_calls[{n}] needs a string name")
        args = call.get("arguments", {})
        if not isinstance(args, dict):
            raise UsageError(f"{where}.tool_calls[{n}].arguments must be an object")
        freeform = call.get("input")
        if freeform is not None and not isinstance(freeform, str):
            raise UsageError(f"{where}.tool_calls[{n}].input must be a string (a custom call)")
        if freeform is not None and "arguments" in call:
            raise UsageError(
                f"{where}.tool_calls[{n}]: give arguments (a function call) or input "
                "(a custom call), not both"
            )
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise UsageError(f"{where}.tool_calls[{n}].id must be a string")
        calls.append(FauxToolCall(call["name"], args, call_id, freeform))
    stop = item.get("stop_reason")
    if stop is not None and not isinstance(stop, str):
        raise UsageError(f"{where}.stop_reason must be a string")
    error = item.get("error")
    status, message = None, ""
    if error is not None:
        if not isinstance(error, dict) or not isinstance(error.get("status"), int):
            raise UsageError(f"{where}.error needs an integer status")
        status, message = int(error["status"]), str(error.get("message", "faux error"))
        if not 400 <= status <= 599:
            raise UsageError(f"{where}.error.status must be an HTTP error status (400-599)")
    when = parse_when(f"{where}.when", item["when"]) if "when" in item else None
    return FauxResponse(text, tuple(calls), stop, status, message, when)


def _parse_list(path: Path, where: str, items: Any) -> tuple[FauxResponse, ...]:
    if not isinstance(items, list):
        raise UsageError(f"{path}: {where} must be a list of responses")
    return tuple(_parse_response(f"{path}: {where}[{n}]", item) for n, item in enumerate(items))


def load_faux_script(path: Path) -> FauxScript:
    """Read and validate a faux script.

    Raises:
        UsageError: unreadable or invalid, naming the file and the entry.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"faux script {path}: {exc}") from None
    if isinstance(data, list):
        return FauxScript(path, _parse_list(path, "responses", data))
    if not isinstance(data, dict):
        raise UsageError(f"faux script {path}: expected an object or a list of responses")
    unknown = sorted(set(data) - {"responses", "tasks", "when", "background"})
    if unknown:
        raise UsageError(f"faux script {path}: unknown key(s) {', '.join(unknown)}")
    tasks_raw = data.get("tasks", {})
    if not isinstance(tasks_raw, dict):
        raise UsageError(f"faux script {path}: tasks must be an object of task name → list")
    tasks = {name: _parse_list(path, f"tasks.{name}", v) for name, v in tasks_raw.items()}
    when = parse_when(f"faux script {path}: when", data["when"]) if "when" in data else None
    background = FauxResponse(text=BACKGROUND_TEXT)
    if "background" in data:
        background = _parse_response(f"{path}: background", data["background"])
        if background.when is not None:
            raise UsageError(f"{path}: background answers every unmatched call: no when")
    return FauxScript(
        path,
        _parse_list(path, "responses", data.get("responses", [])),
        tasks,
        when,
        background,
    )


@dataclass
class _Queue:
    """One trial's copy of the script: what is left, and how many turns were answered."""

    task_name: str
    turns: deque[FauxResponse]
    answered: int = 0
    background: int = 0


class FauxProvider(Provider):
    """Answers each trial from its own copy of the script's queue."""

    apis = frozenset({"openai-chat", "openai-responses", "anthropic-messages", gemini.GEMINI_API})

    def __init__(self, script: FauxScript, model: str) -> None:
        self.script = script
        self.model = model
        self._queues: dict[str, _Queue] = {}
        self._lock = threading.Lock()
        self._counter = 0

    @override
    def open_trial(self, trial_id: str, task_name: str) -> None:
        with self._lock:
            self._queues[trial_id] = _Queue(task_name, self.script.queue_for(task_name))

    @override
    def close_trial(self, trial_id: str) -> None:
        with self._lock:
            self._queues.pop(trial_id, None)

    def remaining(self, trial_id: str) -> int:
        """Responses left in a trial's queue."""
        with self._lock:
            queue = self._queues.get(trial_id)
            return 0 if queue is None else len(queue.turns)

    def _take(self, call: ProviderCall) -> tuple[FauxResponse | None, dict[str, Any], int]:
        """The turn answering ``call`` (None: the script is exhausted), its record note."""
        with self._lock:
            self._counter += 1
            seq = self._counter
            queue = self._queues.get(call.trial_id)
            if queue is None:
                queue = self._queues[call.trial_id] = _Queue(call.task_name, deque())
            head = queue.turns[0] if queue.turns else None
            when = self.script.when if head is None or head.when is None else head.when
            why_not = None if when is None else when.why_not(call.body)
            if why_not is not None:
                queue.background += 1
                note = {"background": True, "reason": f"no scripted turn for it: {why_not}"}
                return self.script.background, note, seq
            if head is None:
                return None, {"exhausted": True, "turns": queue.answered}, seq
            queue.turns.popleft()
            queue.answered += 1
            return head, {"turn": queue.answered}, seq

    @override
    async def send(self, call: ProviderCall) -> ProviderReply:
        response, note, seq = self._take(call)
        if response is None:
            message = (
                f"{NO_MORE_RESPONSES} for trial {call.trial_id} (task {call.task_name}): "
                f"its {note['turns']} scripted turn(s) of {self.script.path.name} are used up. "
                "Add turns to the script, or give background calls a 'when' to skip them."
            )
            return ProviderReply(
                EXHAUSTED_STATUS,
                "application/json",
                body=json.dumps(error_body(call.api, EXHAUSTED_STATUS, message)).encode(),
                headers=(("x-should-retry", "false"),),
                outcome="error",
                reason=message,
                record={"faux": note},
            )
        if response.error_status is not None:
            return ProviderReply(
                response.error_status,
                "application/json",
                body=json.dumps(
                    _error_body(call.api, response.error_status, response.error_message)
                ).encode(),
                record={"faux": note},
            )
        out_chars = len(response.text) + sum(c.chars for c in response.tool_calls)
        usage = (estimate_tokens(request_chars(call.body)), estimate_tokens(out_chars))
        rendered = _Rendered(call, response, seq, usage, self.model)
        if call.stream:
            kind = gemini.stream_type(call.api, call.path)
            return ProviderReply(200, kind, chunks=rendered.stream(), record={"faux": note})
        return ProviderReply(
            200,
            "application/json",
            body=json.dumps(rendered.body()).encode(),
            record={"faux": note},
        )


def _error_body(api: str, status: int, message: str) -> dict[str, Any]:
    if api == gemini.GEMINI_API:
        # Its code and status name the scripted status, as Google's API does (a 429's
        # RESOURCE_EXHAUSTED, a 401's UNAUTHENTICATED), not always a 400's.
        return gemini.error(status, message)
    if api == "anthropic-messages":
        return {"type": "error", "error": {"type": "faux_error", "message": message}}
    return {"error": {"message": message, "type": "faux_error"}}


def error_body(api: str, status: int, message: str) -> dict[str, Any]:
    """A client error (``invalid_request_error``) in the shape of ``api``'s errors."""
    if api == "anthropic-messages":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if api.startswith("gemini"):
        return {"error": {"code": status, "message": message, "status": "FAILED_PRECONDITION"}}
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "faux_script_exhausted",
        }
    }


_OPENAI_FINISH = {"stop": "stop", "tool_use": "tool_calls", "length": "length"}
_ANTHROPIC_STOP = {"stop": "end_turn", "tool_use": "tool_use", "length": "max_tokens"}


def _chat_tool_call(call_id: str, call: FauxToolCall) -> dict[str, Any]:
    """A chat completions tool call: ``function``, or ``custom`` with its freeform input."""
    if call.input is not None:
        return {"id": call_id, "type": "custom", "custom": {"name": call.name, "input": call.input}}
    function = {"name": call.name, "arguments": json.dumps(call.arguments)}
    return {"id": call_id, "type": "function", "function": function}


def _sse(payload: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload)}\n\n".encode()


class _Rendered:
    """One faux response in the shape of one API."""

    def __init__(
        self,
        call: ProviderCall,
        response: FauxResponse,
        seq: int,
        usage: tuple[int, int],
        model: str,
    ) -> None:
        self.call = call
        self.response = response
        self.seq = seq
        self.input_tokens, self.output_tokens = usage
        self.model = model
        self.created = int(time.time())
        self.call_ids = [c.id or f"call_faux_{seq}_{n}" for n, c in enumerate(response.tool_calls)]

    # -- whole bodies ------------------------------------------------------------------------

    def body(self) -> dict[str, Any]:
        api = self.call.api
        if api == gemini.GEMINI_API:
            usage = (self.input_tokens, self.output_tokens)
            return gemini_body(self.response, self.seq, usage, self.model)
        if api == "anthropic-messages":
            return self._anthropic()
        if api == "openai-responses":
            return self._responses()
        return self._chat()

    def _chat(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.response.text or None}
        if self.response.tool_calls:
            message["tool_calls"] = [
                _chat_tool_call(call_id, c)
                for call_id, c in zip(self.call_ids, self.response.tool_calls, strict=True)
            ]
        stop = self.response.stop
        return {
            "id": f"chatcmpl-faux-{self.seq}",
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": _OPENAI_FINISH.get(stop, stop)}
            ],
            "usage": {
                "prompt_tokens": self.input_tokens,
                "completion_tokens": self.output_tokens,
                "total_tokens": self.input_tokens + self.output_tokens,
            },
        }

    def _anthropic_content(self) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if self.response.text:
            content.append({"type": "text", "text": self.response.text})
        for call_id, c in zip(self.call_ids, self.response.tool_calls, strict=True):
            # Messages has no freeform tools: a custom call's text goes as its one argument.
            args = {"input": c.input} if c.input is not None else c.arguments
            content.append({"type": "tool_use", "id": call_id, "name": c.name, "input": args})
        return content

    def _anthropic(self) -> dict[str, Any]:
        stop = self.response.stop
        return {
            "id": f"msg_faux_{self.seq}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self._anthropic_content(),
            "stop_reason": _ANTHROPIC_STOP.get(stop, stop),
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
        }

    def _responses_output(self) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = []
        if self.response.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_faux_{self.seq}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": self.response.text, "annotations": []}
                    ],
                }
            )
        for n, (call_id, c) in enumerate(zip(self.call_ids, self.response.tool_calls, strict=True)):
            if c.input is not None:
                output.append(
                    {
                        "type": "custom_tool_call",
                        "id": f"ctc_faux_{self.seq}_{n}",
                        "call_id": call_id,
                        "name": c.name,
                        "input": c.input,
                        "status": "completed",
                    }
                )
                continue
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_faux_{self.seq}_{n}",
                    "call_id": call_id,
                    "name": c.name,
                    "arguments": json.dumps(c.arguments),
                    "status": "completed",
                }
            )
        return output

    def _responses(self, status: str | None = None) -> dict[str, Any]:
        stop = self.response.stop
        final = "incomplete" if stop == "length" else "completed"
        return {
            "id": f"resp_faux_{self.seq}",
            "object": "response",
            "created_at": self.created,
            "status": status or final,
            "model": self.model,
            "output": [] if status == "in_progress" else self._responses_output(),
            "incomplete_details": {"reason": "max_output_tokens"} if stop == "length" else None,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "total_tokens": self.input_tokens + self.output_tokens,
            },
        }

    # -- streams -----------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[bytes]:
        api = self.call.api
        if api == gemini.GEMINI_API:
            usage = (self.input_tokens, self.output_tokens)
            events = gemini_stream(self.response, self.seq, usage, self.model, self.call.path)
        elif api == "anthropic-messages":
            events = self._anthropic_events()
        elif api == "openai-responses":
            events = self._responses_events()
        else:
            events = self._chat_events()
        for chunk in events:
            yield chunk

    def _chat_events(self) -> list[bytes]:
        base = {
            "id": f"chatcmpl-faux-{self.seq}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return _sse({**base, "choices": [choice]})

        events = [chunk({"role": "assistant", "content": ""})]
        if self.response.text:
            events.append(chunk({"content": self.response.text}))
        for n, (call_id, c) in enumerate(zip(self.call_ids, self.response.tool_calls, strict=True)):
            events.append(chunk({"tool_calls": [{"index": n, **_chat_tool_call(call_id, c)}]}))
        stop = self.response.stop
        events.append(chunk({}, _OPENAI_FINISH.get(stop, stop)))
        options = self.call.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            usage = self._chat()["usage"]
            events.append(_sse({**base, "choices": [], "usage": usage}))
        events.append(b"data: [DONE]\n\n")
        return events

    def _anthropic_events(self) -> list[bytes]:
        start = {**self._anthropic(), "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": self.input_tokens, "output_tokens": 0}
        events = [_sse({"type": "message_start", "message": start}, "message_start")]
        for index, block in enumerate(self._anthropic_content()):
            if block["type"] == "text":
                opening: dict[str, Any] = {"type": "text", "text": ""}
                delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
            else:
                opening = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append(
                _sse(
                    {"type": "content_block_start", "index": index, "content_block": opening},
                    "content_block_start",
                )
            )
            events.append(
                _sse(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
            )
            events.append(
                _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            )
        stop = self.response.stop
        events.append(
            _sse(
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": _ANTHROPIC_STOP.get(stop, stop),
                        "stop_sequence": None,
                    },
                    "usage": {"output_tokens": self.output_tokens},
                },
                "message_delta",
            )
        )
        events.append(_sse({"type": "message_stop"}, "message_stop"))
        return events

    def _responses_events(self) -> list[bytes]:
        seq = 0

        def event(kind: str, payload: dict[str, Any]) -> bytes:
            nonlocal seq
            seq += 1
            return _sse({"type": kind, "sequence_number": seq, **payload}, kind)

        events = [event("response.created", {"response": self._responses("in_progress")})]
        for index, item in enumerate(self._responses_output()):
            opening = {**item, "input": ""} if item["type"] == "custom_tool_call" else item
            events.append(
                event("response.output_item.added", {"output_index": index, "item": opening})
            )
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append(
                    event(
                        "response.output_text.delta",
                        {"output_index": index, "content_index": 0, "delta": text},
                    )
                )
            elif item["type"] == "custom_tool_call":
                where = {"output_index": index, "item_id": item["id"]}
                events.append(
                    event(
                        "response.custom_tool_call_input.delta", {**where, "delta": item["input"]}
                    )
                )
                events.append(
                    event("response.custom_tool_call_input.done", {**where, "input": item["input"]})
                )
            events.append(event("response.output_item.done", {"output_index": index, "item": item}))
        events.append(event("response.completed", {"response": self._responses()}))
        return events


#: Our stop reasons as Gemini finish reasons (a tool call ends a turn with STOP there).
_GEMINI_FINISH = {"stop": "STOP", "tool_use": "STOP", "length": "MAX_TOKENS"}


def gemini_candidate(response: FauxResponse, *, final: bool = True) -> dict[str, Any]:
    """A scripted answer as one Gemini candidate: text and ``functionCall`` parts."""
    parts: list[dict[str, Any]] = []
    if response.text:
        parts.append({"text": response.text})
    for call in response.tool_calls:
        function: dict[str, Any] = {"name": call.name, "args": call.arguments}
        if call.id:
            function["id"] = call.id
        parts.append({"functionCall": function})
    if not parts:
        parts.append({"text": ""})
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if final:
        candidate["finishReason"] = _GEMINI_FINISH.get(response.stop, "STOP")
    return candidate


def gemini_body(
    response: FauxResponse, seq: int, usage: tuple[int, int], model: str
) -> dict[str, Any]:
    """A scripted answer as a whole ``GenerateContentResponse``."""
    return {
        "candidates": [gemini_candidate(response)],
        "usageMetadata": gemini.usage_metadata(*usage),
        "modelVersion": model,
        "responseId": f"faux-{seq}",
    }


def gemini_stream(
    response: FauxResponse, seq: int, usage: tuple[int, int], model: str, path: str
) -> list[bytes]:
    """A scripted answer as a stream: its text first, then its calls with the finish.

    Server-sent events for ``?alt=sse`` (in ``path``), else one JSON array.
    """
    base = {"modelVersion": model, "responseId": f"faux-{seq}"}
    chunks: list[dict[str, Any]] = []
    if response.text and response.tool_calls:
        text_only = type(response)(text=response.text)
        chunks.append({**base, "candidates": [gemini_candidate(text_only, final=False)]})
        rest = type(response)(tool_calls=response.tool_calls, stop_reason=response.stop_reason)
        last = gemini_candidate(rest)
    else:
        last = gemini_candidate(response)
    chunks.append({**base, "candidates": [last], "usageMetadata": gemini.usage_metadata(*usage)})
    return gemini.frame(chunks, sse=path.endswith("?alt=sse"))
