"""benchmarks/gpu_probe.py --device cpu --tiny (issue 41, 4): every step the GPU run takes, on a toy random model,
in one process tree: kernel times, predictions from a card's datasheet and from those times, the random-weight
engine served over HTTP and benched, and the summary with its provenance."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_probe_runs_every_step_on_a_cpu(tmp_path):
    out = tmp_path / "probe"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_probe.py"), "--device", "cpu", "--tiny",
                           "--card", "H100", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["device_type"] == "cpu" and summary["provenance"]["framework"] == "tgi_toolkit"
    assert {"torch", "cuda", "driver", "date", "device"} <= set(summary["provenance"])
    for table in ("gemm_perf", "context_attention_perf", "generation_attention_perf", "mem_perf"):
        assert (out / "kernels" / f"{table}.parquet").is_file()
    # GEMMs profile-gpu timed twice (a CPU's tiny shapes often are) are in the summary as in the kernels' metadata
    retimed = yaml.safe_load((out / "kernels" / "collection_meta.yaml").read_text())["retimed"]
    assert summary["gemms_retimed"] == retimed
    assert ("GEMMs timed again" in (out / "summary.md").read_text()) == bool(retimed)
    # the engine served the random weights on the CPU, and bench measured the tiny plan's every point
    info = summary["measured"]["info"]
    assert info["random_weights"] is True and info["model_device_type"] == "cpu"
    assert [row["batch_size"] for row in summary["measured"]["batch"]] == [1, 4, 16]
    assert [row["users"] for row in summary["measured"]["concurrency"]] == [1, 8]
    assert all(row["prefill_latency_s"] > 0 for row in summary["measured"]["batch"])
    # the client's decode figure needs the tokens to reach it apart: beside two CPU burners the client slept while
    # the tiny model decoded batch 1's 8 tokens in a few ms, and read them in one go (every gap 0, the figure NaN).
    # The server's trace times those decode steps whatever the client saw.
    requests = pd.read_parquet(out / "measured" / "batch" / "requests.parquet")
    requests = requests[~requests["warmup"].astype(bool)]
    one = summary["measured"]["batch"][0]
    seen_apart = any(float(sum(g)) > 0 for g in requests[requests["batch_size"] == 1]["itl_s"])
    assert (one["decode_token_latency_s"] > 0) == seen_apart, one
    assert all(row["decode_token_latency_s"] > 0 or math.isnan(row["decode_token_latency_s"])
               for row in summary["measured"]["batch"])
    # both predictions ran before it, for the same points, and each point has its ratio
    assert summary["skipped"] == {} and summary["card_for_predictions"] == "H100"
    # and from the other card's kernel times in the checkout (the H200's probe), carried to the H100's datasheet
    assert summary["carried_from"] == {"folder": "h200-2026-11-29", "card": "NVIDIA H200"}
    assert "NVIDIA H200's kernel times carried: prefill_latency_s" in (out / "summary.md").read_text()
    for kind in ("roofline", "measured", "measured-host", "carried"):
        assert [row["batch_size"] for row in summary["predicted"][kind]["batch"]] == [1, 4, 16]
        assert [row["users"] for row in summary["ratios"][kind]["concurrency"]] == [1, 8]
    assert summary["weight_read"]["weight_bytes"] > 0 and "Decode step at batch 1" in (out / "summary.md").read_text()
    assert "Traceback" not in (out / "measured" / "engine.log").read_text()
    # the served engine watched its forwards for stalls (what it caught, if any, is in the summary)
    assert "A forward running past 100 ms has its thread's stack logged" in \
        (out / "measured" / "engine.log").read_text()
    assert isinstance(summary["measured"]["stalls"], list)
    # every forward the engine ran is traced (batch 1's runs and its warm-up run read back from it), and its
    # forwards were timed alone once the server had gone
    assert (out / "measured" / "forwards.jsonl").stat().st_size > 0
    assert summary["traced_batch"][0]["batch_size"] == 1
    assert summary["traced_batch"][0]["runs"] == summary["plan"]["runs"] + 1
    # a batch run whose prompts came late to the engine (a loaded machine) is no run of that batch: beside two CPU
    # burners every run of batch 16 was one, so only batch 1 (one request, never late) must have a traced run
    assert [row["batch_size"] for row in summary["traced_batch"]] == [1, 4, 16]
    assert all(row["decode_step_ms"] > 0 for row in summary["traced_batch"] if row["runs"])
    # each traced forward's seconds hold the runner's and the token choice's (engine.backend's split), and every
    # decode step chose tokens; the host's Python in the batch table's decode steps is what is left
    lines = [json.loads(line) for line in (out / "measured" / "forwards.jsonl").read_text().splitlines()]
    assert all(0 < f["model_s"] and 0 <= f["sample_s"] and f["model_s"] + f["sample_s"] <= f["seconds"]
               for f in lines)
    assert all(f["sample_s"] > 0 for f in lines if f["rpc"] == "decode")
    # and the CPU seconds of the compute thread in each, and of the front end's beside it once a request has streamed
    # (before the batch table: bench's warm-up)
    assert all(0 < f["cpu_s"] <= f["seconds"] for f in lines)
    assert all(f["frontend_cpu_s"] >= 0 for f in lines[1:])
    assert all(row["first_prompt_frontend_ms"] >= 0 for row in summary["traced_batch"] if row["runs"])
    assert all(row["decode_host_ms"] > 0 for row in summary["traced_batch"] if row["decode_step_ms"])
    assert summary["traced_batch"][0]["decode_step_ms"] > 0
    # each users point's forwards, read from the trace bytes its run added, after the batch table's
    spans = summary["measured"]["trace"]["users_bytes"]
    assert spans["1"][0] == summary["measured"]["trace"]["batch_bytes"][1] and spans["8"][0] == spans["1"][1]
    assert [row["users"] for row in summary["traced_users"]] == [1, 8]
    assert all(row["forwards"] > 1 and 0 < row["busy_share"] <= 1 for row in summary["traced_users"])
    assert all(0 <= row["gc_longest_ms"] <= row["gc_ms"] for row in summary["traced_users"])
    # the engine serves eagerly on a CPU (no --cuda-graphs): nothing compiles while serving
    assert all(row["compiles"] == 0 for row in summary["traced_users"])
    assert [row["forward"] for row in summary["engine_forwards"]] == [
        "prompt x1", "prompt x7 + decode row", "prompt x15 + decode row",
        "prompt x15 after cached tokens + decode row", "decode row", "decode row, graph", "decode row, graph, compiled",
        "decode x16, graph", "prompt x1, beside 50 us of Python every 1 ms",
        "prompt x1, beside 500 us of Python every 2 ms"]
    assert "## the one-prompt forward beside a thread taking the GIL" in (out / "summary.md").read_text()
    assert "- alone, decode row, graph, compiled: " in (out / "summary.md").read_text()
    # the largest batch's step alone beside the same step served, where the trace timed it (a loaded machine may
    # have left batch 16 no clean run: then the summary has no such line)
    assert ("Decode step at batch 16: " in (out / "summary.md").read_text()) == bool(
        summary["traced_batch"][-1].get("decode_step_ms"))
    assert all(row["wall_ms"] > 0 for row in summary["engine_forwards"])
    # every forward alone is priced; the rows beside a GIL contender are the forward alone's again, not priced
    assert all(("priced_ms" in row) != ("stretch_ms" in row) for row in summary["engine_forwards"])
    assert all(row["rule_calls"] > 0 for row in summary["engine_forwards"][:5])
    # a folder brought back is predicted again here, from its own kernel times, plan and flags
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_probe.py"), "--predict-again", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    redone = json.loads((out / "summary.json").read_text())
    assert "predicted_again" in redone and redone["measured"] == summary["measured"]
    assert [row["batch_size"] for row in redone["ratios"]["measured-host"]["batch"]] == [1, 4, 16]


def test_the_carried_prediction_reads_the_newest_probe_of_another_card(tmp_path):
    """GPU to GPU: the probe of an H100 predicts from the newest H200 probe's kernel times, not from an older H200
    one, an H100's own, or a CPU's; an explicit folder wins; none is found for a CPU or where no other card was
    probed."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    for name, device, date in (("h200-old", "NVIDIA H200", "2026-11-01"), ("h200-new", "NVIDIA H200", "2026-11-28"),
                               ("h100-newest", "NVIDIA H100 80GB HBM3", "2026-12-01"), ("cpu", "cpu", "2026-12-02")):
        (tmp_path / name / "kernels").mkdir(parents=True)
        pd.DataFrame([{"device": device, "m": 1, "n": 8, "k": 8, "latency": 0.01}]).to_parquet(
            tmp_path / name / "kernels" / "gemm_perf.parquet")
        (tmp_path / name / "summary.json").write_text(json.dumps({"provenance": {"device": device, "date": date}}))
    assert gpu_probe.carry_source(None, "NVIDIA H100 80GB HBM3", tmp_path) == tmp_path / "h200-new"
    assert gpu_probe.carry_source(None, "NVIDIA H200", tmp_path) == tmp_path / "h100-newest"
    assert gpu_probe.carry_source("elsewhere", "NVIDIA H200", tmp_path) == Path("elsewhere")
    assert gpu_probe.carry_source(None, None, tmp_path) is None
    assert gpu_probe.carry_source(None, "B200", tmp_path / "h200-new") is None


def test_on_a_card_the_mixed_and_cached_forwards_are_timed_again_with_cudnn_allowed():
    """Where the engine leaves cuDNN's SDPA out (new shapes, padded chunks), step 4 on a card times the first mixed
    forward and the cached one again with it allowed, side by side; a CPU has no cuDNN, so no second timing."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    plan = {"batch_sizes": [1, 8, 64]}
    assert [(label, cudnn) for label, *_, cudnn in gpu_probe.forward_shapes(plan, card=True)] == [
        ("prompt x1", False), ("prompt x7 + decode row", False), ("prompt x63 + decode row", False),
        ("prompt x63 after cached tokens + decode row", False), ("prompt x7 + decode row, cuDNN allowed", True),
        ("prompt x63 after cached tokens + decode row, cuDNN allowed", True), ("decode row", False)]
    assert [shape[:4] for shape in gpu_probe.forward_shapes(plan)] == [
        ("prompt x1", 1, False, False), ("prompt x7 + decode row", 7, True, False),
        ("prompt x63 + decode row", 63, True, False), ("prompt x63 after cached tokens + decode row", 63, True, True),
        ("decode row", 0, True, False)]


def test_the_engines_forwards_are_timed_alone_and_priced_as_the_batch_table_runs_them(tmp_path):
    """The probe's step 4 on a CPU: the batch table's two prompt forwards (the first prompt alone; B - 1 prompts
    beside its first decode row, new and after a few cached tokens) and a one-row decode step, each timed, counted
    and priced."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    from tgi_toolkit.costs.features import Shape
    from tgi_toolkit.costs.measured import gpu_cost_model

    (tmp_path / "config.json").write_text(json.dumps(gpu_probe.TINY))
    plan = {"batch_sizes": [1, 4], "sequence_length": 8}
    cost = gpu_cost_model("H100", str(tmp_path / "config.json"), cost_model="measured", server="tgi-3", engine=True)
    rows = gpu_probe.engine_forwards(tmp_path, "cpu", plan, cost, repeats=1)
    assert [(r["forward"], r["prompts"], r["decode_rows"], r["tokens"]) for r in rows] == [
        ("prompt x1", 1, 0, 8), ("prompt x3 + decode row", 3, 1, 25),
        ("prompt x3 after cached tokens + decode row", 3, 1, 19), ("decode row", 0, 1, 1),
        ("decode row, graph", 0, 1, 1), ("decode row, graph, compiled", 0, 1, 1), ("decode x4, graph", 0, 4, 4),
        ("prompt x1, beside 50 us of Python every 1 ms", 1, 0, 8),
        ("prompt x1, beside 500 us of Python every 2 ms", 1, 0, 8)]
    assert all(r["wall_ms"] > 0 for r in rows)
    # the one-row step as the server builds it (a CPU: no capture), with the eager layers, then compiled at batch 1,
    # then the largest batch's step with the eager layers, as the server runs every other size
    assert [r["compiled"] for r in rows[4:7]] == [[], [1], []] and "not_compiled" not in rows[5]
    # the one-prompt forward beside each contender, and the contender's CPU and slices during it
    assert all(r["alone_ms"] > 0 and r["other_cpu_ms"] >= 0 and r["slices"] >= 0 and r["unhindered_slices"] > 0
               for r in rows[7:])
    assert rows[4]["priced_ms"] == rows[5]["priced_ms"] == rows[3]["priced_ms"]  # the decode row's shape and price
    # 4 rows at position 8 (no decode_length in this plan: the prompt's end): 9 tokens of context and pairs each
    assert rows[6]["priced_ms"] == round(cost.seconds(Shape(4, 4, 36, 36, False, 4, 36)) * 1e3, 3)
    # the 3 prompts after 1, 2 and 3 cached tokens: 7, 6 and 5 computed, 7 + 28, 2 x 6 + 21 and 3 x 5 + 15 pairs
    # (98), beside the decode row's 9: 19 tokens, 33 of context, 107 pairs
    assert rows[2]["priced_ms"] == round(cost.seconds(Shape(4, 19, 33, 107.0, True, 1, 9)) * 1e3, 3)
    # where the server could not start with its layers compiled (or time is short), the compiled step is not built;
    # and new prompts of one length attend in one call: 8 more of them add fewer torch calls than one a prompt and
    # layer (the toy has 2 layers; one SDPA call each added 18 calls a prompt and layer)
    uncompiled = gpu_probe.engine_forwards(tmp_path, "cpu", {**plan, "batch_sizes": [1, 16]}, None, repeats=1,
                                           compiled=False)
    assert [r["forward"] for r in uncompiled[1:]] == ["prompt x7 + decode row", "prompt x15 + decode row",
                                                      "prompt x15 after cached tokens + decode row", "decode row",
                                                      "decode row, graph", "decode x16, graph",
                                                      "prompt x1, beside 50 us of Python every 1 ms",
                                                      "prompt x1, beside 500 us of Python every 2 ms"]
    assert uncompiled[2]["torch_calls"] - uncompiled[1]["torch_calls"] < 8 * 2
    # 3 prompts of 8 tokens (36 causal pairs each) beside a row decoding at position 8 (context 9): 33 tokens of
    # context, 3 x 36 + 9 = 117 pairs
    mixed = Shape(4, 25, 33, 117.0, True, 1, 9)
    assert rows[1]["priced_ms"] == round(cost.seconds(mixed) * 1e3, 3)
    # the decode row beside the 3 prompts makes calls of its own (its attention): more than for 1 prompt alone
    assert rows[1]["torch_calls"] > rows[0]["torch_calls"] > rows[3]["torch_calls"] > 0
    # the 15 prompts after cached tokens, of several lengths, padded into one call: within a few calls a layer of
    # the 15 new ones (one SDPA call each would add 15 x 18 a layer)
    assert abs(uncompiled[3]["torch_calls"] - uncompiled[2]["torch_calls"]) < 2 * 10
    assert "device_busy_ms" in rows[0] or "profiler_error" in rows[0]


def test_the_batch_tables_forwards_are_read_back_from_the_engines_trace(tmp_path):
    """The first prompt's forward, the other B - 1 prompts' and the decode steps of each batch size, from the trace
    lines bench's batch runs added; a run the engine split otherwise (here the other 3 prompts in two forwards) is
    left out rather than taken for another batch size, and so is one whose first prompt decoded alone until the
    others joined (not a run of batch 1). Each line's time is the one before it plus the engine's gap (1 ms, 2 ms
    before a 4-row decode step) and its own seconds."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    clock = [100.0]

    def line(rpc: str, rows: int, decode_rows: int, seconds: float, frontend: float | None = 0.0) -> str:
        clock[0] += (0.002 if rpc == "decode" and rows == 4 else 0.001) + seconds
        return json.dumps({"t": clock[0], "rpc": rpc, "rows": rows, "tokens": 8 * rows, "context": 8 * rows,
                           "pairs": 36.0 * rows, "prefilling": rpc == "prefill", "decode_rows": decode_rows,
                           "decode_context": 9 * decode_rows, "seconds": seconds,
                           # half of it in the runner and 1 ms choosing tokens: the host's Python is the rest
                           "model_s": seconds / 2, "sample_s": 0.001,
                           # the compute thread on its core a quarter of it; the front end's seconds as given
                           "cpu_s": seconds / 4,
                           "frontend_cpu_s": 0.0005 + 0.001 * decode_rows if frontend == 0.0 else frontend}) + "\n"

    before = line("prefill", 1, 0, 9.0) + line("decode", 1, 0, 9.0)  # another scenario's, before the batch runs
    # the first forward's front end is unknown (no request had streamed yet)
    runs = (line("prefill", 1, 0, 0.010, None) + line("decode", 1, 0, 0.005) + line("decode", 1, 0, 0.007)
            + line("prefill", 1, 0, 0.012) + line("decode", 1, 0, 0.006)
            + line("prefill", 1, 0, 0.020) + line("prefill", 4, 1, 0.050) + line("decode", 4, 0, 0.008)
            + line("decode", 4, 0, 0.008)
            + line("prefill", 1, 0, 0.030) + line("prefill", 2, 1, 0.040) + line("prefill", 4, 3, 0.045)
            + line("decode", 4, 0, 0.009)
            # a batch-4 run on a busy machine: its first prompt decoded alone twice before the other 3 joined
            + line("prefill", 1, 0, 0.070) + line("decode", 1, 0, 0.080) + line("decode", 1, 0, 0.090)
            + line("prefill", 3, 1, 0.100) + line("decode", 4, 0, 0.011)
            # later still (seen beside two CPU burners): its first prompt decoded alone to its end, then the other 3
            + line("prefill", 1, 0, 0.060) + line("decode", 1, 0, 0.070) + line("decode", 1, 0, 0.075)
            + line("prefill", 3, 0, 0.090) + line("decode", 3, 0, 0.012))
    trace = tmp_path / "forwards.jsonl"
    trace.write_text(before + runs)
    start = len(before.encode())
    rows = gpu_probe.traced_batch(trace, [start, start + len(runs.encode())], [1, 4], runs=1)
    # batch 1 (a warm-up and 1 run: its 2 prompts are the trace's first): first forwards 10 and 12 ms (median 11),
    # decode steps 5, 7 and 6 ms (median 6); batch 4: the one run whose other 3 prompts came in one forward: 20, 50
    # and 8 ms; the late runs count for neither. The gaps before the decode steps: 1 ms at batch 1, 2 at batch 4.
    # The host's Python in those steps: 5/2 - 1, 7/2 - 1, 6/2 - 1 = 1.5, 2.5, 2 ms (median 2); 8/2 - 1 = 3 ms.
    # The compute thread's CPU in the prompt forwards: 10/4 and 12/4 (median 2.75); 20/4 = 5 and 50/4 = 12.5. The
    # front end's beside them: batch 1's known one 0.5 ms; batch 4's 0.5 and 0.5 + 1 (one row decoding) = 1.5
    assert rows == [
        {"batch_size": 1, "runs": 2, "first_prompt_ms": 11.0, "other_prompts_ms": None, "decode_step_ms": 6.0,
         "decode_gap_ms": 1.0, "decode_host_ms": 2.0, "first_prompt_cpu_ms": 2.75, "first_prompt_frontend_ms": 0.5,
         "other_prompts_cpu_ms": None, "other_prompts_frontend_ms": None},
        {"batch_size": 4, "runs": 1, "first_prompt_ms": 20.0, "other_prompts_ms": 50.0, "decode_step_ms": 8.0,
         "decode_gap_ms": 2.0, "decode_host_ms": 3.0, "first_prompt_cpu_ms": 5.0, "first_prompt_frontend_ms": 0.5,
         "other_prompts_cpu_ms": 12.5, "other_prompts_frontend_ms": 1.5}]


def test_the_stall_watchs_lines_are_read_back_from_the_engines_log():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    log = """2026-11-28 08:16:05,254 INFO tgi_toolkit.engine: Connected: serving on http://127.0.0.1:50841
2026-11-28 08:16:44,431 WARNING tgi_toolkit.engine: A forward (prefill of 10 rows, 518 tokens) has run 100 ms; \
its thread is in: runner.py:281 _layers <- runner.py:256 forward
2026-11-28 08:16:44,532 WARNING tgi_toolkit.engine: A forward (prefill of 10 rows, 518 tokens) has run 201 ms; \
its thread is in: backend.py:166 _hold <- backend.py:228 _advance
2026-11-28 08:16:45,000 WARNING tgi_toolkit.engine: A graph compiled while serving (not a stall line)
"""
    assert gpu_probe.stall_lines(log) == [
        {"at": "2026-11-28 08:16:44,431", "forward": "prefill of 10 rows, 518 tokens", "ran_ms": 100,
         "where": "runner.py:281 _layers <- runner.py:256 forward"},
        {"at": "2026-11-28 08:16:44,532", "forward": "prefill of 10 rows, 518 tokens", "ran_ms": 201,
         "where": "backend.py:166 _hold <- backend.py:228 _advance"}]
    assert len(gpu_probe.stall_lines(log, most=1)) == 1


def test_a_stall_the_engine_logs_is_read_back_by_the_probe(caplog):
    """The watch's own line, in the engine's log format, parses: the probe's pattern follows the engine's words."""
    import logging
    import time

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    from tgi_toolkit.engine.serve import LOG_FORMAT
    from tgi_toolkit.engine.watchdog import StallWatch

    watch = StallWatch(0.05)
    with caplog.at_level("WARNING", logger="tgi_toolkit.engine"):
        watch.begin("prefill of 3 rows, 300 tokens")
        time.sleep(0.3)
        watch.end()
    watch.close()
    text = "\n".join(logging.Formatter(LOG_FORMAT).format(record) for record in caplog.records)
    parsed = gpu_probe.stall_lines(text)
    assert parsed and len(parsed) == len(caplog.records)
    assert all(line["forward"] == "prefill of 3 rows, 300 tokens" and line["ran_ms"] >= 50
               and " <- " in line["where"] for line in parsed)


def test_the_users_forwards_are_read_back_from_the_engines_trace(tmp_path):
    """Per users point, from the trace bytes its run added: the forwards, the engine's busy share of their span, the
    slowest forward and the longest gap between two, with what ran."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    def line(end: float, seconds: float, rpc: str, rows: int, tokens: int, gc_s: float | None = None,
             compiles: int = 0, model_s: float = 0.0, sample_s: float = 0.0, cpu: tuple[float, float] | None = None
             ) -> str:
        collected = {} if gc_s is None else {"gc_s": gc_s, "compiles": compiles, "model_s": model_s,
                                             "sample_s": sample_s}
        if cpu is not None:  # the compute thread's CPU seconds, the front end's
            collected.update(cpu_s=cpu[0], frontend_cpu_s=cpu[1])
        return json.dumps({"t": end, "seconds": seconds, "rpc": rpc, "rows": rows, "tokens": tokens,
                           **collected}) + "\n"

    # 1 user: a prompt 10.00-10.02, decodes 10.03-10.04 and 10.04-10.05, no collector's time traced (an older
    # engine); 8 users: a prompt of 8 rows 11.00-11.10 (70 ms in the runner, 10 choosing tokens), a 0.5 s wait (0.4 s
    # of it a pass of the collector), then a prompt of 1 row beside 7 decoding (11.60-11.65, a graph compiled in it)
    # and a decode (11.651-11.661, 1 ms of passes)
    one = line(10.02, 0.02, "prefill", 1, 256) + line(10.04, 0.01, "decode", 1, 1) + \
        line(10.05, 0.01, "decode", 1, 1)
    eight = line(11.10, 0.10, "prefill", 8, 2048, 0.0, 0, 0.07, 0.01, (0.06, 0.008)) + \
        line(11.65, 0.05, "prefill", 8, 263, 0.4, 1) + \
        line(11.661, 0.01, "decode", 8, 8, 0.001)
    trace = tmp_path / "forwards.jsonl"
    trace.write_text(one + eight)
    a, b = len(one.encode()), len((one + eight).encode())
    rows = gpu_probe.traced_users(trace, {"1": [0, a], "8": [a, b], "32": [b, b]})
    # busy: 40 of 50 ms; 160 of 661 ms. Gaps: 10 and 0 ms; 500 and 1 ms
    assert rows == [
        {"users": 1, "forwards": 3, "busy_share": 0.8, "slowest_ms": 20.0, "slowest": "prefill of 1 rows, 256 tokens",
         "longest_gap_ms": 10.0, "gap_before": "decode of 1 rows, 1 tokens"},
        {"users": 8, "forwards": 3, "busy_share": 0.242, "slowest_ms": 100.0,
         "slowest": "prefill of 8 rows, 2048 tokens", "longest_gap_ms": 500.0,
         "gap_before": "prefill of 8 rows, 263 tokens", "gc_ms": 401.0, "gc_longest_ms": 400.0, "compiles": 1,
         "slowest_model_ms": 70.0, "slowest_sample_ms": 10.0, "slowest_host_ms": 20.0, "slowest_cpu_ms": 60.0,
         "slowest_frontend_ms": 8.0},
        {"users": 32, "forwards": 0}]


def test_the_summary_sets_a_layers_one_row_gemms_compiled_beside_cublas_and_the_weight_read(tmp_path):
    """profile-gpu's toy shape at one row: QKV 128 x 64, O 64 x 64, gate/up 256 x 64 and down 64 x 128 hold 36,864
    bf16 weights, 73,728 bytes to read at the largest copy's bandwidth (bytes read and written over its time)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    from tgi_toolkit.costs.profile import TINY_CONFIG, profile

    profile(TINY_CONFIG, tmp_path, device="cpu", tiny=True, log=lambda line: None)
    assert gpu_probe.one_row_gemms(tmp_path, TINY_CONFIG) is None  # no compiled GEMMs on a CPU by default
    profile(TINY_CONFIG, tmp_path, device="cpu", tiny=True, compile_sizes=(1,), log=lambda line: None)
    gemms = gpu_probe.one_row_gemms(tmp_path, TINY_CONFIG)
    copies = pd.read_parquet(tmp_path / "mem_perf.parquet").set_index("bytes")["latency"]
    bandwidth = 2 * 2**20 / (copies[2**20] / 1e3)
    assert gemms["weight_read_us"] == pytest.approx(73728 / bandwidth * 1e6, abs=0.01)
    linear = pd.read_parquet(tmp_path / "gemm_perf.parquet").query("m == 1 and n != 512")
    assert gemms["linear_us"] == pytest.approx(1e3 * linear["latency"].sum(), abs=0.01)
    compiled = pd.read_parquet(tmp_path / "compiled_gemm_perf.parquet")
    assert gemms["compiled_us"] == pytest.approx(1e3 * compiled["latency"].sum(), abs=0.01)


def test_a_kernels_folder_without_the_hosts_times_is_refused_for_the_engine_host_prediction(tmp_path):
    """The probes of 2026-11-28 timed no host: predicting them again with the engine's host is refused by name (the
    other predictions go on: `predict_again` records it in `skipped`)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_probe

    (tmp_path / "kernels").mkdir()
    (tmp_path / "config.json").write_text(json.dumps(gpu_probe.TINY))
    with pytest.raises(ValueError, match="measured-host: .* has no host_perf.parquet"):
        gpu_probe.predict("measured-host", "H100", tmp_path, tmp_path / "kernels", gpu_probe.PLANS["tiny"], [],
                          tmp_path / "out")
