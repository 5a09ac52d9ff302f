"""When the clients re-send a request: scripted answers for the policy, and the real server for
lost answers, refused connections and throttling."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import httpx
import pytest
from conftest import Server
from helpers import coding_session, eventually

import strata
from strata import RetryPolicy

FAST = RetryPolicy(max_retries=2, initial_backoff=0.01, max_backoff=0.02)


class Script:
    """A transport answering with a fixed sequence of responses or transport errors."""

    def __init__(self, *steps: httpx.Response | type[httpx.TransportError]) -> None:
        self.steps: Iterator[httpx.Response | type[httpx.TransportError]] = iter(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = next(self.steps)
        if isinstance(step, httpx.Response):
            return step
        raise step("scripted failure", request=request)


def error(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"code": code, "message": f"scripted {code}"}}, headers=headers
    )


STATE = {
    "session_id": "s",
    "head_seq": 1,
    "event_count": 1,
    "branches": {},
    "open_tool_calls": [],
    "stats": {"tool_failures": 0, "orphan_results": 0},
}


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the sync client makes, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr("strata._client.time.sleep", waited.append)
    return waited


def scripted(script: Script, retry: RetryPolicy = RetryPolicy()) -> strata.Client:
    return strata.Client(
        "http://strata.test",
        "sk_test",
        retry=retry,
        http_client=httpx.Client(transport=httpx.MockTransport(script)),
    )


class TestPolicy:
    def test_backoff_doubles_up_to_its_cap_with_jitter(self) -> None:
        policy = RetryPolicy(initial_backoff=1.0, max_backoff=4.0)
        for retry, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (5, 4.0)]:
            waits = [policy.backoff(retry) for _ in range(200)]
            assert all(ceiling / 2 <= w <= ceiling for w in waits)
            assert len(set(waits)) > 1

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"max_retries": -1},
            {"initial_backoff": 2.0, "max_backoff": 1.0},
            {"max_retry_after": -1.0},
        ],
    )
    def test_nonsense_is_refused(self, kwargs: dict[str, float]) -> None:
        with pytest.raises(ValueError):
            RetryPolicy(**kwargs)  # type: ignore[arg-type]


class TestScripted:
    def test_503_honours_retry_after(self, sleeps: list[float]) -> None:
        script = Script(
            error(503, "unavailable", {"Retry-After": "2"}), httpx.Response(200, json=STATE)
        )

        state = scripted(script).state("s")

        assert state.head_seq == 1
        assert sleeps == [2.0]
        assert len(script.requests) == 2

    def test_503_without_hint_backs_off_then_gives_up(self, sleeps: list[float]) -> None:
        script = Script(*(error(503, "unavailable") for _ in range(3)))

        with pytest.raises(strata.Unavailable) as caught:
            scripted(
                script, RetryPolicy(max_retries=2, initial_backoff=1.0, max_backoff=8.0)
            ).state("s")

        assert caught.value.status == 503 and caught.value.message == "scripted unavailable"
        assert len(script.requests) == 3
        assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0

    def test_a_retry_after_too_long_is_raised_at_once(self, sleeps: list[float]) -> None:
        script = Script(error(429, "too_many_requests", {"Retry-After": "60"}))

        with pytest.raises(strata.TooManyRequests) as caught:
            scripted(script, RetryPolicy(max_retry_after=30)).state("s")

        assert caught.value.retry_after == 60.0
        assert sleeps == [] and len(script.requests) == 1

    @pytest.mark.parametrize(
        ("status", "code", "cls"),
        [
            (400, "bad_request", strata.BadRequest),
            (401, "unauthorized", strata.Unauthorized),
            (404, "not_found", strata.NotFound),
            (409, "conflict", strata.Conflict),
            (413, "payload_too_large", strata.PayloadTooLarge),
            (500, "internal", strata.InternalServerError),
            (507, "insufficient_storage", strata.InsufficientStorage),
            (408, "request_timeout", strata.RequestTimeout),
        ],
    )
    def test_refusals_are_not_retried(
        self, sleeps: list[float], status: int, code: str, cls: type[strata.APIError]
    ) -> None:
        script = Script(error(status, code))

        with pytest.raises(cls) as caught:
            scripted(script).state("s")

        assert (caught.value.status, caught.value.code) == (status, code)
        assert len(script.requests) == 1 and sleeps == []

    def test_an_answer_that_is_no_error_body_gets_its_status_class(
        self, sleeps: list[float]
    ) -> None:
        # What axum answers to a malformed query string, before Strata's handlers run.
        plain = httpx.Response(
            400, text="Failed to deserialize query string: after_seq: invalid digit"
        )

        with pytest.raises(strata.BadRequest) as caught:
            scripted(Script(plain)).state("s")

        assert caught.value.code == "http_400"
        assert "invalid digit" in caught.value.message

    def test_an_unreadable_success_is_a_response_error(self, sleeps: list[float]) -> None:
        with pytest.raises(strata.APIResponseError) as caught:
            scripted(Script(httpx.Response(200, text="<html>proxy</html>"))).state("s")

        assert caught.value.status == 200 and "unexpected answer" in caught.value.message

    def test_compact_is_not_resent_once_it_may_have_arrived(self, sleeps: list[float]) -> None:
        script = Script(httpx.ReadError)

        with pytest.raises(strata.APIConnectionError):
            scripted(script).compact("s")

        assert len(script.requests) == 1

    def test_compact_is_resent_when_it_never_left(self, sleeps: list[float]) -> None:
        script = Script(
            httpx.ConnectError, httpx.Response(200, json={"status": "nothing_to_compact"})
        )

        assert scripted(script).compact("s") is None
        assert len(script.requests) == 2

    def test_reads_are_resent_after_a_broken_connection(self, sleeps: list[float]) -> None:
        script = Script(httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadTimeout)

        with pytest.raises(strata.APITimeoutError) as caught:
            scripted(script).state("s")

        assert caught.value.code == "timeout" and caught.value.status is None
        assert len(script.requests) == 3 and len(sleeps) == 2

    def test_no_retries_when_disabled(self, sleeps: list[float]) -> None:
        script = Script(error(503, "unavailable"))

        with pytest.raises(strata.Unavailable):
            scripted(script, RetryPolicy(max_retries=0)).state("s")

        assert len(script.requests) == 1

    @pytest.mark.anyio
    async def test_the_async_client_retries_alike(self, monkeypatch: pytest.MonkeyPatch) -> None:
        waited: list[float] = []

        async def sleep(seconds: float) -> None:
            waited.append(seconds)

        monkeypatch.setattr(anyio, "sleep", sleep)
        script = Script(
            error(503, "unavailable", {"Retry-After": "1"}),
            httpx.ReadError,
            httpx.Response(200, json=STATE),
        )
        http = httpx.AsyncClient(transport=httpx.MockTransport(script))

        async with strata.AsyncClient("http://strata.test", "sk", http_client=http) as client:
            state = await client.state("s")

        await http.aclose()
        assert state.session_id == "s"
        assert waited[0] == 1.0 and len(waited) == 2 and len(script.requests) == 3


class LoseFirstAnswer(httpx.BaseTransport):
    """Delivers the first request to the server, then breaks the connection before its answer
    arrives: the case where a client cannot know whether its batch was appended."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        response = self.inner.handle_request(request)
        if self.sent == 1:
            response.read()
            response.close()
            raise httpx.ReadError("connection reset before the answer", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def test_a_batch_whose_answer_was_lost_is_appended_once(server: Server, session_id: str) -> None:
    events, _ = coding_session(session_id)
    transport = LoseFirstAnswer()

    with (
        httpx.Client(transport=transport) as http,
        strata.Client(server.url, server.api_key, retry=FAST, http_client=http) as client,
    ):
        outcomes = client.append(events)

        assert transport.sent == 2
        # The first delivery was appended; the re-send is recognised, not appended again.
        assert [o.status for o in outcomes] == ["duplicate"] * len(events)
        read = eventually(lambda: list(client.events(session_id)), lambda r: len(r) >= len(events))
        assert [e.event_id for e in read[: len(events)]] == [e.event_id for e in events]
        assert len({e.event_id for e in read}) == len(read)


def test_a_refused_connection_is_retried_then_raised(unused_port: int) -> None:
    attempts: list[httpx.Request] = []
    with httpx.Client(event_hooks={"request": [attempts.append]}) as http:
        c = strata.Client(f"http://127.0.0.1:{unused_port}", "sk", retry=FAST, http_client=http)
        with pytest.raises(strata.APIConnectionError) as caught:
            c.state("s")

    assert len(attempts) == 3
    assert caught.value.code == "connection" and str(unused_port) in caught.value.message
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def from_address(server: Server, key: str, address: str) -> Iterator[strata.Client]:
    """A client whose connections come from another loopback address: the server throttles
    failed authentications per address, so this one's failures touch no other test."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport) as http:
        yield strata.Client(
            server.url, key, retry=RetryPolicy(max_retries=2, max_retry_after=1.0), http_client=http
        )


def test_failed_authentications_are_throttled(server: Server, client: strata.Client) -> None:
    address = "127.0.0.2"
    with from_address(server, "sk_wrong", address) as wrong:
        unauthorized = 0
        with pytest.raises(strata.TooManyRequests) as caught:
            while unauthorized <= 20:
                try:
                    wrong.state("s")
                except strata.Unauthorized:
                    unauthorized += 1

    assert unauthorized == 20
    assert caught.value.code == "too_many_requests"
    # Longer than the client would wait (max_retry_after=1), so raised at once.
    assert caught.value.retry_after is not None and 1.0 < caught.value.retry_after <= 60.0
    # The throttle answers failures only: a valid key from the same address is served.
    with from_address(server, server.api_key, address) as right, pytest.raises(strata.NotFound):
        right.state("py-no-such-session")
    with from_address(server, "sk_wrong", address) as wrong, pytest.raises(strata.TooManyRequests):
        wrong.state("s")
    with pytest.raises(strata.NotFound):
        client.state("py-no-such-session")
