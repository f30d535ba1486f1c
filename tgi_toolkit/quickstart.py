"""`tgi-toolkit quickstart` (what `make quickstart` runs): the whole toolkit in one command.

1. Start the embedded engine on the default model, ask it a question over the OpenAI chat route
   with a streaming client, and print the answer with its time to first token.
2. A small sweep of the knob that matters most on TGI 3's default path (chunked prefill): the KV
   memory, `--cuda-memory-fraction`. The server is relaunched with KV memory for one request (as on a
   GPU with little memory left after the weights) and with all of it, each measured with the three
   benchmarks of the cookbook (prompt ingestion, text-generation-benchmark's batch experiment,
   parallel users), all in one results folder. With KV for one request the server runs the users'
   requests one at a time whatever `max_batch_size` says; with all of it, they share each forward.
3. The model card of that folder: Markdown and an HTML report with every figure, whose path is printed,
   and what the sweep showed, from its own numbers.

Sizes are chosen to finish in a few minutes on a 2-core CPU; `--question-only` stops after step 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_QUESTION = "What is the capital of France?"
# The quickstart's sweep: KV memory for one request of the concurrency workload (384 + 32 tokens; two
# would need 830) against all of it. max_batch_size is left alone: under TGI 3's default (chunking) it
# caps only the group admitted from idle, so it barely changes anything (docs/tgi-rules.md B5).
SWEEP_BASE = {"max_input_tokens": 512, "max_total_tokens": 640, "max_batch_prefill_tokens": 512}
SMALL_KV_TOKENS = 640  # the router's floor: one request of max_total_tokens
CONCURRENCY = {"users": [1, 2, 4], "prompt_tokens": 384, "max_new_tokens": 32, "requests": 8}
# 6 lengths x 2: a fit that stands on an idle 2-core machine (5 requests and 3 lengths are the minimum)
INGESTION_PROMPTS = [32, 96, 160, 256, 384, 512]


def sweep_grid(backend: str = "embedded") -> dict[str, list[float]]:
    """The swept values: the fraction whose KV holds SMALL_KV_TOKENS on this machine, and 1.0."""
    from tgi_toolkit.cookbook import memory_fraction_for

    return {"cuda_memory_fraction": [memory_fraction_for(SMALL_KV_TOKENS, SWEEP_BASE, backend), 1.0]}


@dataclass
class Answer:
    text: str
    ttft_s: float
    total_s: float
    tokens: int


def ask(url: str, question: str = DEFAULT_QUESTION, max_tokens: int = 64, *, api_key: str | None = None) -> Answer:
    """Stream a greedy chat answer from any OpenAI-compatible server; time its first token.

    Sent with the bench's own chat client (aiohttp), which talks to a local URL whatever
    HF_HUB_OFFLINE says: huggingface_hub's InferenceClient refuses every request in offline mode,
    127.0.0.1 included. Raises RuntimeError naming the server's error when the request fails.
    """
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from tgi_toolkit.bench.client import ChatClient, GenerationRequest, StreamRecord, now_ns

    async def one() -> tuple[StreamRecord, int]:
        async with ChatClient(url, api_key=api_key) as client:
            record = await client.stream(GenerationRequest(question, max_tokens))
            return record, now_ns()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        record, end = asyncio.run(one())
    else:  # a notebook's kernel runs a loop in this thread: the request gets a thread and a loop of its own
        with ThreadPoolExecutor(1) as pool:
            record, end = pool.submit(asyncio.run, one()).result()
    if record.error:
        raise RuntimeError(f"{url}: the chat request failed ({record.error}: {record.error_message})")
    first = record.token_ns[0] if record.token_ns else end
    return Answer((record.text or "").strip(), (first - record.sent_ns) / 1e9, (end - record.sent_ns) / 1e9,
                  len(record.token_ns))


def run(config: Any = None, backend: str = "embedded", question: str = DEFAULT_QUESTION,
        progress: bool = True) -> Answer:
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server import Server

    with Server(config or LauncherConfig(), backend=backend, startup_progress=progress) as server:
        print(f"server ready at {server.url} ({server.info().get('model_id')})", flush=True)
        return ask(server.url, question)


def quickstart_sweep(backend: str = "embedded") -> Any:
    """The sweep step 2 runs: `sweep_grid()` over SWEEP_BASE, with small ingestion, batch and
    concurrency workloads (a `tgi_toolkit.sweep.Sweep`, not yet run)."""
    from tgi_toolkit.sweep import Sweep, Workload

    return Sweep(base=SWEEP_BASE, grid=sweep_grid(backend), backend=backend, name="quickstart", workloads=[
        Workload("ingestion", prompt_tokens=INGESTION_PROMPTS, repeats=2),
        Workload("batch", batch_sizes=[1, 2, 4], sequence_length=64, decode_length=16, runs=2, warmups=1),
        Workload("concurrency", **CONCURRENCY),
    ])


def kv_finding(points: Any) -> str:
    """What the sweep showed, from its concurrency points: each configuration's throughput and largest
    batch at its most users, and whether KV memory for one request kept the server to one at a time."""
    from tgi_toolkit import schema as S

    conc = points[points[S.SCENARIO] == "concurrency"]
    if conc.empty:
        return "no concurrency point was measured"
    top = conc[conc[S.USERS] == conc[S.USERS].max()].sort_values(S.SERVER_BATCH_SIZE_MAX)
    def batch(value: float) -> str:  # NaN: no /metrics sample fell inside the point
        return f"at most {value:.0f} request(s) in a batch" if value == value else "its batch size not sampled"

    from tgi_toolkit.plots import short_labels

    name = short_labels(top[S.CONFIG_LABEL])  # what differs: cuda_memory_fraction, not ~90 characters each
    lines = [f"at {int(row[S.USERS])} users, {name[row[S.CONFIG_LABEL]]}: {row[S.OUTPUT_THROUGHPUT]:.0f} tokens/s, "
             f"{batch(row[S.SERVER_BATCH_SIZE_MAX])}" for _, row in top.iterrows()]
    if len(top) == 2 and top[S.SERVER_BATCH_SIZE_MAX].iloc[0] == 1 and top[S.SERVER_BATCH_SIZE_MAX].iloc[1] > 1:
        ratio = top[S.OUTPUT_THROUGHPUT].iloc[1] / top[S.OUTPUT_THROUGHPUT].iloc[0]
        lines.append("KV memory for one request ran the requests one at a time; all of it batched them, "
                     + throughput_lesson(ratio, bool(top[S.MACHINE_BUSY].fillna(False).any())))
    return "\n".join(lines)


TERMINAL_WIDTH = 119  # what the quickstart prints fits a 120-column terminal


def _wrapped(text: str, width: int = TERMINAL_WIDTH) -> str:
    """Each line of `text` wrapped at `width`, its continuation indented."""
    import textwrap

    return "\n".join(textwrap.fill(line, width, subsequent_indent="    ") for line in text.splitlines())


def card_text(metrics: Any, width: int = TERMINAL_WIDTH) -> str:
    """The model card's main metrics (`main_metrics`) for a terminal: one block per configuration, named by
    the settings that differ between them (`plots.short_labels`), one line per metric, wrapped at `width`
    (the card's table is 280 columns wide with a sweep's labels)."""
    import textwrap

    from tgi_toolkit.bench.main_metrics import CONFIG_LABEL
    from tgi_toolkit.plots import short_labels

    name = short_labels(metrics[CONFIG_LABEL])
    lines: list[str] = []
    for config, part in metrics.groupby(CONFIG_LABEL, sort=False):
        if len(name) > 1:
            lines.append(textwrap.fill(f"{name[config]}:", width))
        indent = "  " if len(name) > 1 else ""
        for row in part.itertuples():
            lines.append(textwrap.fill(f"{row.label}: {row.text}", width, initial_indent=indent,
                                       subsequent_indent=indent + "    "))
    return "\n".join(lines)


# The least ratio the lesson's sentence quotes as a gain: below it "1.0x the throughput" would read as none.
SHOWN_GAIN = 1.1


def throughput_lesson(ratio: float, busy: bool) -> str:
    """The end of the lesson's sentence, from the batched configuration's throughput over the one-at-a-time
    one (`ratio`): the gain when the run shows it; otherwise that this run's figures do not show it (a busy
    machine: other processes, not the server, made those timings), never the inverted lesson."""
    if ratio >= SHOWN_GAIN:
        return f"for {ratio:.1f}x the throughput" + (" (measured while the machine was busy)" if busy else "")
    why = ": the machine was busy (other processes took the CPU)" if busy else ""
    return f"though this run's throughput figures do not show the gain batching brings{why}; run it again on an " \
           f"idle machine to see it"


def benchmark_and_report(output: str | Path, backend: str = "embedded", figure_format: str = "auto",
                         progress: bool = True) -> tuple[Any, Path]:
    """Steps 2 and 3: run `quickstart_sweep()` into `output`/results and write the card to
    `output`/report/; returns (Results, the HTML report's path)."""
    from tgi_toolkit.report import report_paths, write_report

    output = Path(output)
    results = quickstart_sweep(backend).run(output / "results", progress=progress)
    write_report(results, output / "report", figure_format=figure_format)
    return results, report_paths(output / "report")[1]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quickstart", help="start the embedded engine, ask it a question, sweep two settings, write a model card",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--question", default=DEFAULT_QUESTION)
    parser.add_argument("--question-only", action="store_true", help="stop after the answer (step 1)")
    parser.add_argument("--output", metavar="DIR",
                        help="where results and report go (default: out/quickstart/<date-time>/)")
    parser.add_argument("--figures", choices=("auto", "png", "html"), default="auto",
                        help="the card's figure files: png (kaleido + Chromium), html, or auto (default)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.output and not args.question_only and (Path(args.output) / "results" / "sweep.json").exists():
        # checked before any server starts: a rerun into the same folder would show the earlier run's numbers
        print(f"error: --output: {args.output} already holds a quickstart's results; nothing is reused (allowed: a "
              f"new --output folder, or none: out/quickstart/<date-time>/)", file=sys.stderr)
        return 2
    print("1/3 starting the embedded engine and asking it a question", flush=True)
    answer = run(question=args.question, progress=args.progress)
    print(f"\nQ: {args.question}\nA: {answer.text}\n")
    print(f"time to first token: {answer.ttft_s * 1000:.0f} ms; {answer.tokens} chunks in {answer.total_s:.2f} s")
    if args.question_only:
        return 0
    from tgi_toolkit.cookbook import out_dir
    from tgi_toolkit.sweep import sweep_status

    output = Path(args.output) if args.output else out_dir("quickstart", time.strftime("%Y%m%d-%H%M%S"))
    small, whole = sweep_grid()["cuda_memory_fraction"]
    print("\n" + _wrapped(f"2/3 sweeping the KV memory: cuda_memory_fraction {small} (KV for {SMALL_KV_TOKENS} "
                          f"tokens, one request) and {whole} (all of it): the server relaunched per setting, each "
                          f"measured for prompt ingestion, batches of 1-4 and 1-4 parallel users (a few minutes on "
                          f"2 cores)"), flush=True)
    results, html_path = benchmark_and_report(output, figure_format=args.figures, progress=args.progress)
    status = sweep_status(output / "results")
    print(status[["label", "status"]].to_string(index=False))
    from tgi_toolkit.bench.main_metrics import main_metrics

    print("\n3/3 model card\n")
    print(card_text(main_metrics(results)))
    print("\nwhat the sweep showed:\n" + _wrapped(kv_finding(results.points)))
    print(f"\nresults: {output / 'results'} (tgi_toolkit.bench.load_results)")
    print(f"model card (Markdown): {html_path.with_suffix('.md')}")
    print(f"HTML report, open it in a browser: {html_path}")
    print(f"done in {time.perf_counter() - started:.0f} s")
    return 0 if (status["status"] == "complete").all() else 1
