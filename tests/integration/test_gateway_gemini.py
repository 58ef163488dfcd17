"""The gateway's Gemini API end to end: faux rendering and the ``google`` upstream.

Clients reach the gateway through the trial's unix socket, as a trial's supervisor relays
them; the ``google`` upstream is a real HTTP server on 127.0.0.1 that speaks the Gemini API
(``x-goog-api-key``, ``:generateContent``, ``:streamGenerateContent?alt=sse``) and records
what it was sent.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.gateway import Budget, Gateway, make_provider
from harness.models.catalog import ModelSpec, load_catalog_file
from sandbox.credentials import CredentialStore

GEN = "/v1beta/models/gemini-2.5-pro:generateContent"
STREAM = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"


class GoogleUpstream:
    """A Gemini API server on loopback: scripted answers, every request kept."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.seen: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                upstream.seen.append(
                    {"path": self.path, "headers": dict(self.headers.items()), "body": body}
                )
                if self.headers.get("x-goog-api-key") != upstream.key:
                    self._send(401, "application/json", b'{"error":{"code":401}}')
                    return
                chunk = {
                    "candidates": [
                        {
                            "content": {"role": "model", "parts": [{"text": "hi from google"}]},
                            "finishReason": "STOP",
                            "index": 0,
                        }
                    ],
                    "usageMetadata": {
                        "promptTokenCount": 11,
                        "candidatesTokenCount": 5,
                        "thoughtsTokenCount": 2,
                        "totalTokenCount": 18,
                    },
                }
                if ":streamGenerateContent" in self.path:
                    first = {
                        "candidates": [{"content": {"role": "model", "parts": [{"text": "hi "}]}}]
                    }
                    data = b"".join(
                        f"data: {json.dumps(c)}\r\n\r\n".encode() for c in (first, chunk)
                    )
                    self._send(200, "text/event-stream", data)
                else:
                    self._send(200, "application/json", json.dumps(chunk).encode())

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def real_key() -> str:
    return "AIzaCANARY" + secrets.token_hex(12)


@pytest.fixture
def google(real_key: str) -> Iterator[GoogleUpstream]:
    upstream = GoogleUpstream(real_key)
    yield upstream
    upstream.close()


def open_gateway(
    tmp_path: Path, spec: ModelSpec, key: str | None = None
) -> tuple[Gateway, Any, Path]:
    store = CredentialStore()
    if key is not None:
        store.set("GEMINI_API_KEY", key)
    gw = Gateway(spec, make_provider(spec, store), redact=store.redact)
    gw.start()
    records = tmp_path / "model_calls.jsonl"
    access = gw.open_trial("t1", "demo", records)
    return gw, access, records


def client(access: Any, headers: dict[str, str] | None = None) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(access.socket_path)),
        base_url="http://127.0.0.1",
        headers=headers or {},
        timeout=15.0,
    )


def lines(records: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in records.read_text().splitlines()]


def faux(tmp_path: Path, responses: list[dict[str, Any]]) -> ModelSpec:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(responses))
    return ModelSpec(
        provider="faux", name="gem", upstream="gem", api="gemini", script=script, source="test"
    )


def test_faux_generate_content_renders_text_and_function_calls(tmp_path: Path) -> None:
    spec = faux(
        tmp_path,
        [
            {
                "text": "writing it",
                "tool_calls": [
                    {"name": "write_file", "arguments": {"file_path": "a.txt", "content": "x"}}
                ],
            },
            {"text": "done"},
        ],
    )
    gw, access, records = open_gateway(tmp_path, spec)
    try:
        with client(access, {"x-goog-api-key": access.token}) as c:
            body = {"contents": [{"role": "user", "parts": [{"text": "make a.txt"}]}]}
            first = c.post(GEN, json=body)
            assert first.status_code == 200, first.text
            candidate = first.json()["candidates"][0]
            parts = candidate["content"]["parts"]
            assert candidate["content"]["role"] == "model"
            assert parts[0] == {"text": "writing it"}
            assert parts[1]["functionCall"]["name"] == "write_file"
            assert parts[1]["functionCall"]["args"] == {"file_path": "a.txt", "content": "x"}
            assert candidate["finishReason"] == "STOP"
            meta = first.json()["usageMetadata"]
            assert (
                meta["totalTokenCount"] == meta["promptTokenCount"] + meta["candidatesTokenCount"]
            )
            # The token in ?key= works too.
            second = httpx.Client(
                transport=httpx.HTTPTransport(uds=str(access.socket_path)),
                base_url="http://127.0.0.1",
            ).post(f"{GEN}?key={access.token}", json=body)
            assert second.status_code == 200, second.text
            assert second.json()["candidates"][0]["content"]["parts"] == [{"text": "done"}]
    finally:
        gw.close()
    recorded = lines(records)
    assert [line["api"] for line in recorded] == ["gemini", "gemini"]
    assert recorded[0]["requested_model"] == "gemini-2.5-pro"
    assert recorded[0]["usage"]["input_tokens"] > 0
    assert recorded[0]["usage"]["output_tokens"] > 0
    # The token in the query is never recorded.
    assert access.token not in records.read_text()
    assert all(line["path"] == GEN for line in recorded)


def test_faux_streams_as_sse_and_as_a_json_array(tmp_path: Path) -> None:
    call = {"name": "run_shell_command", "arguments": {"command": "ls"}}
    spec = faux(tmp_path, [{"text": "look", "tool_calls": [call]}, {"text": "plain"}])
    gw, access, records = open_gateway(tmp_path, spec)
    try:
        with client(access, {"x-goog-api-key": access.token}) as c:
            body = {"contents": [{"role": "user", "parts": [{"text": "list"}]}]}
            sse = c.post(f"{STREAM}?alt=sse", json=body)
            assert sse.status_code == 200
            assert sse.headers["content-type"].startswith("text/event-stream")
            events = [
                json.loads(block.removeprefix("data: "))
                for block in sse.text.replace("\r\n", "\n").split("\n\n")
                if block.startswith("data: ")
            ]
            parts = [p for e in events for p in e["candidates"][0]["content"]["parts"]]
            assert {"text": "look"} in parts
            assert any(p.get("functionCall", {}).get("name") == "run_shell_command" for p in parts)
            assert events[-1]["candidates"][0]["finishReason"] == "STOP"
            assert "usageMetadata" in events[-1]
            array = c.post(STREAM, json=body)
            assert array.status_code == 200
            chunks = json.loads(array.text)
            assert isinstance(chunks, list)
            assert chunks[-1]["candidates"][0]["content"]["parts"] == [{"text": "plain"}]
    finally:
        gw.close()
    recorded = lines(records)
    assert [line["stream"] for line in recorded] == [True, True]
    assert recorded[0]["path"] == f"{STREAM}?alt=sse"
    # SSE usage is the reported one; the JSON array's is the gateway's estimate.
    assert recorded[0]["usage"].get("estimated") is None
    assert recorded[0]["usage"]["output_tokens"] > 0
    assert recorded[1]["usage"]["estimated"] is True


def test_a_scripted_error_is_a_gemini_error_of_its_status(tmp_path: Path) -> None:
    # Google's API names the status in the body too (a 429 RESOURCE_EXHAUSTED): a CLI's
    # message, and the cause read from it, follow the scripted status, not a fixed 400.
    spec = faux(
        tmp_path,
        [
            {"error": {"status": 429, "message": "Quota exceeded"}},
            {"error": {"status": 401, "message": "API key not valid"}},
        ],
    )
    gw, access, records = open_gateway(tmp_path, spec)
    try:
        with client(access, {"x-goog-api-key": access.token}) as c:
            body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
            limited, refused = c.post(GEN, json=body), c.post(GEN, json=body)
    finally:
        gw.close()
    assert limited.status_code == 429
    assert limited.json() == {
        "error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}
    }
    assert refused.status_code == 401
    assert refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert [line["outcome"] for line in lines(records)] == ["upstream_error"] * 2


READ = "GET, HEAD, OPTIONS"
CALL = "POST, OPTIONS"


def test_gemini_routes_answer_options_and_a_405_with_allow(tmp_path: Path) -> None:
    # As for every other route (tests/integration/test_gateway_cli_defects.py): OPTIONS
    # lists the methods a path takes, and a method it does not take is a 405 saying them.
    spec = faux(tmp_path, [{"text": "never used"}])
    gw, access, records = open_gateway(tmp_path, spec)
    count = "/v1beta/models/gem:countTokens"
    try:
        with client(access, {"x-goog-api-key": access.token}) as c:
            for path, allow in (
                ("/v1beta/models", READ),
                ("/v1beta/models/gem", READ),
                (GEN, CALL),
                (f"{STREAM}?alt=sse", CALL),
                (count, CALL),
            ):
                preflight = httpx.Client(
                    transport=httpx.HTTPTransport(uds=str(access.socket_path)),
                    base_url="http://127.0.0.1",
                ).options(path)  # a preflight carries no token
                assert (preflight.status_code, preflight.content) == (204, b""), path
                assert preflight.headers["allow"] == allow, path
            assert c.options("/v1beta/cachedContents").status_code == 404
            for method, path, allow in (
                ("POST", "/v1beta/models", READ),
                ("PUT", "/v1beta/models/gem", READ),
                ("DELETE", "/v1beta/models/gem", READ),
                ("GET", GEN, CALL),
                ("HEAD", f"{STREAM}?alt=sse", CALL),
                ("GET", count, CALL),
            ):
                refused = c.request(method, path, json={} if method in ("POST", "PUT") else None)
                assert refused.status_code == 405, (method, path, refused.text)
                assert refused.headers["allow"] == allow, (method, path)
                if method != "HEAD":
                    assert "refused" in refused.json()["error"]["message"], refused.text
    finally:
        gw.close()
    # None was a model call; each is recorded.
    recorded = [(line["method"], line["status"]) for line in lines(records)]
    assert recorded == [("OPTIONS", 204)] * 5 + [("OPTIONS", 404)] + [
        (m, 405) for m in ("POST", "PUT", "DELETE", "GET", "HEAD", "GET")
    ]


def test_count_tokens_and_models_are_answered_and_other_paths_refused(tmp_path: Path) -> None:
    spec = faux(tmp_path, [{"text": "never used"}])
    gw, access, records = open_gateway(tmp_path, spec)
    try:
        with client(access, {"x-goog-api-key": access.token}) as c:
            counted = c.post(
                "/v1beta/models/gemini-2.5-pro:countTokens",
                json={"contents": [{"parts": [{"text": "x" * 40}]}]},
            )
            assert counted.status_code == 200
            assert counted.json() == {"totalTokens": 10}
            listed = c.get("/v1beta/models")
            assert listed.json()["models"][0]["name"] == "models/gem"
            assert c.get("/v1beta/models/gem").json()["name"] == "models/gem"
            bad = c.post("/v1beta/models/gem:countTokens", content=b"[1")
            assert bad.status_code == 400
            embed = c.post("/v1beta/models/gem:embedContent", json={})
            assert embed.status_code == 404
            assert "not a model endpoint" in embed.json()["error"]["message"]
            unauthenticated = httpx.Client(
                transport=httpx.HTTPTransport(uds=str(access.socket_path)),
                base_url="http://127.0.0.1",
            ).post(GEN, json={"contents": []})
            assert unauthenticated.status_code == 401
            wrong = c.post(GEN, json={"contents": []}, headers={"x-goog-api-key": "hgw-nope"})
            assert wrong.status_code == 401
    finally:
        gw.close()
    from harness.gateway.faux import FauxProvider

    assert isinstance(gw.provider, FauxProvider)
    statuses = [line["status"] for line in lines(records)]
    assert statuses == [200, 200, 200, 400, 404, 401, 401]


def google_spec(tmp_path: Path, base_url: str) -> ModelSpec:
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        f'[models."google/gemini-test"]\nmodel = "gemini-upstream-v1"\n'
        f'base_url = "{base_url}"\ninput_price = 1.25\noutput_price = 10.0\n'
    )
    (spec,) = load_catalog_file(catalog)
    return spec


def test_google_upstream_gets_the_real_key_never_the_token(
    tmp_path: Path, google: GoogleUpstream, real_key: str
) -> None:
    spec = google_spec(tmp_path, google.base_url)
    assert spec.api == "gemini" and spec.api_key_env == "GEMINI_API_KEY"
    gw, access, records = open_gateway(tmp_path, spec, real_key)
    try:
        with client(access, {"x-goog-api-key": access.token}) as c:
            body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
            whole = c.post(GEN, json=body)
            assert whole.status_code == 200, whole.text
            assert whole.json()["candidates"][0]["content"]["parts"] == [{"text": "hi from google"}]
            sse = c.post(f"{STREAM}?alt=sse", json=body)
            assert sse.status_code == 200
            assert "hi from google" in sse.text
            array = c.post(STREAM, json=body)
            assert array.status_code == 200
            chunks = json.loads(array.text)
            assert [
                p["text"] for ch in chunks for p in ch["candidates"][0]["content"]["parts"]
            ] == [
                "hi ",
                "hi from google",
            ]
    finally:
        gw.close()
    assert [s["path"] for s in google.seen] == [
        "/v1beta/models/gemini-upstream-v1:generateContent",
        "/v1beta/models/gemini-upstream-v1:streamGenerateContent?alt=sse",
        "/v1beta/models/gemini-upstream-v1:streamGenerateContent?alt=sse",
    ]
    for seen in google.seen:
        headers = {k.lower(): v for k, v in seen["headers"].items()}
        assert headers["x-goog-api-key"] == real_key
        assert access.token not in json.dumps(seen)
        # The gateway's internal fields never go upstream.
        assert set(seen["body"]) == {"contents"}
    recorded = lines(records)
    assert [line["outcome"] for line in recorded] == ["ok", "ok", "ok"]
    assert recorded[0]["usage"] == {"input_tokens": 11, "output_tokens": 7, "cached_tokens": None}
    assert recorded[1]["usage"]["input_tokens"] == 11
    assert recorded[1]["usage"]["output_tokens"] == 7
    assert recorded[0]["cost_usd"] == pytest.approx((11 * 1.25 + 7 * 10.0) / 1e6)
    assert real_key not in records.read_text()
    usage = gw.usage("t1")
    assert usage is not None and usage.calls == 3


def test_the_budget_holds_for_gemini_calls(tmp_path: Path) -> None:
    spec = faux(tmp_path, [{"text": "one"}, {"text": "two"}])
    store = CredentialStore()
    gw = Gateway(spec, make_provider(spec, store), budget=Budget(max_calls=1))
    gw.start()
    records = tmp_path / "model_calls.jsonl"
    access = gw.open_trial("t1", "demo", records)
    try:
        with client(access, {"x-goog-api-key": access.token}) as c:
            body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
            assert c.post(f"{STREAM}?alt=sse", json=body).status_code == 200
            spent = c.post(GEN, json=body)
            assert spent.status_code == 429
            assert "budget spent" in spent.json()["error"]["message"]
    finally:
        gw.close()
    usage = gw.usage("t1")
    assert usage is not None and usage.calls == 1
    assert [line["outcome"] for line in lines(records)] == ["ok", "budget"]
