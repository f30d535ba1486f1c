"""How much load one benchmark client process sustains, and how much latency it adds itself.

    .venv/bin/python benchmarks/harness_capacity.py [--streams 500 1000] [--tokens 200] [--seconds 6]
        [--paced-streams 500] [--paced-rate 40] [--client-core 0] [--server-core 1] [--nice -15]

The server is a fake TGI written for this: a raw asyncio HTTP/1.1 server that answers
`/generate_stream` with TGI's events (same bytes as the real router, chunked, keep-alive) as fast
as it can, plus /info, /tokenize (whitespace tokens), /metrics and /health. It runs in a child
process pinned to its own core, so the client's core does the client's work only (a server in the
client's own process would take that core's time and the figures would measure both). The client
is the toolkit's own `TgiClient` with the run's event-loop lag monitor, in this process, pinned to
one core. Target (issue 5): 500 concurrent streams, 20,000 token events/s, added latency < 1 ms p50.

1. Flood: N streams at once, each asking for --tokens tokens again and again for --seconds; the
   server writes one event per stream in turn, as fast as its core allows. Token events per second
   counted at the client; CPU use of both processes says which side was the limit, and the client's
   CPU time per event gives the ceiling of one core (1 s / CPU per event) whatever else the machine
   was doing (on a shared machine the wall-clock rate also measures the neighbours).
2. Paced: --paced-streams streams, each sent --paced-rate tokens/s (phases spread), i.e. the target
   load. Added latency = the client's timestamp of an event - the server's monotonic timestamp just
   before it wrote the event (same clock: CLOCK_MONOTONIC is system-wide), so it includes the
   loopback hop; p50 and p99 over every event.
3. Whole harness: `run_concurrency` against the paced server (prompts built through /tokenize,
   telemetry, saving), to show the point it records and whether it flags itself `client_bound`.

On a machine shared with other work, `--nice -15` (root) gives both processes most of their core
back, which is what "one core" means here; without it the wall-clock figures measure the neighbours.
Linux schedules by autogroup (one per session) first, so the niceness is set on a new session's
autogroup, not only on the process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from typing import Any

import numpy as np
import psutil

from tgi_toolkit.bench.client import GenerationRequest, TgiClient
from tgi_toolkit.bench.telemetry import Telemetry, frozen_gc

INFO = {"model_id": "fake/streamer", "max_concurrent_requests": 100000, "max_input_tokens": 4000,
        "max_total_tokens": 100000, "max_best_of": 1, "router": "text-generation-router", "version": "fake"}


# -- the fake server (child process) ------------------------------------------------------------------
def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(index: int, last: bool, n: int, inputs: int) -> bytes:
    details = ({"finish_reason": "length", "generated_tokens": n, "seed": None, "input_length": inputs}
               if last else None)
    event = {"index": index, "token": {"id": 1234, "text": " token", "logprob": -0.25, "special": False},
             "generated_text": "text" if last else None, "details": details}
    return _chunk(b"data:" + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")


class Stream:
    __slots__ = ("conn", "key", "n", "sent", "inputs", "stamps", "due", "period")

    def __init__(self, conn: Conn, key: str, n: int, inputs: int, period: float) -> None:
        self.conn, self.key, self.n, self.inputs, self.sent, self.stamps = conn, key, n, inputs, 0, []
        self.period = period
        self.due = time.monotonic() + random.random() * period if period else 0.0


class Server:
    def __init__(self, rate: float) -> None:
        self.period = 1.0 / rate if rate > 0 else 0.0
        self.streams: list[Stream] = []
        self.stamps: dict[str, list[int]] = {}
        self.wake = asyncio.Event()
        self.token = _event(0, False, 0, 0)

    async def ticker(self) -> None:
        now_ns = time.monotonic_ns
        while True:
            if not self.streams:
                self.wake.clear()
                await self.wake.wait()
            now = time.monotonic()
            for s in list(self.streams):
                if s.conn.paused or (self.period and s.due > now):
                    continue
                last = s.sent == s.n - 1
                data = _event(s.sent, True, s.n, s.inputs) + b"0\r\n\r\n" if last else self.token
                s.stamps.append(now_ns())
                s.conn.transport.write(data)
                s.sent += 1
                s.due += s.period
                if last:
                    self.streams.remove(s)
                    self.stamps[s.key] = s.stamps
            await asyncio.sleep(0 if not self.period else 0.0002)


class Conn(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server, self.buf, self.paused = server, b"", False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(rest) < length:
                return
            body, self.buf = rest[:length], rest[length:]
            self.handle(method, path, body)

    def reply(self, body: bytes, content_type: str = "application/json") -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (content_type.encode(), len(body), body))

    def handle(self, method: str, path: str, body: bytes) -> None:
        if path == "/generate_stream":
            request = json.loads(body)
            inputs = request["inputs"]
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
            n = request["parameters"]["max_new_tokens"]
            self.server.streams.append(Stream(self, inputs, n, len(inputs.split()), self.server.period))
            self.server.wake.set()
        elif path == "/tokenize":
            text, out, start = json.loads(body)["inputs"], [], 0
            for word in text.split(" "):
                out.append({"id": len(out), "text": word, "start": start, "stop": start + len(word)})
                start += len(word) + 1
            self.reply(json.dumps(out).encode())
        elif path == "/info":
            self.reply(json.dumps(INFO).encode())
        elif path == "/stamps":
            self.reply(json.dumps(self.server.stamps).encode())
            self.server.stamps = {}
        elif path == "/metrics":
            self.reply(b"tgi_queue_size 0\ntgi_batch_current_size %d\n" % len(self.server.streams), "text/plain")
        else:  # /health
            self.reply(b"")


def prioritise(core: int | None, nice: int) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})
    if not nice:
        return
    with contextlib.suppress(OSError):
        os.setsid()  # an autogroup of our own (fails harmlessly for a session or group leader)
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as handle:
        handle.write(str(nice))
    os.nice(nice)


def serve(port: int, rate: float, core: int | None, nice: int) -> None:
    prioritise(core, nice)

    async def main() -> None:
        server = Server(rate)
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: Conn(server), "127.0.0.1", port, backlog=4096)
        ticker = asyncio.create_task(server.ticker())
        async with listener:
            await listener.serve_forever()
        ticker.cancel()

    asyncio.run(main())


# -- the client side (this process) -----------------------------------------------------------------------
def start_server(rate: float, core: int | None, nice: int) -> tuple[subprocess.Popen, str]:
    from tgi_toolkit.server import free_port

    port = free_port()
    argv = [sys.executable, __file__, "--serve", str(port), "--rate", str(rate), "--nice", str(nice)]
    if core is not None:
        argv += ["--core", str(core)]
    proc = subprocess.Popen(argv)
    import httpx

    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(url + "/health", timeout=0.5)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("fake server did not start")


async def load(url: str, streams: int, tokens: int, seconds: float | None) -> dict[str, Any]:
    """`streams` users, each streaming `tokens`-token answers (once, or again until `seconds`)."""
    with frozen_gc():  # as a run does
        return await _load(url, streams, tokens, seconds)


async def _load(url: str, streams: int, tokens: int, seconds: float | None) -> dict[str, Any]:
    client = TgiClient(url)
    client.open()
    telemetry = Telemetry(url, time.monotonic_ns(), session=client.session, interval=1.0, gpu=False)
    await telemetry.start()  # the lag monitor and scrapes, as in a real run
    records: dict[str, Any] = {}
    deadline = time.monotonic() + seconds if seconds else None
    cpu0, wall0 = time.process_time(), time.monotonic()

    async def user(u: int) -> None:
        k = 0
        while True:
            key = f"u{u} r{k}"
            records[key] = await client.stream(GenerationRequest(key, tokens))
            k += 1
            if deadline is None or time.monotonic() > deadline:
                return

    await asyncio.gather(*(user(u) for u in range(streams)))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    await telemetry.stop()
    await client.close()
    lags = [lag for _, lag in telemetry.lag]
    ok = [r for r in records.values() if r.ok]
    first = min(r.sent_ns for r in ok)
    last = max(r.token_ns[-1] for r in ok)
    events = sum(r.events for r in ok)
    return {"records": records, "errors": len(records) - len(ok), "events": events,
            "events_per_s": events / ((last - first) / 1e9), "client_cpu": cpu / wall,
            "cpu_us_per_event": cpu / events * 1e6,
            "lag_p99_ms": float(np.percentile(lags, 99)) if lags else float("nan")}


def added_latency(records: dict[str, Any], stamps: dict[str, list[int]]) -> np.ndarray:
    gaps = []
    for key, record in records.items():
        sent = stamps.get(key)
        if record.ok and sent and len(sent) == len(record.token_ns):
            gaps.extend(t - s for t, s in zip(record.token_ns, sent, strict=True))
    return np.asarray(gaps, dtype=float) / 1e6  # ms


def server_cpu(proc: subprocess.Popen) -> psutil.Process:
    p = psutil.Process(proc.pid)
    p.cpu_percent(None)
    return p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[500, 1000])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--paced-streams", type=int, default=500)
    parser.add_argument("--paced-rate", type=float, default=40.0, help="tokens/s per stream")
    parser.add_argument("--client-core", type=int, default=0)
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--nice", type=int, default=0, help="niceness for both processes (negative: root)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.rate, args.core, args.nice)

    import httpx

    cores = os.cpu_count() or 1
    client_core = args.client_core if args.client_core < cores else None
    server_core = args.server_core if args.server_core < cores and args.server_core != client_core else None
    prioritise(client_core, args.nice)
    print(f"client pinned to core {client_core}, fake server to core {server_core} "
          f"({cores} cores; load average {os.getloadavg()[0]:.2f}; nice {args.nice})")

    print("\n1. flood: the server writes as fast as its core allows")
    print(f"{'streams':>8} {'events/s':>10} {'errors':>7} {'client CPU':>11} {'server CPU':>11} {'loop lag p99':>13} "
          f"{'client CPU/event':>17} {'one-core ceiling':>17}")
    proc, url = start_server(0.0, server_core, args.nice)
    try:
        for n in args.streams:
            srv = server_cpu(proc)
            out = asyncio.run(load(url, n, args.tokens, args.seconds))
            print(f"{n:>8} {out['events_per_s']:>10.0f} {out['errors']:>7} {out['client_cpu']:>10.0%} "
                  f"{srv.cpu_percent(None) / 100:>10.0%} {out['lag_p99_ms']:>10.2f} ms "
                  f"{out['cpu_us_per_event']:>14.2f} us {1e6 / out['cpu_us_per_event']:>10,.0f} ev/s")
            httpx.get(url + "/stamps", timeout=30)
    finally:
        proc.terminate()
        proc.wait()

    n, rate = args.paced_streams, args.paced_rate
    tokens = int(rate * args.seconds)
    print(f"\n2. paced: {n} streams x {rate:g} tokens/s = {n * rate:,.0f} events/s offered, {tokens} tokens each")
    proc, url = start_server(rate, server_core, args.nice)
    try:
        srv = server_cpu(proc)
        out = asyncio.run(load(url, n, tokens, None))
        server_share = srv.cpu_percent(None) / 100
        stamps = httpx.get(url + "/stamps", timeout=60).json()
        lat = added_latency(out["records"], stamps)
        print(f"   events/s {out['events_per_s']:,.0f}, errors {out['errors']}, client CPU {out['client_cpu']:.0%} "
              f"({out['cpu_us_per_event']:.2f} us/event), "
              f"server CPU {server_share:.0%}, loop lag p99 {out['lag_p99_ms']:.2f} ms")
        print(f"   added latency over {lat.size:,} events: p50 {np.percentile(lat, 50):.3f} ms, "
              f"p90 {np.percentile(lat, 90):.3f} ms, p99 {np.percentile(lat, 99):.3f} ms, max {lat.max():.3f} ms")

        print(f"\n3. the whole harness: run_concurrency, {n} users, {tokens} tokens each, against the paced server")
        from tgi_toolkit import schema as S
        from tgi_toolkit.bench import run_concurrency

        started = time.monotonic()
        results = run_concurrency(url, users=[n], prompt_tokens=16, max_new_tokens=tokens, requests=n,
                                  progress=False)
        p = results.points.iloc[0]
        print(f"   {time.monotonic() - started:.1f} s in all; point: {p[S.REQUESTS]} requests, {p[S.ERRORS]} errors, "
              f"output {p[S.OUTPUT_THROUGHPUT]:,.0f} tokens/s, ITL p50 {p[S.stat_column('itl', 'p50')] * 1000:.2f} ms "
              f"(server pace {1000 / rate:.2f} ms), ITL p99 {p[S.stat_column('itl', 'p99')] * 1000:.2f} ms, "
              f"TTFT p50 {p[S.stat_column('ttft', 'p50')] * 1000:.1f} ms, "
              f"client lag p99 {p[S.CLIENT_LAG_P99_MS]:.2f} ms, client_bound={p[S.CLIENT_BOUND]}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
