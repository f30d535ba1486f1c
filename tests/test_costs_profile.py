"""`tgi-toolkit profile-gpu` (tgi_toolkit/costs/profile.py) on the CPU: the shapes one shard computes, worked by hand,
and tables in the operator database's own columns and parquet types, which the measured cost model reads."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from tgi_toolkit.cli import main as cli_main
from tgi_toolkit.costs.kernel_tables import KernelTables, database_root
from tgi_toolkit.costs.profile import TINY_CONFIG, Shard, profile

LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256}


def test_one_shards_projections_are_the_models_split_as_tgi_shards_them():
    """Llama-3.1-8B, head_dim 4096 / 32 = 128. One shard: QKV (32 + 2 x 8) x 128 = 6144 x 4096, O 4096 x 4096,
    gate/up 2 x 14336 = 28672 x 4096, down 4096 x 14336, LM head 128256 x 4096. Two: 16 heads and 4 KV heads,
    QKV (16 + 8) x 128 = 3072, O's k 2048, gate/up 14336, down's k 7168, LM head 64128. Sixteen: 2 heads, the
    8 KV heads one per shard."""
    one = Shard.of(LLAMA_8B)
    assert (one.heads, one.kv_heads, one.head_dim) == (32, 8, 128)
    assert one.gemms == {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                         "lm_head": (128256, 4096)}
    two = Shard.of(LLAMA_8B, 2)
    assert two.gemms == {"qkv": (3072, 4096), "o": (4096, 2048), "gate_up": (14336, 4096), "down": (4096, 7168),
                         "lm_head": (64128, 4096)}
    sixteen = Shard.of(LLAMA_8B, 16)
    assert (sixteen.heads, sixteen.kv_heads, sixteen.gemms["qkv"]) == (2, 1, (512, 4096))
    with pytest.raises(ValueError, match="--num-shard 3 must divide the model's 32 attention heads"):
        Shard.of(LLAMA_8B, 3)


@pytest.fixture(scope="module")
def tiny_tables(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    meta = profile(TINY_CONFIG, out, device="cpu", tiny=True, log=lambda line: None)
    return out, meta


def _database_schema(op: str, table: str):
    return pq.read_schema(database_root() / "h100_sxm" / op / "vllm" / "0.24.0" / f"{table}.parquet")


@pytest.mark.parametrize(("op", "table"), [("gemm", "gemm_perf"), ("attention", "context_attention_perf"),
                                           ("attention", "generation_attention_perf")])
def test_the_tables_have_the_databases_columns_and_types(tiny_tables, op, table):
    out, _ = tiny_tables
    mine = pq.read_schema(out / f"{table}.parquet")
    theirs = _database_schema(op, table)
    assert [(f.name, str(f.type)) for f in mine] == [(f.name, str(f.type)) for f in theirs]


def test_the_tables_cover_the_grid_the_reader_interpolates_on(tiny_tables):
    import pandas as pd

    out, meta = tiny_tables
    gemm = pd.read_parquet(out / "gemm_perf.parquet")
    # the toy shape: heads 4, KV heads 2, head_dim 16; five distinct (n, k), each at every m of the grid
    assert sorted(set(zip(gemm.n, gemm.k, strict=True))) == [(64, 64), (64, 128), (128, 64), (256, 64), (512, 64)]
    assert gemm.groupby(["n", "k"]).m.apply(sorted).map(tuple).unique().tolist() == [(1, 4, 16, 64)]
    assert set(gemm.op_name) == {"gemm"} and set(gemm.gemm_dtype) == {"bfloat16"} and (gemm.latency > 0).all()
    generation = pd.read_parquet(out / "generation_attention_perf.parquet")
    assert set(generation.isl) == {1} and sorted(set(generation.step)) == [16, 64]
    assert set(zip(generation.num_heads, generation.num_key_value_heads, generation.head_dim, strict=True)) == \
        {(4, 2, 16)}
    context = pd.read_parquet(out / "context_attention_perf.parquet")
    assert set(context.step) == {0} and sorted(set(zip(context.batch_size, context.isl, strict=True))) == \
        [(1, 16), (1, 64), (2, 16), (2, 64)]
    copies = pd.read_parquet(out / "mem_perf.parquet")
    assert list(copies.columns) == ["device", "op_name", "bytes", "latency"]
    assert list(copies.bytes) == [2**16, 2**20] and set(copies.op_name) == {"copy"}
    host = pd.read_parquet(out / "host_perf.parquet")  # a CPU has no graphs to replay
    assert list(host.op_name) == ["torch_call"] and list(host.calls) == [400] and (host.latency > 0).all()
    tables = KernelTables.from_dir(out)  # the lead's reader takes the folder as it is
    assert set(tables.tables) == {"gemm", "context_attention", "generation_attention", "host"}


def test_the_metadata_says_where_the_times_came_from(tiny_tables):
    out, meta = tiny_tables
    doc = yaml.safe_load((out / "collection_meta.yaml").read_text())
    assert doc["runtime"]["framework"] == "tgi_toolkit" and doc["framework"] == "tgi_toolkit"
    assert doc["torch"] == str(torch.__version__) and doc["device_type"] == "cpu"
    assert {"device", "cuda", "driver", "date", "version"} <= set(doc)
    assert set(doc["tables"]) == {"gemm_perf", "context_attention_perf", "generation_attention_perf", "mem_perf",
                                  "host_perf"}
    assert doc["skipped_for_budget"] == {}


def test_the_budget_stops_the_walk_and_says_what_it_left(tmp_path):
    """Spent before the first kernel: the toy grid's 2 copies, the host's timing, 5 x 4 GEMMs, 2 x 2 of each
    attention and the 4 compiled projections at one row left out."""
    meta = profile(TINY_CONFIG, tmp_path, device="cpu", tiny=True, budget_s=1e-9, compile_sizes=(1,),
                   log=lambda line: None)
    assert meta["skipped_for_budget"] == {"mem_perf": 2, "gemm_perf": 20, "generation_attention_perf": 4,
                                          "context_attention_perf": 4, "compiled_gemm_perf": 4, "host_perf": 1}
    assert not list(tmp_path.glob("*.parquet"))


def test_a_gemm_slower_than_its_next_larger_row_count_is_timed_again_and_the_lower_time_stands(tmp_path):
    """A clock scripted per call stands for a card's: each (n, k) at m rows takes 1 + m / 64 ms, except
    - n=256 k=64 at 16 rows: 50 ms the first time (a transient), 1.25 the second: 50 > 1.25 x 2.0 (64 rows), timed
      again, 1.25 stands; and at 4 rows 3.0 ms each time, over 1.25 x 1.25 once 16 rows' time is final (the walk
      goes from the largest row count down), though not over 1.25 x 50: timed again, 3.0 stands;
    - n=512 k=64 at 4 rows: 50 ms each time (a kernel truly slow there): timed again, 50 stands;
    - n=64 k=64 at 1 row: 1.32 ms, under 1.25 x 1.0625 = 1.328 (4 rows): not timed again;
    - n=128 k=64 at 1 row: 1.34 ms, over 1.328, and 1.30 the second time: 1.30 stands."""
    import pandas as pd
    import torch.nn.functional as F

    from tgi_toolkit.costs.kernel_timing import Clock

    script = {(16, 256, 64): [50.0, 1.25], (4, 256, 64): [3.0, 3.0], (4, 512, 64): [50.0, 50.0], (1, 64, 64): [1.32],
              (1, 128, 64): [1.34, 1.30]}
    calls: dict[tuple[int, int, int], int] = {}

    class Scripted(Clock):
        def median_ms(self, call):
            if call.func is not F.linear:
                return super().median_ms(call)
            x, weight = call.args
            shape = (x.shape[0], *weight.shape)
            calls[shape] = calls.get(shape, 0) + 1
            times = script.get(shape)
            return times[calls[shape] - 1] if times else 1 + x.shape[0] / 64

    meta = profile(TINY_CONFIG, tmp_path, device="cpu", tiny=True, clock=Scripted("cpu", warmup=1, repeats=3),
                   log=lambda line: None)
    assert meta["retimed"] == {"torch.nn.functional.linear m=16 n=256 k=64": [50.0, 1.25],
                               "torch.nn.functional.linear m=4 n=256 k=64": [3.0, 3.0],
                               "torch.nn.functional.linear m=4 n=512 k=64": [50.0, 50.0],
                               "torch.nn.functional.linear m=1 n=128 k=64": [1.34, 1.3]}
    assert yaml.safe_load((tmp_path / "collection_meta.yaml").read_text())["retimed"] == meta["retimed"]
    gemm = pd.read_parquet(tmp_path / "gemm_perf.parquet").set_index(["m", "n", "k"]).latency
    assert (gemm[16, 256, 64], gemm[4, 512, 64], gemm[1, 64, 64], gemm[1, 128, 64]) == (1.25, 50.0, 1.32, 1.30)
    assert gemm[64, 512, 64] == 2.0 and len(gemm) == 20
    assert sum(calls.values()) == 20 + 4


def test_past_the_deadline_a_slow_gemm_keeps_its_one_time_and_nothing_is_counted_left_out():
    import math

    from tgi_toolkit.costs.kernel_timing import GEMM_KERNEL, Clock, Profile, Walk

    def walk(deadline: float) -> Walk:
        result = Profile("cpu")
        for m, ms in ((1, 1e4), (4, 1.0)):  # 10 s > 1.25 x 1 ms
            result.add("gemm_perf", {"kernel_source": GEMM_KERNEL, "m": m, "n": 64, "k": 64, "latency": ms})
        return Walk(result, Shard.of(TINY_CONFIG), "cpu", "bfloat16", Clock("cpu", warmup=1, repeats=3), deadline, {})

    late = walk(0.0)
    late.retime_gemms()
    assert late.result.retimed == {} and late.result.skipped == {}
    assert [row["latency"] for row in late.result.rows["gemm_perf"]] == [1e4, 1.0]
    timely = walk(math.inf)
    timely.retime_gemms()  # the CPU's real time of a 1 x 64 x 64 GEMM: not 10 s, however busy
    assert list(timely.result.retimed) == [f"{GEMM_KERNEL} m=1 n=64 k=64"]
    assert timely.result.rows["gemm_perf"][0]["latency"] < 1e4


def test_the_cards_driver_and_uuid_come_from_nvidia_smi_and_none_without_it(tmp_path, monkeypatch):
    """No card here: a stand-in nvidia-smi on PATH answers the query the way the real one does (one line a card)."""
    from tgi_toolkit.costs.profile import nvidia_smi

    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvidia_smi("uuid") is None  # no nvidia-smi at all
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\ncase "$1" in --query-gpu=uuid) printf "GPU-1a2b\\nGPU-3c4d\\n";; '
                    '--query-gpu=driver_version) echo 580.159.04;; *) exit 6;; esac\n')
    fake.chmod(0o755)
    assert (nvidia_smi("uuid"), nvidia_smi("driver_version"), nvidia_smi("bogus")) == ("GPU-1a2b", "580.159.04", None)
    meta = profile(TINY_CONFIG, tmp_path / "kernels", device="cpu", tiny=True, budget_s=1e-9, log=lambda line: None)
    assert meta["card_uuid"] is None and meta["driver"] is None  # a CPU asks no nvidia-smi


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "cfg.json", "--num-shard", "0"], "--num-shard must be >= 1"),
    (["--tiny", "--compile-sizes", "1,x"], "--compile-sizes must be batch sizes separated by commas"),
    (["--tiny", "--num-shard", "3"], "--num-shard 3 must divide the model's 4 attention heads"),
    (["--budget-s", "0", "--tiny"], "--budget-s must be > 0"),
    ([], "--model is required"),
])
def test_the_cli_refuses_bad_input_before_measuring(tmp_path, capsys, argv, message):
    assert cli_main(["profile-gpu", "--device", "cpu", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_compiled_gemms_are_the_decode_layers_projections_each_compiled_at_each_size(tmp_path):
    """The toy shape's four projections (QKV 128 x 64, O 64 x 64, gate/up 256 x 64, down 64 x 128; not the LM head,
    which the engine's compiled layers leave out) at 1 and 2 rows: eight compiles, eight rows in gemm_perf's
    columns, read by the cost model's reader."""
    import pandas as pd
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    meta = profile(TINY_CONFIG, tmp_path, device="cpu", tiny=True, compile_sizes=(1, 2), log=lambda line: None)
    assert counters["stats"]["unique_graphs"] - graphs == 8
    table = pd.read_parquet(tmp_path / "compiled_gemm_perf.parquet")
    assert sorted(zip(table.m, table.n, table.k, strict=True)) == sorted(
        (m, n, k) for m in (1, 2) for n, k in ((128, 64), (64, 64), (256, 64), (64, 128)))
    assert set(table.kernel_source) == {"torch.compile (inductor)"} and set(table.gemm_dtype) == {"bfloat16"}
    assert (table.latency > 0).all()
    assert pq.read_schema(tmp_path / "compiled_gemm_perf.parquet") == pq.read_schema(tmp_path / "gemm_perf.parquet")
    assert meta["compile_sizes"] == [1, 2] and meta["skipped_for_budget"] == {}
    assert "compiled_gemm_perf" in yaml.safe_load((tmp_path / "collection_meta.yaml").read_text())["tables"]
    assert "compiled_gemm" in KernelTables.from_dir(tmp_path).tables


def test_a_compiled_gemm_whose_capture_fails_is_left_out_and_says_why(tmp_path):
    """A CUDA graph's capture cannot run here: a clock whose replay refuses the gate/up shape stands for one that
    fails on a card. That shape is left out, with the error; the other three are measured."""
    import pandas as pd

    from tgi_toolkit.costs.kernel_timing import Clock

    class Refusing(Clock):
        def replay_ms(self, call):
            if call.args[1].shape == (256, 64):
                raise RuntimeError("operation not permitted when stream is capturing")
            return super().replay_ms(call)

    meta = profile(TINY_CONFIG, tmp_path, device="cpu", tiny=True, compile_sizes=(1,),
                   clock=Refusing("cpu", warmup=1, repeats=3), log=lambda line: None)
    table = pd.read_parquet(tmp_path / "compiled_gemm_perf.parquet")
    assert sorted(zip(table.n, table.k, strict=True)) == [(64, 64), (64, 128), (128, 64)]
    assert meta["skipped_for_budget"] == {
        "compiled m=1 n=256 k=64: RuntimeError: operation not permitted when stream is capturing": 1}


def test_on_a_card_a_short_kernel_is_timed_again_in_a_graph_and_a_gemm_over_copies_of_its_weight():
    """A card's clock, scripted (no card here): a GEMM whose lone call reads 0.04 ms (under GRAPH_BELOW_MS, 0.5) is
    timed again as a graph replays it, each round over copies of its weight (the toy's 256 x 64 bfloat16 weight is
    32 KiB: 256 MiB of copies would be 8,192, so MAX_COPIES, 16); a round of 16 reads 0.16 ms: 0.01 ms stands. One
    whose lone call reads 0.8 ms keeps it, and a CPU's clock never replays."""
    import math

    import torch.nn.functional as F

    from tgi_toolkit.costs.kernel_timing import Clock, Profile, Walk

    replayed: list[list] = []

    class Card(Clock):
        def median_ms(self, call):
            return 0.04 if call.args[0].shape[0] == 1 else 0.8

        def replay_ms(self, call):
            replayed.append(call.args[0])
            return 0.16

    walk = Walk(Profile("card"), Shard.of(TINY_CONFIG), "cpu", "bfloat16", Card("cuda"), math.inf, {})
    walk.gemms((1, 64))
    rows = {(r["m"], r["n"], r["k"]): r["latency"] for r in walk.result.rows["gemm_perf"]}
    shapes = set(Shard.of(TINY_CONFIG).gemms.values())
    assert rows == {**{(1, n, k): 0.01 for n, k in shapes}, **{(64, n, k): 0.8 for n, k in shapes}}
    assert len(replayed) == len(shapes) and all(len(calls) == 16 for calls in replayed)
    for calls in replayed:  # one weight's copies, each its own memory, every call F.linear on the same input
        assert all(c.func is F.linear and c.args[0] is calls[0].args[0] for c in calls)
        assert len({c.args[1].data_ptr() for c in calls}) == 16
        assert all(c.args[1].equal(calls[0].args[1]) for c in calls)
    replayed.clear()
    cpu = Walk(Profile("cpu"), Shard.of(TINY_CONFIG), "cpu", "bfloat16", Card("cpu"), math.inf, {})
    cpu.gemms((1,))
    assert replayed == [] and {r["latency"] for r in cpu.result.rows["gemm_perf"]} == {0.04}
