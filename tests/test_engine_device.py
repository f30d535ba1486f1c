"""The engine on a device (`--device`, engine/device.py), its CUDA-graph step (engine/graphs.py) run eagerly, random
weights (`--random-weights`), fp8 weights and the KV memory a card leaves: every path the CPU can run."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from tests.test_engine_scripted import PROMPTS, decode_logits
from tgi_toolkit.config.embedded import UnsupportedSetting, quantize_refusal
from tgi_toolkit.engine import device as engine_device
from tgi_toolkit.engine.cli import main as engine_main
from tgi_toolkit.engine.cli import passive_omp_wait, split_engine_args
from tgi_toolkit.engine.graphs import COMPILED_TOLERANCE, GraphDecode, relative_error, span_buckets
from tgi_toolkit.engine.model import load_random, random_config
from tgi_toolkit.engine.quantization import Fp8Linear
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.engine.serve import decode_step_sizes
from tgi_toolkit.engine.validation import GenerateParameters, RequestLimits, ValidationError, validate
from tgi_toolkit.models.files import ModelNotFoundError

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 5000, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return path


# -- --device ------------------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_device_defaults_to_the_cpu_and_cuda_is_refused_without_a_gpu():
    assert engine_device.resolve_device(None) == "cpu"
    assert engine_device.resolve_device("cpu") == "cpu"
    with pytest.raises(UnsupportedSetting, match=r"--device cuda: torch sees no CUDA GPU.*allowed: cuda, cpu"):
        engine_device.resolve_device("cuda")
    with pytest.raises(UnsupportedSetting, match=r"--device must be one of cuda, cpu; got 'tpu'"):
        engine_device.resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_serve_refuses_device_cuda_before_loading_anything(monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("tgi_toolkit.engine.model.load_model", never)
    monkeypatch.setattr("tgi_toolkit.models.files.resolve_model", never)
    assert engine_main(["--device", "cuda", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "error: --device cuda" in err and "allowed: cuda, cpu" in err and "Traceback" not in err


def test_serve_refuses_compile_sizes_on_a_cpu_before_loading_anything(monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("tgi_toolkit.engine.model.load_model", never)
    monkeypatch.setattr("tgi_toolkit.engine.model.load_random", never)
    assert engine_main(["--device", "cpu", "--compile-sizes", "1", "--random-weights", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "error: --compile-sizes compiles the layers inside a CUDA card's decode-step graphs" in err
    assert "Traceback" not in err
    assert engine_main(["--compile-sizes", "1,x", "--port", "1"]) == 2
    assert "error: --compile-sizes must be batch sizes" in capsys.readouterr().err


def test_the_engine_flags_are_split_from_the_launchers():
    options, rest = split_engine_args(["--model", "c.json", "--random-weights", "--device", "cpu", "--port", "9"])
    assert (options.device, options.random_weights) == ("cpu", True)
    assert rest == ["--model-id", "c.json", "--port", "9"]
    options, rest = split_engine_args(["--model=c.json"])
    assert (options.device, options.random_weights, rest) == (None, False, ["--model-id=c.json"])
    env = {"TGI_TOOLKIT_DEVICE": "cpu", "TGI_TOOLKIT_RANDOM_WEIGHTS": "1"}  # as tgi_toolkit.server passes them
    options, _ = split_engine_args([], env)
    assert (options.device, options.random_weights) == ("cpu", True)
    options, _ = split_engine_args(["--device", "cuda"], env)  # a flag wins over its variable
    assert options.device == "cuda"


def test_compile_sizes_default_to_the_one_row_step_on_a_card_and_a_contradiction_is_refused_naming_both_flags():
    assert split_engine_args(["--compile-sizes", "4,1,4"])[0].compile_sizes == (1, 4)
    assert split_engine_args([], {"TGI_TOOLKIT_COMPILE_SIZES": "0"})[0].compile_sizes == ()
    assert split_engine_args([])[0].compile_sizes is None
    for bad in ("1,x", "0,2", "-1"):
        with pytest.raises(UnsupportedSetting, match=rf"--compile-sizes must be batch sizes.*got '{bad}'"):
            split_engine_args(["--compile-sizes", bad])
    # on a card: TGI's graph sizes, the layers compiled at batch 1 unless told otherwise
    assert decode_step_sizes(None, None, "cuda") == ([1, 2, 4, 8, 16, 32], [1])
    assert decode_step_sizes([2, 4], None, "cuda") == ([2, 4], [])  # no one-row graph: nothing compiled by default
    assert decode_step_sizes(None, (1, 8), "cuda") == ([1, 2, 4, 8, 16, 32], [1, 8])
    assert decode_step_sizes(None, (), "cuda") == ([1, 2, 4, 8, 16, 32], [])
    with pytest.raises(UnsupportedSetting, match=r"--compile-sizes 1: not among the --cuda-graphs .* \(2, 4\)"):
        decode_step_sizes([2, 4], (1,), "cuda")
    with pytest.raises(UnsupportedSetting, match=r"--cuda-graphs batch sizes \(none\)"):
        decode_step_sizes([0], (1,), "cuda")
    # on a CPU, --cuda-graphs compiles the step and there is no graph to compile inside
    assert decode_step_sizes([1, 2], None, "cpu") == ([1, 2], [])
    assert decode_step_sizes(None, None, "cpu") == ([], [])
    with pytest.raises(UnsupportedSetting, match=r"--compile-sizes .* a CPU has none"):
        decode_step_sizes(None, (1,), "cpu")


# -- one code path on any device -------------------------------------------------------------------------
def test_the_engine_makes_openmp_threads_wait_passively_unless_the_user_chose():
    env: dict[str, str] = {}
    assert passive_omp_wait(env, modules={}) and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for chosen in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}, {"KMP_BLOCKTIME": "5"}):
        env = dict(chosen)
        assert not passive_omp_wait(env, modules={}) and env == chosen
    env = {}  # torch loaded: its OpenMP runtime has read the variables already, so setting one would mislead
    assert not passive_omp_wait(env, modules={"torch": torch}) and env == {}


def test_the_runner_makes_every_tensor_on_the_models_device(tiny_config):
    """On the meta device (shapes only) a tensor the runner made on the CPU meets the weights in an op and fails:
    prompts, decode steps, a mixed forward storing into the pool, and a prefix copied back out all run."""
    loaded = load_random(str(tiny_config), dtype="float32", device="meta")
    runner = LlamaRunner(loaded.model, max_rows=4, max_positions=64, pool_slots=64)
    assert runner.device.type == "meta" and runner.cache.k.device.type == "meta"
    seqs, logits = runner.prefill([[1, 2, 3], [4, 5]])
    assert logits[0].device.type == "meta"
    assert runner.decode([1, 2]).shape == (2, 5000)
    out = runner.forward([(seqs[0], [7]), (seqs[1], [8, 9, 10])], store=[None, [3, 4, 5]])
    assert [o.shape[0] for o in out] == [1, 1]
    assert runner.new_seq([3, 4]).length == 2


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_off_the_cpu_new_shapes_run_sdpa_without_cudnn_and_a_lone_masked_chunk_keeps_torchs_choice(
        tiny_config, device, monkeypatch):
    """cuDNN's SDPA builds a plan per new shape, and one-token rows beside prompts and new prompts meet new shapes at
    nearly every forward (docs/gpu-probe.md), and so do prompt chunks padded into one call. Off the CPU (the meta
    device stands for a card) each layer's call for them is made under NEW_SHAPE_BACKENDS; a lone prompt chunk after
    cached positions (masked) is not; on the CPU no call is."""
    from tgi_toolkit.engine import attention

    chosen: list[list] = []

    def recording(backends):
        chosen.append(list(backends))
        return contextlib.nullcontext()

    monkeypatch.setattr(attention, "sdpa_kernel", recording)
    runner = LlamaRunner(load_random(str(tiny_config), dtype="float32", device=device).model, 4, 64)
    per_layer = [attention.NEW_SHAPE_BACKENDS] * 2 if device == "meta" else []  # the toy model's 2 layers
    seqs, _ = runner.prefill([[1, 2, 3], [4, 5, 6]])  # two new prompts of one length: one call a layer
    assert chosen == per_layer
    chosen.clear()
    runner.forward([(seqs[0], [7, 8])])  # a chunk after 3 cached positions, masked: torch's choice
    assert chosen == []
    runner.forward([(seqs[0], [9]), (seqs[1], [8, 9, 10])])  # a one-token row beside a masked chunk
    assert chosen == per_layer
    chosen.clear()
    runner.forward([(seqs[0], [11, 12, 13]), (seqs[1], [11, 12, 13, 14])])  # two masked chunks: one padded call
    assert chosen == per_layer
    assert attention.SDPBackend.CUDNN_ATTENTION not in attention.NEW_SHAPE_BACKENDS


def test_random_weights_build_the_configs_shape_and_match_transformers_forward(tiny_config):
    loaded = load_random(str(tiny_config.parent), dtype="float32")
    assert loaded.random_weights and loaded.dtype == torch.float32
    assert loaded.model.model.layers[0].mlp.gate_proj.weight.shape == (128, 64)
    assert loaded.model.lm_head.weight.shape == (5000, 64)
    assert loaded.tokenizer("Hello").input_ids  # the bundled default's tokenizer: none beside config.json
    ids = [1, 17, 250, 3, 99]
    with torch.no_grad():
        expected = loaded.model(torch.tensor([ids])).logits[0, -1]
    runner = LlamaRunner(loaded.model, 2, 64)
    _, logits = runner.prefill([ids])
    torch.testing.assert_close(logits[0][0], expected, rtol=1e-5, atol=1e-5)


def test_random_weights_need_a_config_json_or_a_shipped_id(tmp_path):
    with pytest.raises(ModelNotFoundError, match="--random-weights builds a model from a config.json"):
        load_random(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="cannot read .* as a model's config.json"):
        load_random(str(tmp_path))
    fields, path = random_config("meta-llama/Llama-3.1-8B")  # a shipped shape, by id
    assert path is None and (fields["hidden_size"], fields["num_key_value_heads"], fields["vocab_size"]) == \
        (4096, 8, 128256)


def test_a_random_weight_server_serves_only_benchmark_requests():
    limits = RequestLimits(random_weights=True)
    with pytest.raises(ValidationError, match=r"random weights \(--random-weights\).*`ignore_eos`"):
        validate("hi", GenerateParameters(max_new_tokens=4), limits, lambda text: [1, 2])
    valid = validate("hi", GenerateParameters(max_new_tokens=4, ignore_eos=True), limits, lambda text: [1, 2])
    assert valid.ignore_eos and valid.max_new_tokens == 4


# -- the CUDA graphs' step, run eagerly -------------------------------------------------------------------
def test_span_buckets_double_from_the_floor_up_to_the_cache():
    assert span_buckets(1000) == [128, 256, 512, 1000]
    assert span_buckets(128) == [128]
    assert span_buckets(100) == [100]


def test_the_graphs_padded_masked_step_gives_the_plain_steps_logits(tiny_config):
    """Rows padded to the next captured size and context to the next span bucket, masked: in float32 the
    plain step's logits (to rounding: the softmax sums over more, masked, keys) and the same greedy tokens, while
    rows join and leave."""
    loaded = load_random(str(tiny_config), dtype="float32")
    runner = LlamaRunner(loaded.model, 4, 300)
    plain = decode_logits(runner, 7)
    runner.graphs = GraphDecode(runner, [2, 4], capture=False)
    assert sorted(runner.graphs.steps) == [(2, 128), (2, 256), (2, 300), (4, 128), (4, 256), (4, 300)]
    assert runner.graphs.pick(3, 129).ids.shape[0] == 4 and runner.graphs.pick(3, 129).span == 256
    padded = decode_logits(runner, 7)
    assert [t.shape[0] for t in padded] == [2, 2, 3, 3, 2, 2, 2]
    for a, b in zip(plain, padded, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert torch.equal(a.argmax(-1), b.argmax(-1))
    assert max(map(len, PROMPTS)) + 7 < 128  # every step above ran in the first span bucket
    runner.prefill([[1, 2]])
    with pytest.raises(RuntimeError, match="before any sequence runs"):
        GraphDecode(runner, [1], capture=False)


@pytest.mark.slow
def test_the_graphs_compiled_layers_give_the_plain_steps_logits_and_a_failed_compile_leaves_the_eager_step(
        tiny_config):
    """`--compile-sizes`' path run without capture (float32): the sizes named compile as the graphs are built, before
    any step (not by a request), and give the plain step's logits; the others run the eager layers. A compile that
    fails (here inductor finds no C++ compiler) leaves its size to the eager step, saying why, and the same tokens."""
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    loaded = load_random(str(tiny_config), dtype="float32")
    runner = LlamaRunner(loaded.model, 4, 300)
    plain = decode_logits(runner, 7)
    before = counters["stats"]["unique_graphs"]
    runner.graphs = GraphDecode(runner, [2, 4], capture=False, compile_sizes=[2, 3])
    built = counters["stats"]["unique_graphs"]
    assert built == before + 2  # layer_in and layer_out, once for every span bucket and layer
    assert runner.graphs.compiled_sizes == {2} and runner.graphs.not_compiled == {}  # 3 is no graph size
    compiled = decode_logits(runner, 7)
    assert counters["stats"]["unique_graphs"] == built  # steps of 2 (compiled) and 3 rows (padded to 4): no compile
    for a, b in zip(plain, compiled, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)

    runner.graphs = None
    torch._dynamo.reset()  # forget the compiled frames, so that the next build compiles again
    with inductor_config.patch({"cpp.cxx": ("/nonexistent/g++",), "fx_graph_cache": False}):
        runner.graphs = GraphDecode(runner, [2, 4], capture=False, compile_sizes=[2])
    assert runner.graphs.compiled_sizes == set()
    assert runner.graphs.not_compiled[2].startswith("the compile failed (InductorError: InvalidCxxCompiler")
    for a, b in zip(plain, decode_logits(runner, 7), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


class Rerun:
    """Stands in for CUDA graphs, which a CPU has not (graphs.Capture): a replay runs the recorded step again into
    the output it recorded, where a card replays its kernels. Records are counted from 1, failed ones too: those
    numbered in `fail` raise, and the graphs numbered in `stray` replay twice the logits, as a capture or a kernel
    that misbehaves on a card would."""

    def __init__(self, fail: set[int] = frozenset(), stray: set[int] = frozenset()) -> None:
        self.fail, self.stray, self.records = fail, stray, 0

    def warm(self, run):
        run()

    def record(self, run):
        self.records += 1
        if self.records in self.fail:
            raise RuntimeError("operation not permitted when stream is capturing\n(more lines)")
        out, scale = run(), 2.0 if self.records in self.stray else 1.0

        class Replay:
            def replay(self) -> None:
                out.copy_(run() * scale)

        return Replay(), out


@pytest.mark.slow
def test_the_capture_compiles_before_it_records_and_leaves_a_size_that_fails_or_strays_to_the_eager_layers(
        tiny_config):
    """`GraphDecode`'s capture with a stand-in for the graphs (`Rerun`): sizes recorded largest first, each span
    from the longest, a compiled size warmed (compiled) before its graphs are recorded, and one replay of the largest
    size and of each compiled size checked against the eager step. A compiled size whose capture fails, or whose
    replay strays, is captured again with its eager layers, saying why; an eager size that does either stops the
    start, saying why. With sizes 2 and 4 and spans 128, 256 and 300, records 1-3 are size 4's, 4-6 size 2's."""
    loaded = load_random(str(tiny_config), dtype="float32")
    runner = LlamaRunner(loaded.model, 4, 300)
    plain = decode_logits(runner, 7)

    def served(capturer: Rerun) -> GraphDecode:
        graphs = GraphDecode(runner, [2, 4], capture=True, compile_sizes=[2], capturer=capturer)
        runner.graphs = graphs
        for a, b in zip(plain, decode_logits(runner, 7), strict=True):  # every step a replay, as on a card
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        runner.graphs = None
        return graphs

    graphs = served(Rerun())
    assert graphs.compiled_sizes == {2} and graphs.not_compiled == {}
    assert len(graphs.steps) == 6 and all(step.graph is not None for step in graphs.steps.values())
    # size 2's first record fails: recorded again (record 5) with the eager layers, then its other two spans
    capturer = Rerun(fail={4})
    graphs = served(capturer)
    assert capturer.records == 7 and graphs.compiled_sizes == set()
    assert graphs.not_compiled == {2: "its capture failed (RuntimeError: operation not permitted when stream is "
                                      "capturing)"}
    # size 2's replays come out twice the eager logits, 100 % off where a compiled size may stray 10 %: its three
    # spans recorded again (records 7-9), eagerly
    capturer = Rerun(stray={4, 5, 6})
    graphs = served(capturer)
    assert capturer.records == 9 and graphs.compiled_sizes == set()
    assert graphs.not_compiled == {2: "its logits were 100.0% off the eager step's (relative 2-norm)"}
    # an eager size (4) that fails to record, or whose replay strays, stops the start
    with pytest.raises(RuntimeError, match="operation not permitted"):
        GraphDecode(runner, [2, 4], capture=True, compile_sizes=[2], capturer=Rerun(fail={1}))
    with pytest.raises(RuntimeError, match=r"CUDA graph \(4 rows, 128 positions\) gives other logits"):
        GraphDecode(runner, [2, 4], capture=True, compile_sizes=[2], capturer=Rerun(stray={3}))


def test_a_compiled_steps_logits_are_judged_by_their_relative_error():
    # |(3, 4.5) - (3, 4)| / |(3, 4)| = 0.5 / 5
    assert relative_error(torch.tensor([3.0, 4.5]), torch.tensor([3.0, 4.0])) == pytest.approx(0.1)
    assert relative_error(torch.zeros(2), torch.zeros(2)) == 0.0
    assert relative_error(torch.ones(2), torch.zeros(2)) == 1.0
    # bfloat16's own rounding passes (about 2 % on random 32-layer Llamas), a wrong row's logits do not
    assert 0.02 < COMPILED_TOLERANCE < 0.5


def test_a_step_no_graph_holds_runs_eagerly(tiny_config):
    loaded = load_random(str(tiny_config), dtype="float32")
    runner = LlamaRunner(loaded.model, 4, 64)
    graphs = GraphDecode(runner, [2], capture=False)
    assert graphs.step([1, 2, 3], [5, 5, 5]) is None  # three rows: no size holds them
    assert graphs.step([1], [70]) is None  # past the cache's 64 positions


# -- fp8 ------------------------------------------------------------------------------------------------
def test_fp8_is_refused_on_a_cpu_with_a_sentence():
    reason = quantize_refusal("fp8", "cpu")
    assert reason is not None and "compute capability 8.9" in reason and "a CPU" in reason


def test_fp8_linear_multiplies_within_e4m3s_rounding():
    """e4m3 keeps 3 mantissa bits: each operand within 2^-4 relative, so a 64-term dot product of random values
    lands within a few percent of the exact one (float32 here; the CPU has a _scaled_mm kernel too)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32, bias=True)
    fp8 = Fp8Linear(linear)
    assert fp8.qweight.dtype == torch.float8_e4m3fn and fp8.qweight.shape == (32, 64)
    x = torch.randn(5, 64)
    try:
        y = fp8(x)
    except (RuntimeError, NotImplementedError) as exc:  # a torch without the CPU kernel
        pytest.skip(f"no _scaled_mm on this CPU: {exc}")
    exact = linear(x)
    assert y.shape == (5, 32) and y.dtype == torch.float32
    assert float((y - exact).norm() / exact.norm()) < 0.05


# -- KV memory on a card ----------------------------------------------------------------------------------
def test_kv_bytes_on_a_card_follow_tgis_warm_up(monkeypatch):
    """TGI: free memory after warm-up - (1 - fraction x 0.90) x total. Free 40 GiB with 4 GiB reserved, total
    80 GiB: 36 - 0.1 x 80 = 28 GiB at fraction 1; at 0.5, 36 - 0.55 x 80 = -8: none."""
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (40 * gib, 80 * gib))
    assert engine_device.cuda_kv_bytes(1.0, 4 * gib) == 28 * gib
    assert engine_device.cuda_kv_bytes(0.5, 4 * gib) == 0


def test_activation_reserve_counts_a_forwards_tensors():
    """TINY at 10 tokens, 2 emitting rows, 4-byte floats: per token 3 x 64 + (4 + 2 x 2) x 16 + 2 x 128 = 576
    elements; 2 x 10 x 576 x 4 = 46080 bytes, plus 2 x 2 x 300 x 4 = 4800 of float32 logits."""

    class Config:
        hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, vocab_size = 64, 128, 4, 2, 300

    assert engine_device.activation_bytes(Config(), 10, 2, 4) == 46080 + 4800
