"""`tgi-toolkit quickstart` (what `make quickstart` runs): the whole toolkit in one command.

Start the embedded engine on the default model, ask it a question over the OpenAI chat route
with a streaming client, and print the answer with its time to first token.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

DEFAULT_QUESTION = "What is the capital of France?"


@dataclass
class Answer:
    text: str
    ttft_s: float
    total_s: float
    tokens: int


def ask(url: str, question: str = DEFAULT_QUESTION, max_tokens: int = 64) -> Answer:
    """Stream a greedy chat answer from any OpenAI-compatible server; time its first token."""
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=url)
    sent = time.perf_counter()
    first = None
    parts: list[str] = []
    for chunk in client.chat_completion(messages=[{"role": "user", "content": question}], max_tokens=max_tokens,
                                        temperature=0, stream=True):
        delta = chunk.choices[0].delta.content if chunk.choices else None
        if delta:
            first = first or time.perf_counter()
            parts.append(delta)
    end = time.perf_counter()
    return Answer("".join(parts).strip(), (first or end) - sent, end - sent, len(parts))


def run(config: Any = None, backend: str = "embedded", question: str = DEFAULT_QUESTION) -> Answer:
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.server import Server

    with Server(config or LauncherConfig(), backend=backend) as server:
        print(f"server ready at {server.url} ({server.info().get('model_id')})", flush=True)
        return ask(server.url, question)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quickstart", help="start the embedded engine and ask it a question")
    parser.add_argument("--question", default=DEFAULT_QUESTION)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    answer = run(question=args.question)
    print(f"\nQ: {args.question}\nA: {answer.text}\n")
    print(f"time to first token: {answer.ttft_s * 1000:.0f} ms; {answer.tokens} chunks in {answer.total_s:.2f} s")
    return 0
