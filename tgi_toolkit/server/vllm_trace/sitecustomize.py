"""The forward trace of a vLLM the toolkit starts with TGI_TOOLKIT_FORWARD_TRACE set: a JSON line per engine step,
as the embedded engine writes one per forward (simulate.trace reads both), so that a profile of vLLM fits its
steps' own shapes and seconds and times its front end, as it does the engine's.

The launcher's vllm backend puts this folder first on the server's PYTHONPATH, so every Python process of that
vLLM imports this file at start-up (site's sitecustomize hook); the engine core's process then times each
`EngineCore.step`. Standard library only: it runs in vLLM's own interpreter, where tgi_toolkit is not installed.
Read against vLLM 0.32's v1/engine/core.py (EngineCore.step) and v1/core/sched/scheduler.py (schedule()
advances each request's num_computed_tokens by what it scheduled); an engine that pipelines steps
(step_with_batch_queue) is left untraced, with a line in its log.
"""

import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

TARGET = "vllm.v1.engine.core"
PATH = os.environ.get("TGI_TOOLKIT_FORWARD_TRACE")


def row_pairs(start: int, length: int) -> float:
    # the attention pairs a row computes: each new token against its cached context and the new ones before it
    # (tgi_toolkit.costs.features.row_pairs, which this interpreter cannot import)
    return length * start + length * (length + 1) / 2


def step_line(rows: list, seconds: float, first_tokens: int = 0) -> dict:
    """One step's line from its rows, (tokens computed before the step, tokens computed in it) per request, and
    how many of its requests it gives their first token (what a client's TTFT ends on)."""
    line = {"t": time.time(), "rpc": "step", "rows": len(rows), "tokens": 0, "context": 0, "pairs": 0.0,
            "prefilling": any(length > 1 for _, length in rows), "decode_rows": 0, "decode_context": 0,
            "seconds": seconds, "first_tokens": first_tokens}
    for start, length in rows:
        line["tokens"] += length
        line["context"] += start + length
        line["pairs"] += row_pairs(start, length)
        if length == 1 and start > 0:
            line["decode_rows"] += 1
            line["decode_context"] += start + 1
    return line


def planned(scheduler) -> dict:
    """The rows and first tokens of the scheduler's latest schedule(), which is wrapped to record them (once)."""
    plan = getattr(scheduler, "traced_plan", None)
    if plan is not None:
        return plan
    plan, schedule = {}, scheduler.schedule

    def traced_schedule(*args, **kwargs):
        output = schedule(*args, **kwargs)
        scheduled = [(scheduler.requests[rid], n) for rid, n in output.num_scheduled_tokens.items()
                     if rid in scheduler.requests]
        plan["rows"] = [(request.num_computed_tokens - n, n) for request, n in scheduled]
        # a prompt completed by a request with no output yet (a preempted one recomputes its prompt again)
        plan["first_tokens"] = sum(not request.output_token_ids and request.num_computed_tokens - n
                                   < request.num_prompt_tokens <= request.num_computed_tokens
                                   for request, n in scheduled)
        return output

    scheduler.schedule, scheduler.traced_plan = traced_schedule, plan
    return plan


def patch(module) -> None:
    core = module.EngineCore
    step = core.step
    out = open(PATH, "a", buffering=1)  # noqa: SIM115 (open for the process's life: a line per step)

    def traced_step(self):
        if self.batch_queue is not None:  # pipelined steps overlap: no step's seconds are its own
            return step(self)
        plan = planned(self.scheduler)
        plan.pop("rows", None)
        t0 = time.perf_counter()
        result = step(self)
        seconds = time.perf_counter() - t0
        if plan.get("rows"):
            out.write(json.dumps(step_line(plan["rows"], seconds, plan["first_tokens"])) + "\n")
        return result

    core.step = traced_step


class Finder(importlib.abc.MetaPathFinder):
    """Patches vllm.v1.engine.core when it is first imported, wherever that happens."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                patch(module)
            except Exception as exc:  # a vLLM whose EngineCore differs serves untraced; its log says why
                print(f"tgi_toolkit: vLLM's forward trace is off ({exc!r})", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


def chain() -> None:
    """Runs the sitecustomize this file shadows, if another folder on sys.path has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


if PATH:
    sys.meta_path.insert(0, Finder())
chain()
