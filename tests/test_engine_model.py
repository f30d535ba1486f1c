"""Where models come from, and that the runner's continuous batching is exact."""

from __future__ import annotations

import shutil

import pytest
import torch

from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.quantization import SUPPORTED, quantize_runner, refusal
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import (
    DEFAULT_MODEL_ID,
    ModelNotFoundError,
    bundled_gguf_path,
    converted_model_dir,
    resolve_model,
)


def test_default_model_resolves_to_the_bundled_gguf():
    source = resolve_model(DEFAULT_MODEL_ID)
    assert source.kind == "bundled" and source.gguf_file.endswith(".gguf")
    assert (source.path / source.gguf_file) == bundled_gguf_path()


def test_gguf_path_and_gguf_directory(tmp_path):
    gguf = bundled_gguf_path()
    assert resolve_model(str(gguf)).kind == "gguf"
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.gguf").symlink_to(gguf)
    source = resolve_model(str(folder))
    assert source.kind == "gguf" and source.gguf_file == "model.gguf"


def test_directory_without_weights_is_refused(tmp_path):
    with pytest.raises(ModelNotFoundError, match="neither a config.json"):
        resolve_model(str(tmp_path))


def test_unknown_hub_id_names_the_cache_it_looked_in(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("org/missing")
    assert str(tmp_path) in str(err.value) and "does not download" in str(err.value)


@pytest.fixture(scope="module")
def loaded():
    return load_model(resolve_model(DEFAULT_MODEL_ID), dtype="float32")


def greedy_alone(runner: LlamaRunner, prompt: list[int], n: int) -> list[int]:
    seqs, logits = runner.prefill([prompt])
    out = [int(logits[0][-1].argmax())]
    for _ in range(n - 1):
        out.append(int(runner.decode([out[-1]])[0].argmax()))
    runner.release(seqs[0])
    return out


@pytest.mark.slow
def test_requests_batched_together_equal_requests_run_alone(loaded):
    """Continuous batching is exact: joining, leaving and row moves change no token (float32)."""
    tok = loaded.tokenizer
    runner = LlamaRunner(loaded.model, max_rows=8, max_positions=512)
    prompts = [tok.encode(t) for t in ("The capital of France is", "def fibonacci(n):",
                                        "Once upon a time, in a land far away, there lived a",
                                        "1, 2, 3, 4,")]
    lengths = [12, 5, 16, 9]  # different lengths: rows leave at different steps and are compacted
    alone = [greedy_alone(runner, p, n) for p, n in zip(prompts, lengths, strict=True)]

    # Two start together; two more join at steps 2 and 4 (prefilled while the others wait).
    out: dict[int, list[int]] = {}
    seqs: dict[int, object] = {}

    def join(ids: list[int]) -> None:
        new, logits = runner.prefill([prompts[i] for i in ids])
        for i, seq, lg in zip(ids, new, logits, strict=True):
            seqs[i], out[i] = seq, [int(lg[-1].argmax())]

    join([0, 1])
    step = 0
    while any(len(out.get(i, [])) < lengths[i] for i in range(4)):
        step += 1
        if step == 2:
            join([2])
        if step == 4:
            join([3])
        for i in [i for i in list(seqs) if len(out[i]) >= lengths[i]]:
            runner.release(seqs.pop(i))
        order = sorted(seqs, key=lambda i: seqs[i].row)
        if not order:
            break
        logits = runner.decode([out[i][-1] for i in order])
        for row, i in enumerate(order):
            out[i].append(int(logits[row].argmax()))
    assert [out[i][: lengths[i]] for i in range(4)] == alone


@pytest.mark.slow
def test_save_pretrained_directory_and_hub_cache_load_the_same_model(loaded, tmp_path, monkeypatch):
    folder = tmp_path / "saved"
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    assert resolve_model(str(folder)).kind == "directory"

    # A hub cache laid out as huggingface_hub writes it: refs/main -> snapshots/<sha>/
    cache = tmp_path / "hub"
    repo = cache / "models--acme--smol"
    sha = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(folder, repo / "snapshots" / sha)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    source = resolve_model("acme/smol")
    assert source.kind == "hub-cache" and source.sha == sha

    reloaded = load_model(source, dtype="float32")
    prompt = loaded.tokenizer.encode("The capital of France is")
    a = LlamaRunner(loaded.model, 2, 128)
    b = LlamaRunner(reloaded.model, 2, 128)
    assert greedy_alone(a, prompt, 8) == greedy_alone(b, prompt, 8)
    assert torch.equal(reloaded.model.lm_head.weight, loaded.model.lm_head.weight)


@pytest.mark.slow
def test_gguf_is_converted_once_and_reloaded_from_safetensors(loaded, tmp_path, monkeypatch):
    monkeypatch.setenv("TGI_TOOLKIT_CACHE", str(tmp_path))
    first = load_model(resolve_model(DEFAULT_MODEL_ID), dtype="float32")
    entries = list((tmp_path / "gguf").iterdir())
    assert len(entries) == 1 and (entries[0] / "model.safetensors").is_file()
    second = load_model(resolve_model(DEFAULT_MODEL_ID), dtype="float32")
    assert torch.equal(first.model.lm_head.weight, second.model.lm_head.weight)
    assert first.tokenizer.encode("Hello world") == second.tokenizer.encode("Hello world")
    assert second.tokenizer.chat_template == loaded.tokenizer.chat_template


@pytest.mark.slow
def test_converted_model_dir_is_a_model_directory_other_servers_can_load(loaded):
    source = resolve_model(DEFAULT_MODEL_ID)
    folder = converted_model_dir(source)
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert resolve_model(str(folder)).kind == "directory"
    assert converted_model_dir(resolve_model(str(folder))) == folder  # already in HF format


def teacher_forced_agreement(runner: LlamaRunner, prompt: list[int], reference: list[int]) -> float:
    """Share of positions where, fed the reference continuation, the runner's top token is the reference's."""
    seqs, logits = runner.prefill([prompt + reference], all_logits=[True])
    runner.release(seqs[0])
    predicted = logits[0][len(prompt) - 1:-1].argmax(-1).tolist()
    return sum(a == b for a, b in zip(predicted, reference, strict=True)) / len(reference)


@pytest.mark.slow
@pytest.mark.parametrize("method", SUPPORTED)
def test_each_quantization_method_shrinks_the_weights_and_keeps_greedy_output(loaded, method):
    if refusal(method):
        pytest.skip(refusal(method))
    prompt = loaded.tokenizer.encode("The capital of France is")
    plain = LlamaRunner(loaded.model, 2, 128)
    reference = greedy_alone(plain, prompt, 24)
    runner = LlamaRunner(loaded.model, 2, 128)
    quantize_runner(runner, method)
    # Embeddings (tied with the LM head) stay in float32, as in TGI: 28M of the 135M parameters.
    ratio = runner.weight_bytes() / plain.weight_bytes()
    assert ratio < (0.45 if method in ("bitsandbytes", "eetq") else 0.35), ratio
    # 4-bit on a 135M model is coarse (benchmarks/quantization.py prints each method's figure).
    assert teacher_forced_agreement(runner, prompt, reference) >= (0.8 if ratio > 0.35 else 0.5)
    assert "Paris" in loaded.tokenizer.decode(greedy_alone(runner, prompt, 6))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_dtypes_run_and_agree_with_float32(loaded, dtype):
    half = load_model(resolve_model(DEFAULT_MODEL_ID), dtype=dtype)
    assert half.dtype == getattr(torch, dtype)
    prompt = loaded.tokenizer.encode("The capital of France is")
    reference = greedy_alone(LlamaRunner(loaded.model, 2, 128), prompt, 24)
    runner = LlamaRunner(half.model, 2, 128)
    assert runner.dtype == getattr(torch, dtype) and runner.cache.dtype == getattr(torch, dtype)
    assert runner.weight_bytes() < 0.55 * LlamaRunner(loaded.model, 2, 128).weight_bytes()
    assert teacher_forced_agreement(runner, prompt, reference) >= 0.9
    assert "Paris" in half.tokenizer.decode(greedy_alone(runner, prompt, 6))
    # The runner computes what transformers computes in that dtype (a bfloat16 RMSNorm that
    # rounded differently once put logits 1.5 off and turned a chat answer into nonsense).
    chat = half.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                              add_generation_prompt=True)
    chat = chat["input_ids"] if hasattr(chat, "keys") else chat
    expected = half.model(torch.tensor([chat])).logits[0].float()
    seqs, logits = runner.prefill([chat], all_logits=[True])
    runner.release(seqs[0])
    assert (logits[0] - expected).abs().max() < 0.25


def test_compute_thread_runs_every_job_in_one_thread_and_hands_errors_back():
    import threading

    from tgi_toolkit.engine.infer import ComputeThread

    compute = ComputeThread(name="compute-test")
    loader = compute.call(threading.get_ident)
    assert loader != threading.get_ident()
    assert compute.call(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(ZeroDivisionError):
        compute.call(lambda: 1 / 0)
    # every job (load, warm-up, the batching loop) runs without autograd's bookkeeping
    assert compute.call(torch.is_inference_mode_enabled) and not torch.is_inference_mode_enabled()
    ran_in = []
    compute.hand_over(lambda: ran_in.append(threading.get_ident()))  # the batching loop's place
    compute.thread.join(5)
    assert ran_in == [loader] and not compute.thread.is_alive()  # the thread that loaded, then it ends


@pytest.mark.slow
def test_loading_a_model_leaves_the_process_environment_alone(monkeypatch):
    # The engine never asks the hub (local_files_only), without setting HF_HUB_OFFLINE for the
    # whole process: that leaked into notebooks' clients and every child process.
    import os

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    load_model(resolve_model(DEFAULT_MODEL_ID), dtype="bfloat16")
    assert "HF_HUB_OFFLINE" not in os.environ


def test_a_caller_outside_inference_mode_samples_and_releases_what_the_runner_made(loaded):
    # The runner computes in inference mode; its logits are inference tensors, which torch refuses to change
    # in place outside that mode: the token choice (which overwrites them) and row moves must still work.
    from tgi_toolkit.engine.sampling import SamplingParams, TokenChooser, choose_batch

    runner = LlamaRunner(loaded.model, max_rows=4, max_positions=64)
    seqs, first = runner.prefill([[1, 504, 3458, 314], [1, 19, 2372]])
    logits = runner.decode([int(f[0].argmax()) for f in first])
    assert logits.is_inference() and not torch.is_inference_mode_enabled()
    expected = logits.argmax(-1).tolist()
    choices = choose_batch(logits, [TokenChooser(SamplingParams()) for _ in seqs], lambda i: [])
    assert [c.token_id for c in choices] == expected
    for _ in range(40):  # past the cache's first view of positions: it re-lays its rows mid-forward
        runner.decode([c.token_id for c in choices])
    runner.release(seqs[0])  # moves the last row into the freed one
    assert runner.decode([expected[1]]).shape == (1, runner.vocab_size)
