"""The Agents SDK's own SQLiteSession beside StrataSession on the same run, side by side.

Starts a `strata dev` of its own (a scratch data directory, loopback), then plays the session
calls an Agents SDK run makes — per turn: `get_items()`, `add_items([user])`, three tool steps of
`add_items([reasoning, function_call, function_call_output])`, `add_items([assistant])` — on
both sessions, alternating turn by turn so that both see the same machine. Prints the latency of
each operation (p50 / p99 / max, milliseconds), a cold `get_items()` of the whole history by a
new session object (a restarted worker), and the `strata_context_filter` call (an assembly,
recorded).

    python clients/python/benchmarks/agents_session.py --strata target/release/strata --turns 40
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from agents import SQLiteSession

import strata
from strata.agents import StrataSession

OUTPUT = "".join(f"src/module_{i}.py:{i * 3}: def handler_{i}(request): ...\n" for i in range(40))


def turn_items(turn: int) -> list[list[dict[str, Any]]]:
    """The add_items batches of one turn, in order."""
    batches: list[list[dict[str, Any]]] = [
        [{"content": f"Task {turn}: fix test {turn}", "role": "user"}]
    ]
    for step in range(3):
        call_id = f"call_{turn}_{step}"
        batches.append(
            [
                {
                    "id": f"rs_{turn}_{step}",
                    "summary": [{"text": "Look first.", "type": "summary_text"}],
                    "type": "reasoning",
                },
                {
                    "arguments": json.dumps(
                        {"path": f"src/module_{step}.py"}, separators=(",", ":")
                    ),
                    "call_id": call_id,
                    "name": "read_file",
                    "type": "function_call",
                },
                {"call_id": call_id, "output": OUTPUT, "type": "function_call_output"},
            ]
        )
    batches.append(
        [
            {
                "id": f"msg_{turn}",
                "content": [
                    {"annotations": [], "text": f"Fixed test {turn}.", "type": "output_text"}
                ],
                "role": "assistant",
                "status": "completed",
                "type": "message",
            }
        ]
    )
    return batches


async def timed(samples: list[float], call: Callable[[], Awaitable[Any]]) -> Any:
    start = time.perf_counter()
    result = await call()
    samples.append((time.perf_counter() - start) * 1000)
    return result


async def play_turn(session: Any, turn: int, samples: dict[str, list[float]]) -> None:
    await timed(samples["get_items"], session.get_items)
    for batch in turn_items(turn):
        await timed(samples["add_items"], functools.partial(session.add_items, batch))


def start_server(binary: Path, root: Path, fsync: str) -> tuple[subprocess.Popen[bytes], str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")} | {
        "RUST_LOG": "warn"
    }
    process = subprocess.Popen(
        [
            binary,
            "dev",
            "--data-dir",
            root / "data",
            "--listen",
            f"127.0.0.1:{port}",
            "--fsync",
            fsync,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url, (root / "data" / "dev-api-key").read_text().strip()
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    sys.exit("strata dev did not become ready")


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):7.2f} {p99:7.2f} {ordered[-1]:7.2f}  (n={len(ordered)})"


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        process, url, key = start_server(args.strata, root, args.fsync)
        try:
            async with strata.AsyncClient(url, key) as client:
                sqlite = SQLiteSession("bench", db_path=root / "sdk.sqlite")
                ours = StrataSession("bench", client=client)
                times: dict[str, dict[str, list[float]]] = {
                    "SQLiteSession": defaultdict(list),
                    "StrataSession": defaultdict(list),
                }
                for turn in range(args.turns):
                    await play_turn(sqlite, turn, times["SQLiteSession"])
                    await play_turn(ours, turn, times["StrataSession"])
                    await timed(times["StrataSession"]["context (filter)"], lambda: ours.context())
                for _ in range(5):
                    await timed(
                        times["SQLiteSession"]["cold get_items"],
                        SQLiteSession("bench", db_path=root / "sdk.sqlite").get_items,
                    )
                    await timed(
                        times["StrataSession"]["cold get_items"],
                        StrataSession("bench", client=client).get_items,
                    )
                items = len(await ours.get_items())
                assert items == len(await sqlite.get_items()), "both sessions hold the same items"
        finally:
            process.terminate()
            process.wait()
    print(f"{args.turns} turns, {items} items, strata dev --fsync {args.fsync}; milliseconds")
    print(f"{'session':15} {'operation':18} {'p50':>7} {'p99':>7} {'max':>7}")
    for name, ops in times.items():
        for op, samples in ops.items():
            print(f"{name:15} {op:18} {summary(samples)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strata", type=Path, default=Path("target/release/strata"))
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--fsync", default="always", choices=["always", "never"])
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
