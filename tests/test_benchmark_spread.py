"""benchmarks/simulate_accuracy.py --spread: how far apart several --local runs measured the same points."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("simulate_accuracy", ROOT / "benchmarks" / "simulate_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log(tmp_path: Path, name: str, ttft: float, tpot: float, throughput: float) -> str:
    """A --local log of one point as the benchmark prints it (header, forwards line and summary ignored)."""
    path = tmp_path / name
    path.write_text(
        "path      point    ttft_p50: pred / meas / ratio (at its speed)\n"
        f"chunked   users=4,prompt=64,output=16   0.5 {ttft} 1.00 (1.00)   0.1 {tpot} 1.00 (1.00)"
        f"   40 {throughput} 1.00 (1.00)\n"
        "          forwards: decode 75 forwards 4.9 s, measured / priced 0.88; speed x0.89\n"
        "as profiled: 3 of 3 ratios within ±15 %, worst |log ratio| 0.00\n")
    return str(path)


def test_spread_counts_the_metrics_two_runs_measured_more_than_15_percent_of_their_mean_apart(tmp_path, capsys):
    # TTFT 0.40 and 0.56: max / min 1.40 > 1.15 / 0.85 (their mean 0.48; 0.40 is 17 % below it): counted.
    # TPOT 0.10 and 0.13: 1.30, each 13 % from the mean 0.115: not counted. Throughput 50 and 50: 1.00.
    bench = load_benchmark()
    a = log(tmp_path, "a.txt", 0.40, 0.10, 50)
    b = log(tmp_path, "b.txt", 0.56, 0.13, 50)
    assert bench.spread([a, b]) == 0
    out = capsys.readouterr().out
    assert "users=4,prompt=64,output=16" in out
    assert "0.4 0.56  1.40" in out and "0.1 0.13  1.30" in out and "50 50  1.00" in out
    assert "1 of 3 metrics measured more than ±15 % of their mean apart (max / min > 1.35) by 2 runs" in out


def test_spread_says_which_file_holds_no_local_run(tmp_path, capsys):
    bench = load_benchmark()
    empty = tmp_path / "notes.txt"
    empty.write_text("nothing measured here\n")
    assert bench.spread([str(empty)]) == 2
    assert "notes.txt holds no point of a --local run" in capsys.readouterr().err


def test_local_only_names_the_points_it_knows_before_any_server_starts(capsys):
    # A typo in the path or the point must fail at once, not after a profile, and list what is there.
    bench = load_benchmark()
    for bad in ("chonked:users=4,prompt=64,output=64", "users=3,prompt=64,output=64"):
        assert bench.main(["--local", "--only", bad]) == 2
        err = capsys.readouterr().err
        assert f"--only: no such point {bad}; the paths are chunked and unchunked" in err
        assert "users=4,prompt=64,output=64" in err and "rate=0.5,arrival=poisson,prompt=128,output=32" in err


def test_only_picks_a_point_on_one_path_or_on_both():
    bench = load_benchmark()
    known = {"users=4,prompt=64,output=64", "users=8,prompt=512,output=16"}
    wanted, unknown = bench._selected(["chunked:users=4,prompt=64,output=64", "users=8,prompt=512,output=16"], known)
    assert unknown == []
    assert wanted == {("chunked", "users=4,prompt=64,output=64"), ("chunked", "users=8,prompt=512,output=16"),
                      ("unchunked", "users=8,prompt=512,output=16")}


def test_point_ids_are_those_of_the_points_table():
    # --only matches what the script prints, the points table's point_id: the simulator writes the same table
    from tgi_toolkit.config import LauncherConfig
    from tgi_toolkit.simulate import LinearCostModel, run_concurrency, run_rate

    bench = load_benchmark()
    cost = LinearCostModel(forward_s=0.01, token_s=1e-4)
    config = LauncherConfig(max_input_tokens=1024, max_total_tokens=1100, max_batch_prefill_tokens=1100,
                            max_batch_total_tokens=20_000)
    for run, common in ((run_concurrency, {"users": [4], "prompt_tokens": 64, "max_new_tokens": 16}),
                        (run_rate, {"rates": [0.5], "arrival": "poisson", "prompt_tokens": 128, "max_new_tokens": 8,
                                    "requests": 4})):
        table = run(cost, **common, config=config).points
        assert list(table.point_id) == [bench._point_id(common)]
