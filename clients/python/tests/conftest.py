"""Fixtures: a real `strata dev` started once for the whole run, and clients of it.

The binary is `STRATA_BIN` (relative paths from the repository root), by default the debug build
`target/debug/strata`. The server gets a temporary data directory, a free loopback port, its own
dev API key and a second tenant's key, and is stopped when the run ends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import strata

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_BINARY = "target/debug/strata"
#: Seconds `strata dev` may take to answer /readyz.
STARTUP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Server:
    """A running `strata dev`."""

    url: str
    api_key: str
    """The dev tenant's key."""
    other_api_key: str
    """A key of tenant `other`."""
    data_dir: Path
    log: Path


def _binary() -> Path:
    path = Path(os.environ.get("STRATA_BIN", DEFAULT_BINARY))
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"no strata binary at {path}: build it (`cargo build --bin strata`) or set STRATA_BIN",
            pytrace=False,
        )
    return path


def _server_env() -> dict[str, str]:
    """The environment minus Strata's own settings, so a developer's STRATA_DB or STRATA_LOG
    can never point the test server at real data."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env["RUST_LOG"] = "warn"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"strata dev exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"strata dev not ready within {STARTUP_TIMEOUT} s:\n{log.read_text()}")


def _start(
    binary: Path, data_dir: Path, log: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    # A port found free may be taken before the server binds it: try a few.
    for _ in range(3):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    binary,
                    "dev",
                    "--data-dir",
                    data_dir,
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--fsync",
                    "never",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            _wait_ready(process, url, log)
            return process, url
        except RuntimeError:
            _stop(process)
            if "Address already in use" not in log.read_text():
                raise
    raise RuntimeError("no free port for strata dev after 3 tries")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def running_server(root: Path, settings: dict[str, str] | None = None) -> Iterator[Server]:
    """A `strata dev` in `root` with `settings` (STRATA_* variables) on top of the defaults."""
    binary = _binary()
    data_dir = root / "data"
    # Made before `strata dev` starts: the embedded backends serve one process at a time.
    other_key = subprocess.run(
        [binary, "keys", "create", "--tenant", "other", "--data-dir", data_dir],
        check=True,
        capture_output=True,
        text=True,
        env=_server_env(),
    ).stdout.strip()
    log = root / "strata-dev.log"
    process, url = _start(binary, data_dir, log, {**_server_env(), **(settings or {})})
    try:
        api_key = (data_dir / "dev-api-key").read_text().strip()
        yield Server(url=url, api_key=api_key, other_api_key=other_key, data_dir=data_dir, log=log)
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("strata")) as s:
        yield s


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (the anyio plugin's marker is `pytest.mark.anyio`)."""
    return "asyncio"


@pytest.fixture
def client(server: Server) -> Iterator[strata.Client]:
    with strata.Client(server.url, server.api_key) as c:
        yield c


@pytest.fixture
def session_id() -> str:
    """A session id no other test uses."""
    return f"py-{uuid.uuid4().hex[:16]}"
