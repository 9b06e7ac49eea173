"""A local stand-in for Slack's servers: incoming webhooks and chat.postMessage, recording what arrives.

It answers as Slack documents (https://api.slack.com/messaging/webhooks#handling_errors,
https://api.slack.com/methods/chat.postMessage): a webhook post gets `ok` or an
error code such as `no_service`; the Web API answers JSON `{"ok": ...}` and
checks the bearer token. It can be told to fail the next requests (a 429 with
Retry-After, a 503) or be stopped and started again on the same port (an
outage: connection refused). Tests use it, and so can a person trying a
routing configuration: point SLACK_WEBHOOK_URL or SLACK_API_URL at it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

WEBHOOK_PREFIX = "/services/"
API_PREFIX = "/api/"


@dataclass
class Received:
    """One request that reached the receiver."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int
    channel: str = ""
    at: float = field(default_factory=time.time)


@dataclass
class Failure:
    status: int
    error: str
    retry_after: int | None = None


class SlackReceiver:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.webhooks: dict[str, str] = {}
        """Webhook path -> the channel Slack would post to; an unknown path is `no_service`."""
        self.received: list[Received] = []
        self._failures: deque[Failure] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- set-up -------------------------------------------------------------------

    def add_webhook(self, channel: str, secret: str) -> str:
        """A webhook URL for a channel, shaped like Slack's (/services/T…/B…/secret)."""
        path = f"{WEBHOOK_PREFIX}T0FLEETFIX/B0{len(self.webhooks):04d}/{secret}"
        self.webhooks[path] = channel
        return f"{self.url}{path}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.url}{API_PREFIX}"

    def fail_next(self, count: int, status: int, error: str = "", *, retry_after: int | None = None) -> None:
        """Answer the next `count` requests with this error (429 with Retry-After, 500, 503 …)."""
        with self._lock:
            self._failures.extend(Failure(status, error, retry_after) for _ in range(count))

    def start(self) -> SlackReceiver:
        server = ThreadingHTTPServer((self.host, self.port), _handler(self))
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="slack-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listening socket: senders now get connection refused."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> SlackReceiver:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- what arrived -------------------------------------------------------------

    def messages(self, channel: str | None = None) -> list[Received]:
        """Messages Slack would have posted (answered 200 ok), optionally of one channel."""
        with self._lock:
            return [r for r in self.received if r.status == 200 and channel in (None, r.channel)]

    def wait_for(self, count: int, timeout: float = 30, channel: str | None = None) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.messages(channel)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{len(self.messages(channel))} of {count} messages arrived in {timeout}s")

    # -- answering ----------------------------------------------------------------

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        body = _parse(headers.get("content-type", ""), raw)
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
        if path.startswith(API_PREFIX):
            status, extra, payload, channel = self._api(path, headers, body, failure)
            answer = json.dumps(payload).encode()
            extra = {"Content-Type": "application/json; charset=utf-8", **extra}
        else:
            status, extra, text, channel = self._webhook(path, body, failure)
            answer = text.encode()
            extra = {"Content-Type": "text/html", **extra}
        with self._lock:
            self.received.append(Received(path, body, headers, status, channel))
        return status, extra, answer

    def _webhook(
        self, path: str, body: dict[str, Any], failure: Failure | None
    ) -> tuple[int, dict[str, str], str, str]:
        channel = self.webhooks.get(path, "")
        if failure is not None:
            return failure.status, _retry_header(failure), failure.error or "error", channel
        if not channel:
            return 404, {}, "no_service", ""
        if not (body.get("text") or body.get("blocks")):
            return 400, {}, "invalid_payload", channel
        return 200, {}, "ok", channel

    def _api(
        self, path: str, headers: dict[str, str], body: dict[str, Any], failure: Failure | None
    ) -> tuple[int, dict[str, str], dict[str, Any], str]:
        channel = str(body.get("channel", ""))
        if failure is not None:
            error = failure.error or ("ratelimited" if failure.status == 429 else "service_unavailable")
            return failure.status, _retry_header(failure), {"ok": False, "error": error}, channel
        if path != f"{API_PREFIX}chat.postMessage":
            return 200, {}, {"ok": False, "error": "unknown_method"}, channel
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return 200, {}, {"ok": False, "error": "invalid_auth"}, channel
        if not channel:
            return 200, {}, {"ok": False, "error": "channel_not_found"}, channel
        if not (body.get("text") or body.get("blocks")):
            return 200, {}, {"ok": False, "error": "no_text"}, channel
        return 200, {}, {"ok": True, "channel": channel, "ts": f"{time.time():.6f}"}, channel


def _retry_header(failure: Failure) -> dict[str, str]:
    return {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}


def _parse(content_type: str, raw: bytes) -> dict[str, Any]:
    text = raw.decode("utf-8", errors="replace")
    if "application/x-www-form-urlencoded" in content_type:
        form: dict[str, Any] = dict(parse_qsl(text))
        if isinstance(form.get("blocks"), str):
            form["blocks"] = json.loads(form["blocks"])
        return form
    try:
        parsed = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _handler(receiver: SlackReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            headers = {key.lower(): value for key, value in self.headers.items()}
            status, extra, answer = receiver._answer(self.path, headers, raw)
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the paths hold webhook secrets: never log them

    return Handler


def main(argv: list[str] | None = None) -> None:
    """`python -m ticketing.notify.receiver`: print what fleetfix would post to Slack."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ticketing.notify.receiver", description=main.__doc__)
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--channel", action="append", default=[], help="a channel to make a webhook for (repeat)")
    parser.add_argument("--token", default=None, help="bot mode: the token chat.postMessage must carry")
    args = parser.parse_args(argv)
    receiver = SlackReceiver(port=args.port, token=args.token).start()
    for channel in args.channel or ["#fleet"]:
        print(f"{channel}: webhook {receiver.add_webhook(channel, channel.strip('#') + '-local')}")
    print(f"bot mode: SLACK_API_URL={receiver.api_url}")
    seen = 0
    try:
        while True:
            time.sleep(0.5)
            for message in receiver.received[seen:]:
                text = message.body.get("text", "")
                print(f"{time.strftime('%H:%M:%S')} {message.status} {message.channel or '?'}: {text}", flush=True)
            seen = len(receiver.received)
    except KeyboardInterrupt:
        receiver.stop()


if __name__ == "__main__":
    main()
