"""What one `touch` costs the service when its values are literals in the document, as
clients written by hand send it: `python -m bench.literal_touch [--baseline main]`.

One API process on a private Redis (of this checkout, and of the baseline first if given).
Each case sends its touches one at a time, and the figure is the service's CPU per request
(utime + stime, read from /proc: the client's own work is not in it), the median of a few
rounds. The cases: a new literal every time (`sessionId: "s1"`, `"s2"`, ...), the same text
every time, and the same text with the values as variables.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics

import aiohttp

from bench.harness import checkout, service

REQUESTS = 400


def literal(i: int) -> dict[str, object]:
    return {"query": f'mutation {{ touch(userId: "u{i % 50}", sessionId: "s{i}") {{ online }} }}'}


def repeated(_: int) -> dict[str, object]:
    return {"query": 'mutation { touch(userId: "u1", sessionId: "s1") { online } }'}


def variables(i: int) -> dict[str, object]:
    query = "mutation($u: ID!, $s: ID) { touch(userId: $u, sessionId: $s) { online } }"
    return {"query": query, "variables": {"u": f"u{i % 50}", "s": f"s{i}"}}


CASES = {
    "touch, a new sessionId literal each time": literal,
    "touch, the same text each time": repeated,
    "touch, values as variables": variables,
}


async def measure(code: object, rounds: int) -> dict[str, float]:
    figures: dict[str, list[float]] = {name: [] for name in CASES}
    async with service(code, 1000) as svc, aiohttp.ClientSession() as http:  # type: ignore[arg-type]
        url = f"http://{svc.url}"
        for round_ in range(rounds):
            for name, body in CASES.items():
                first = (round_ + 1) * 100_000  # every round's literals new
                for i in range(20):  # warm: scripts loaded, caches filled
                    await _post(http, url, body(first - 1000 + i))
                before = svc.cpu_s()
                for i in range(REQUESTS):
                    await _post(http, url, body(first + i))
                figures[name].append((svc.cpu_s() - before) / REQUESTS * 1e6)
    return {name: statistics.median(times) for name, times in figures.items()}


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, object]) -> None:
    async with http.post(url, json=body) as response:
        answer = await response.json()
        assert "errors" not in answer, answer


async def main(options: argparse.Namespace) -> None:
    targets: list[tuple[str, str | None]] = [("this checkout", None)]
    if options.baseline:
        targets.insert(0, (options.baseline, options.baseline))
    results = {}
    for name, ref in targets:
        with checkout(ref) as code:
            results[name] = await measure(code, options.rounds)
    load = os.getloadavg()
    print(f"one API process, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    names = list(results)
    print("| service CPU per request, µs | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for case in CASES:
        print(f"| {case} | " + " | ".join(f"{results[n][case]:,.0f}" for n in names) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.literal_touch", description=__doc__)
    parser.add_argument("--baseline", default=None, help="a git commit to measure first, e.g. main")
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
