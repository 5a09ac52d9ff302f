"""Where a client finds its server and key: arguments, else STRATA_URL and STRATA_API_KEY."""

from __future__ import annotations

import httpx
import pytest
from conftest import Server
from helpers import eventually

import strata


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("STRATA_URL", raising=False)
    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    return monkeypatch


def test_the_environment_is_the_fallback(
    server: Server, no_env: pytest.MonkeyPatch, session_id: str
) -> None:
    no_env.setenv("STRATA_URL", server.url + "/")
    no_env.setenv("STRATA_API_KEY", server.api_key)

    with strata.Client() as client:
        client.append([strata.EventBuilder(session_id).user_prompt("from the environment")])
        state = eventually(lambda: client.state(session_id), lambda s: s.event_count == 1)

    assert client.url == server.url
    assert state.session_id == session_id


@pytest.mark.anyio
async def test_the_async_client_reads_the_environment_too(
    server: Server, no_env: pytest.MonkeyPatch
) -> None:
    no_env.setenv("STRATA_URL", server.url)
    no_env.setenv("STRATA_API_KEY", "sk_wrong")

    async with strata.AsyncClient() as client:
        with pytest.raises(strata.Unauthorized):
            await client.state("s")


def test_arguments_win_over_the_environment(server: Server, no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv("STRATA_URL", "http://127.0.0.1:1")
    no_env.setenv("STRATA_API_KEY", "sk_wrong")

    with strata.Client(server.url, server.api_key) as client, pytest.raises(strata.NotFound):
        client.state("py-no-such-session")


def test_neither_argument_nor_environment_is_a_clear_error(no_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(strata.ConfigurationError, match="STRATA_URL"):
        strata.Client()
    with pytest.raises(strata.ConfigurationError, match="STRATA_API_KEY"):
        strata.Client("http://127.0.0.1:7700")
    no_env.setenv("STRATA_URL", "http://127.0.0.1:7700")
    no_env.setenv("STRATA_API_KEY", "  ")
    with pytest.raises(strata.ConfigurationError, match="STRATA_API_KEY"):
        strata.AsyncClient()


@pytest.mark.parametrize(
    "url", ["127.0.0.1:7700", "ftp://host", "http://", "http://h/?x=1", "http://[::1"]
)
def test_a_malformed_url_is_refused(url: str) -> None:
    with pytest.raises(strata.ConfigurationError, match="invalid Strata URL"):
        strata.Client(url, "sk")


def test_a_path_prefix_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        assert request.headers["authorization"] == "Bearer sk_k"
        return httpx.Response(200, json={"sessions": [], "next_after": None})

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        client = strata.Client("https://proxy.test/strata/", "sk_k", http_client=http)
        assert list(client.sessions()) == []

    assert seen == ["https://proxy.test/strata/v1/sessions?limit=100"]


def test_the_key_is_never_in_the_repr() -> None:
    client = strata.Client("http://127.0.0.1:7700", "sk_secret")
    try:
        assert "sk_secret" not in repr(client)
        assert repr(client) == "Client(url='http://127.0.0.1:7700')"
    finally:
        client.close()


def test_timeouts_are_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts: list[dict[str, float | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"])
        return httpx.Response(200, json={"sessions": [], "next_after": None})

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        list(strata.Client("http://h.test", "sk", timeout=2.5, http_client=http).sessions())
        fine = httpx.Timeout(10.0, connect=1.0)
        list(strata.Client("http://h.test", "sk", timeout=fine, http_client=http).sessions())

    assert timeouts[0] == {"connect": 2.5, "read": 2.5, "write": 2.5, "pool": 2.5}
    assert timeouts[1] == {"connect": 1.0, "read": 10.0, "write": 10.0, "pool": 10.0}
