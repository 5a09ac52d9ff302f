"""The server against its OpenAPI document, by schemathesis (PyPI).

Schemathesis reads `docs/openapi.yaml`, generates requests for every operation — valid ones and
ones the document says are invalid — sends them to a real `strata dev` and checks each answer
against the document: no server error, only documented status codes, content types, headers and
response schemas, invalid requests refused, valid ones accepted, and authentication required
where the document says so. The document and the server must agree; a mismatch fails here with
schemathesis's own report (and a `curl` line to reproduce each failure).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT, Server, running_server
from helpers import eventually

import strata

#: Cases per operation: enough to find what the document and the server disagree on, within a
#: minute or two on CI's machine.
MAX_EXAMPLES = 40
#: A fixed seed: a CI failure reproduces with the same cases.
SEED = 20261202
#: Seconds the whole run may take.
RUN_TIMEOUT = 540


@pytest.fixture(scope="module")
def contract_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own: schemathesis sends keyless and bad-key requests on purpose (its
    `ignored_auth` check), which the default throttle would answer with 429 for the rest of the
    minute, for this run and for every other test sharing the server."""
    settings = {"STRATA_HTTP_AUTH_FAILURES_PER_MINUTE": "1000000"}
    with running_server(tmp_path_factory.mktemp("contract"), settings) as server:
        yield server


def seed(server: Server) -> dict[str, str]:
    """A session with tool work, an offloaded output and a recorded assembly: the ids the run's
    path parameters take (schemathesis.toml), so that the cases reach assembly, compaction,
    why-not and artifacts rather than only their 404."""
    session = "contract-session"
    b = strata.EventBuilder(session)
    events = [
        b.session_started(
            provider="openai",
            model="gpt-4o",
            context_window_tokens=128_000,
            reserved_output_tokens=8_000,
        )
    ]
    for i in range(4):
        call = strata.tool_call("shell", {"cmd": f"make step-{i}"})
        events += [
            b.user_prompt(f"Do step {i}."),
            b.model_response(f"Doing step {i}.", tool_calls=[call]),
            b.tool_result(call.tool_call_id, f"step {i} line\n" * (1000 if i == 0 else 5)),
        ]
    with strata.Client(server.url, server.api_key) as client:
        outcomes = client.append(events)
        artifact = next(o.output_ref for o in outcomes if o.output_ref)
        eventually(lambda: client.state(session), lambda s: s.head_seq >= len(events))
        assembly = client.context(session).assembly.assembly_id
    assert artifact == "artifact:sha256:" + hashlib.sha256(b"step 0 line\n" * 1000).hexdigest()
    return {
        "STRATA_CONTRACT_SESSION": session,
        "STRATA_CONTRACT_ASSEMBLY": assembly,
        "STRATA_CONTRACT_ARTIFACT": artifact.removeprefix("artifact:sha256:"),
    }


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_the_server_answers_as_its_openapi_document_says(
    contract_server: Server, tmp_path: Path
) -> None:
    schemathesis = Path(sys.executable).with_name("st")
    command = [
        str(schemathesis),
        "--config-file",
        str(Path(__file__).with_name("schemathesis.toml")),
        "run",
        str(REPO_ROOT / "docs" / "openapi.yaml"),
        "--url",
        contract_server.url,
        "--header",
        f"Authorization: Bearer {contract_server.api_key}",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "2",
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
    ]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=tmp_path,
        env={**os.environ, **seed(contract_server)},
    )
    output = result.stdout + result.stderr
    # The summary goes to CI's log either way: it is what the closing notes quote.
    print(output[-4000:])
    assert result.returncode == 0, f"schemathesis found mismatches:\n{output[-30000:]}"
    assert " passed" in output, output[-4000:]
    # The seeded ids reached the routes: not every case of them was a 404.
    assert "Missing test data" not in output, output[-4000:]
