"""Load from HTTP clients: requests per second and latency percentiles, from one process or
from several (importable, so that the processes of a pool can find it)."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import aiohttp


async def load(
    url: str, query: str, seconds: float, concurrency: int, *, users: Sequence[str] = ()
) -> tuple[float, float, float]:
    """Requests per second, p50 and p99 in ms, from `concurrency` clients for `seconds`. Each
    request's `$u` is the next of `users`, or by default an id of the client's own."""
    elapsed, latencies = await _load(url, query, seconds, concurrency, users=users)
    return _figures(elapsed, latencies)


def _figures(elapsed: float, latencies: list[float]) -> tuple[float, float, float]:
    latencies.sort()
    return (
        len(latencies) / elapsed,
        latencies[len(latencies) // 2],
        latencies[int(len(latencies) * 0.99)],
    )


def _load_in_process(
    url: str, query: str, seconds: float, concurrency: int, *, users: Sequence[str], tag: int
) -> tuple[float, list[float]]:
    return asyncio.run(_load(url, query, seconds, concurrency, users=users, tag=tag))


async def load_from_processes(
    url: str,
    query: str,
    seconds: float,
    concurrency: int,
    processes: int,
    *,
    users: Sequence[str] = (),
) -> tuple[float, float, float]:
    """As `load`, with the clients spread over `processes` processes, so that one Python
    process of clients does not limit servers that use every core."""
    share = concurrency // processes
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        loop = asyncio.get_running_loop()
        done = await asyncio.gather(
            *(
                loop.run_in_executor(
                    pool,
                    partial(_load_in_process, url, query, seconds, share, users=users, tag=i),
                )
                for i in range(processes)
            )
        )
    return _figures(max(e for e, _ in done), [x for _, latencies in done for x in latencies])


async def _load(
    url: str, query: str, seconds: float, concurrency: int, *, users: Sequence[str], tag: int = 0
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client(worker: int) -> None:
            n = 0
            while time.perf_counter() < deadline:
                n += 1
                user = users[(n * concurrency + worker + tag) % len(users)] if users else None
                payload = {
                    "query": query,
                    "variables": {"u": user or f"w{tag}-{worker}-{n % 5000}"},
                }
                start = time.perf_counter()
                async with session.post(url, json=payload) as response:
                    body = await response.json()
                    assert "errors" not in body, body
                latencies.append((time.perf_counter() - start) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(client(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies
