"""The runner's mixed forward (chunked prefill, decode rows beside prompt chunks) and its KV pool
(prefix-cache hits copied instead of computed) compute what a whole-prompt prefill computes."""

from __future__ import annotations

import random

import pytest
import torch

from tgi_toolkit.engine.kv_cache import Seq
from tgi_toolkit.engine.model import load_model
from tgi_toolkit.engine.runner import LlamaRunner
from tgi_toolkit.models.files import DEFAULT_MODEL_ID, resolve_model

# float32 logits of this model are ~10-30 in magnitude; the chunked and whole-prompt forwards
# differ only in how MKL blocks GEMMs of different row counts (measured: <1e-4).
ATOL = 5e-4

TEXT = ("Once upon a time, in a land far away, there lived a king who had three daughters. "
        "The youngest was the most beautiful, and every morning she walked to the")


@pytest.fixture(scope="module")
def loaded():
    return load_model(resolve_model(DEFAULT_MODEL_ID), dtype="float32")


@pytest.fixture(scope="module")
def prompt(loaded) -> list[int]:
    ids = loaded.tokenizer.encode(TEXT)
    assert len(ids) > 30
    return ids


def whole(runner: LlamaRunner, ids: list[int]) -> torch.Tensor:
    seqs, logits = runner.prefill([ids], [True])
    runner.release(seqs[0])
    return logits[0]


def chunked(runner: LlamaRunner, seq: Seq, ids: list[int], sizes: list[int]) -> torch.Tensor:
    out, at = [], 0
    for n in sizes:
        out.append(runner.forward([(seq, ids[at:at + n])], [True])[0])
        at += n
    assert at == len(ids) and seq.length == len(ids)
    return torch.cat(out)


def split(total: int, sizes: list[int]) -> list[int]:
    return sizes + [total - sum(sizes)]


@pytest.mark.slow
@pytest.mark.parametrize("head", [[1, 1, 1, 1, 1], [5, 7, 3], [16], [1, 15, 1], "all-ones", "last-one"])
def test_prompt_in_chunks_gives_the_logits_of_one_whole_prefill(loaded, prompt, head):
    runner = LlamaRunner(loaded.model, 4, 256)
    reference = whole(runner, prompt)
    if head == "all-ones":
        sizes = [1] * len(prompt)
    elif head == "last-one":
        sizes = [len(prompt) - 1, 1]
    else:
        sizes = split(len(prompt), head)
    seq = runner.new_seq()
    got = chunked(runner, seq, prompt, sizes)
    assert got.shape == reference.shape
    assert torch.allclose(got, reference, rtol=0, atol=ATOL), (got - reference).abs().max()


@pytest.mark.slow
def test_mixed_forward_gives_each_row_the_logits_it_has_alone(loaded, prompt):
    tok = loaded.tokenizer
    p1, p2 = tok.encode("The capital of France is"), tok.encode("def fibonacci(n):\n    return")
    alone = LlamaRunner(loaded.model, 4, 256)
    expected = []
    for ids in (p1, p2):
        seqs, logits = alone.prefill([ids])
        nxt = int(logits[0][-1].argmax())
        expected.append((nxt, alone.forward([(seqs[0], [nxt])])[0]))
        alone.release(seqs[0])
    s3 = alone.new_seq()
    alone.forward([(s3, prompt[:8])])
    expected_chunk = alone.forward([(s3, prompt[8:20])], [True])[0]
    alone.release(s3)

    runner = LlamaRunner(loaded.model, 4, 256)
    # The prompt's row first, so the decode rows are cache rows 1 and 2 (not 0..n-1), of different lengths.
    c = runner.new_seq()
    runner.forward([(c, prompt[:8])])
    seqs, logits = runner.prefill([p1, p2])
    (t1, e1), (t2, e2) = expected
    assert [int(lg[-1].argmax()) for lg in logits] == [t1, t2]
    out = runner.forward([(seqs[1], [t2]), (c, prompt[8:20]), (seqs[0], [t1])], [False, True, False])
    assert out[0].shape == (1, runner.vocab_size) and out[1].shape == (12, runner.vocab_size)
    assert torch.allclose(out[0], e2, rtol=0, atol=ATOL)
    assert torch.allclose(out[2], e1, rtol=0, atol=ATOL)
    assert torch.allclose(out[1], expected_chunk, rtol=0, atol=ATOL)
    assert [s.length for s in (seqs[0], seqs[1], c)] == [len(p1) + 1, len(p2) + 1, 20]
    assert torch.equal(runner.last_logits[1], out[1][-1]) and torch.equal(runner.last_logits[0], out[0][0])


@pytest.mark.slow
def test_all_decode_forward_in_any_row_order_equals_the_decode_step(loaded, prompt):
    runner = LlamaRunner(loaded.model, 4, 256)
    prompts = [prompt[:9], prompt[:14], prompt[:5]]
    seqs, logits = runner.prefill(prompts)
    nxt = [int(lg[-1].argmax()) for lg in logits]
    reference = runner.decode(nxt)
    for seq in seqs:
        seq.length -= 1  # the same step again: its keys are rewritten at the same position
    order = [2, 0, 1]
    out = runner.forward([(seqs[i], [nxt[i]]) for i in order])
    assert all(torch.equal(out[j], reference[i:i + 1]) for j, i in enumerate(order))


@pytest.mark.slow
def test_prefix_copied_from_pool_slots_gives_the_logits_of_computing_it(loaded, prompt):
    runner = LlamaRunner(loaded.model, 4, 256)
    runner.enable_pool(4096)
    # Slots as an allocator hands them out after evictions: the tail of a shuffled free list.
    free = list(range(1, 4096))
    random.Random(12).shuffle(free)
    slots = free[-len(prompt):]
    assert slots != sorted(slots)
    first = runner.new_seq()
    cut = 11  # stored across two forwards, the boundary inside the prefix reused below
    runner.forward([(first, prompt[:cut])], store=[slots[:cut]])
    other = runner.new_seq()  # a row beside it that stores nothing
    runner.forward([(other, prompt[:3]), (first, prompt[cut:])], store=[None, slots[cut:]])
    runner.release(first)
    runner.release(other)

    hit = 24
    follow = prompt[:hit] + loaded.tokenizer.encode(" castle gates, where an old man sold apples")
    reference = whole(runner, follow)
    seq = runner.new_seq(slots[:hit])
    assert seq.length == hit
    rest = runner.forward([(seq, follow[hit:hit + 4])], [True])[0]
    rest2 = runner.forward([(seq, follow[hit + 4:])], [True])[0]
    assert torch.allclose(torch.cat([rest, rest2]), reference[hit:], rtol=0, atol=ATOL)

    # Greedy decoding goes on from the copied prefix exactly as from a computed one.
    seqs, logits = runner.prefill([follow])
    a, b = int(logits[0][-1].argmax()), int(rest2[-1].argmax())
    assert a == b
    for _ in range(5):
        la, lb = runner.forward([(seqs[0], [a]), (seq, [b])])
        assert torch.allclose(la, lb, rtol=0, atol=ATOL)
        a, b = int(la.argmax()), int(lb.argmax())


@pytest.mark.slow
def test_greedy_decode_after_chunked_prefill_equals_decode_after_whole_prefill(loaded, prompt):
    tok = loaded.tokenizer
    other = tok.encode("The capital of France is")
    runner = LlamaRunner(loaded.model, 4, 256)

    def alone(ids: list[int]) -> list[int]:
        seqs, logits = runner.prefill([ids])
        out = [int(logits[0][-1].argmax())]
        while len(out) < 20:
            out.append(int(runner.decode([out[-1]])[0].argmax()))
        runner.release(seqs[0])
        return out

    expected = [alone(other), alone(prompt)]
    # `other` decodes while `prompt` is prefilled in chunks of 8 beside it, as TGI 3 mixes them;
    # `other` leaves first, so the prompt's row moves to row 0 mid-decode.
    seqs, logits = runner.prefill([other])
    a, out_a = seqs[0], [int(logits[0][-1].argmax())]
    b, out_b = runner.new_seq(), []
    at = 0
    while len(out_a) < 20 or len(out_b) < 20:
        rows, emit = [], []
        if len(out_a) < 20:
            rows.append((a, [out_a[-1]]))
            emit.append(out_a)
        if at < len(prompt):
            chunk = prompt[at:at + 8]
            at += len(chunk)
            rows.append((b, chunk))
            emit.append(out_b if at == len(prompt) else None)  # only the last chunk's token is kept
        elif len(out_b) < 20:
            rows.append((b, [out_b[-1]]))
            emit.append(out_b)
        for target, logits in zip(emit, runner.forward(rows), strict=True):
            if target is not None:
                target.append(int(logits.argmax()))
        if len(out_a) == 20 and a.row >= 0:
            runner.release(a)
    assert [out_a, out_b] == expected


@pytest.mark.slow
def test_kv_limit_and_bad_rows_are_refused(loaded, prompt):
    runner = LlamaRunner(loaded.model, 2, 32)
    seq = runner.new_seq()
    with pytest.raises(RuntimeError, match="KV cache limit exceeded"):
        runner.forward([(seq, prompt[:33])])
    with pytest.raises(ValueError, match="store lists 2 slots for a row of 3 tokens"):
        runner.forward([(seq, prompt[:3])], store=[[1, 2]])
    with pytest.raises(RuntimeError, match="enable_pool"):
        runner.new_seq([1, 2])
    runner.enable_pool(16)
    with pytest.raises(ValueError, match="pool slots must lie in 0..15"):
        runner.forward([(seq, prompt[:3])], store=[[1, 2, 16]])
    assert seq.length == 0
    runner.release(seq)
    with pytest.raises(ValueError, match="released"):
        runner.forward([(seq, prompt[:3])])


def test_the_cache_is_allocated_when_built_and_never_reallocated():
    from tgi_toolkit.engine.kv_cache import SlotCache

    # Room for every shape: 8 rows x 100 positions, allocated at once; no reserve within it moves anything.
    cache = SlotCache(2, 1, 4, torch.float32, max_rows=8, max_positions=100)
    assert (cache.rows, cache.positions) == (8, 100) and cache.k.shape == (2, 8, 1, 100, 4)
    ptr = cache.k.data_ptr()
    for _ in range(8):
        cache.add(99)
    cache.reserve(8, 100)
    assert cache.k.data_ptr() == ptr and (cache.rows, cache.positions) == (8, 100)
    with pytest.raises(RuntimeError, match="KV cache limit exceeded: 9 rows x 100 positions"):
        cache.reserve(9, 100)


def test_a_budget_smaller_than_rows_times_positions_is_re_laid_in_place():
    from tgi_toolkit.engine.kv_cache import SlotCache

    # 1000 positions in all for up to 8 rows of up to 400: first 8 rows of 1000 // 8 = 125.
    cache = SlotCache(2, 1, 4, torch.float32, max_rows=8, max_positions=400, capacity=1000)
    assert (cache.rows, cache.positions) == (8, 125)
    ptr = cache.k.data_ptr()
    a, b = cache.add(0), cache.add(0)
    cache.k[:, 0, :, :3] = 1.0
    cache.k[:, 1, :, :3] = 2.0
    a.length = b.length = 3
    # 200 positions: double (250) fits 1000 // 3 rows = 333, so 250; then 1000 // 250 = 4 rows.
    cache.reserve(3, 200)
    assert (cache.rows, cache.positions) == (4, 250) and cache.k.data_ptr() == ptr
    assert cache.k[:, 0, :, :3].eq(1.0).all() and cache.k[:, 1, :, :3].eq(2.0).all()  # rows kept their keys
    # 5 rows of 250 would take 1250: beyond the budget.
    with pytest.raises(RuntimeError, match="KV cache limit exceeded: 5 rows x 250 positions"):
        cache.reserve(5, 250)


def test_a_budget_of_fewer_positions_than_rows_starts_and_holds_one_request():
    from tgi_toolkit.engine.kv_cache import SlotCache

    # The tuner's smallest KV rung: one request of 64 + 16 - 1 = 79 tokens, with max_batch_size 256 and rows
    # of up to 128 positions. The budget is raised to one row of 128; 128 // 256 rows = 0 positions a row,
    # so it starts as 128 rows of 1 position (it divided by zero here before).
    cache = SlotCache(2, 1, 4, torch.float32, max_rows=256, max_positions=128, capacity=79)
    assert (cache.capacity, cache.rows, cache.positions) == (128, 128, 1)
    cache.add(78)  # a prompt of 78 tokens: 79 positions; one row of 79 (128 // 79 = 1 row)
    assert (cache.rows, cache.positions) == (1, 79)
    with pytest.raises(RuntimeError, match="KV cache limit exceeded: 2 rows x 79 positions"):
        cache.add(10)


def test_rows_that_emit_no_token_skip_the_lm_head(loaded, prompt):
    runner = LlamaRunner(loaded.model, 4, 256)
    seqs, logits = runner.prefill([prompt[:10]])
    token = int(logits[0][-1].argmax())
    chunk = runner.new_seq()
    both = LlamaRunner(loaded.model, 4, 256)
    ref_seqs, _ = both.prefill([prompt[:10]])
    ref_chunk = both.new_seq()
    expected = both.forward([(ref_seqs[0], [token]), (ref_chunk, prompt[:12])])
    out = runner.forward([(seqs[0], [token]), (chunk, prompt[:12])], emits=[True, False])
    assert out[1].shape == (0, runner.vocab_size)  # a prompt chunk before its last
    assert runner.last_logits.shape == (1, runner.vocab_size)
    assert torch.allclose(out[0], expected[0], rtol=0, atol=ATOL)
    assert chunk.length == 12  # its keys and values were still computed
    # the next chunk, emitting, sees them: the logits of the same prompt run in one forward
    nxt = runner.forward([(seqs[0], [int(out[0].argmax())]), (chunk, prompt[12:16])], emits=[True, True])
    exp = both.forward([(ref_seqs[0], [int(expected[0].argmax())]), (ref_chunk, prompt[12:16])])
    assert torch.allclose(nxt[1], exp[1], rtol=0, atol=ATOL)


@pytest.mark.slow
def test_bfloat16_chunked_prefill_with_a_pool_prefix_stays_close_to_whole_prefill(loaded, prompt):
    half = load_model(resolve_model(DEFAULT_MODEL_ID), dtype="bfloat16")
    exact = whole(LlamaRunner(loaded.model, 2, 256), prompt)[12:]
    runner = LlamaRunner(half.model, 4, 256)
    runner.enable_pool(512)
    reference = whole(runner, prompt)
    seq = runner.new_seq()
    runner.forward([(seq, prompt[:12])], store=[list(range(100, 88, -1))])
    decoding = runner.new_seq()
    runner.forward([(decoding, prompt[:5])])
    runner.release(seq)
    seq = runner.new_seq(list(range(100, 88, -1)))
    out = runner.forward([(decoding, [prompt[5]]), (seq, prompt[12:])], [False, True])[1]
    # Not exact: bfloat16 rounds differently with the GEMM's row count (0.75 apart at most, logits up
    # to ~35), but the chunked path is as close to float32 as the whole prefill is (measured: mean
    # 0.120 against 0.116, max 0.79 against 0.65).
    err, bf16_err = (out - exact).abs(), (reference[12:] - exact).abs()
    assert err.mean() <= 1.25 * bf16_err.mean() and err.max() <= 2 * bf16_err.max(), (err, bf16_err)
    assert (out.argmax(-1) == exact.argmax(-1)).float().mean() >= 0.9


@pytest.mark.slow
def test_a_pool_sized_for_the_whole_kv_budget_costs_no_memory_until_written(loaded, prompt):
    def resident_bytes() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    runner = LlamaRunner(loaded.model, 2, 256)
    before = resident_bytes()
    pool = runner.enable_pool(90_000)  # ~4 GiB of float32 keys and values for the default model
    assert pool.k.numel() * pool.k.element_size() * 2 > 4e9
    assert resident_bytes() - before < 64 << 20
    seq = runner.new_seq()
    runner.forward([(seq, prompt[:8])], store=[list(range(89_992, 90_000))])
    assert torch.equal(pool.k[:, 89_992:].transpose(1, 2), runner.cache.k[:, seq.row, :, :8])


def tiny_mistral() -> torch.nn.Module:
    """A tiny random Mistral with a sliding window of 5 (the default model has none); seeds torch."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=5,
                           max_position_embeddings=128)
    return MistralForCausalLM(config).eval()


def test_sliding_window_masks_in_chunks_and_decode_rows_match_transformers():
    """Mistral's sliding window in every mask the mixed forward builds: a chunk after cached positions, and
    one-token rows beside a chunk."""
    model = tiny_mistral()
    ids = torch.randint(0, 300, (23,)).tolist()
    other = torch.randint(0, 300, (9,)).tolist()
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0]
        expected_other = model(torch.tensor([other])).logits[0]
    runner = LlamaRunner(model, 4, 64)
    assert runner.sliding_window == 5
    seq, beside = runner.new_seq(), runner.new_seq()
    got, got_other = [], []
    for (a, b), (c, d) in zip(((0, 3), (3, 4), (4, 12), (12, 23)), ((0, 6), (6, 7), (7, 8), (8, 9)), strict=True):
        out = runner.forward([(beside, other[c:d]), (seq, ids[a:b])], [True, True])
        got_other.append(out[0])
        got.append(out[1])
    assert torch.allclose(torch.cat(got), expected, rtol=0, atol=1e-5)
    assert torch.allclose(torch.cat(got_other), expected_other, rtol=0, atol=1e-5)


def test_a_decode_step_with_nothing_running_gives_no_logits_not_the_last_steps(loaded, prompt):
    runner = LlamaRunner(loaded.model, 2, 64)
    seqs, logits = runner.prefill([prompt[:8]])
    assert runner.decode([int(logits[0][-1].argmax())]).shape == (1, runner.vocab_size)
    runner.release(seqs[0])
    assert runner.decode([]).shape == (0, runner.vocab_size)


def test_new_prompts_of_one_length_side_by_side_attend_in_one_call_with_each_ones_logits(loaded, prompt):
    """The batch table's forward: new prompts of one length next to each other are one SDPA call (`plan` groups
    them), and each gets the logits it gets alone; a decode row between them, another length, a chunk after cached
    positions or a sliding window's mask each start a call of their own."""
    from tgi_toolkit.engine import attention

    plan = attention.plan([(0, 0, 8), (1, 0, 8), (2, 0, 8), (3, 5, 1), (4, 0, 8), (5, 0, 6), (6, 4, 6), (7, 0, 6),
                           (9, 0, 6)], window=None)
    assert [(c.at, c.n, c.start, c.rows) for c in plan.chunks] == [
        (0, 8, 0, [0, 1, 2]), (25, 8, 0, [4]), (33, 6, 0, [5]), (39, 6, 4, [6]), (45, 6, 0, [7, 9])]
    assert plan.chunks[0].index is None and plan.chunks[4].index.tolist() == [7, 9]  # rows out of order: indexed
    assert plan.padded is None  # padded, the 9 chunks' 8 x 8 x 10 = 640 pairs pass 1.25 x their own calls' 424
    windowed = attention.plan([(0, 0, 8), (1, 0, 8)], window=4)  # each chunk masked: not grouped but padded
    assert windowed.chunks == [] and windowed.padded.count == 2

    runner = LlamaRunner(loaded.model, 8, 64)
    prompts = [prompt[i:i + 12] for i in (0, 3, 9)]
    alone = [whole(runner, ids) for ids in prompts]
    held = runner.new_seq()  # row 0 taken: the three land in rows 1..3, one slice of the cache
    seqs = [runner.new_seq() for _ in prompts]
    together = runner.forward([(seq, ids) for seq, ids in zip(seqs, prompts, strict=True)], [True] * 3)
    # two more, sent in the other order than their rows (5, then 4): their keys go through an index
    pair = [runner.new_seq(), runner.new_seq()]
    assert [s.row for s in pair] == [4, 5]
    swapped = runner.forward([(pair[1], prompts[0]), (pair[0], prompts[1])], [True, True])
    for got, want in zip([*together, *swapped], [*alone, *alone[:2]], strict=True):
        assert torch.allclose(got, want, rtol=0, atol=ATOL)
    # each decodes on from its own keys (written to its own row): the next token's logits as after its prompt alone
    runner.release(held)
    for seq, ids, logits in ((pair[1], prompts[0], swapped[0]), (pair[0], prompts[1], swapped[1])):
        token = int(logits[-1].argmax())
        assert torch.allclose(runner.forward([(seq, [token])])[0], whole(runner, ids + [token])[-1:], rtol=0,
                              atol=ATOL)


def test_prompt_chunks_of_several_lengths_and_starts_attend_in_one_padded_call_with_each_ones_logits(loaded, prompt):
    """Chunks the plan cannot group (other lengths, cached positions before them) are padded into one SDPA call
    where padding adds at most PAD_LIMIT (1.25) times the pairs their own calls compute, and each row's logits at
    every position are those it gets alone."""
    from tgi_toolkit.engine import attention

    # 8 new, 7 new and 6 after 2 cached: 3 x 8 x 8 = 192 pairs padded, against 64 + 49 + 6 x 8 = 161 (1.19)
    p = attention.plan([(0, 0, 8), (1, 0, 7), (2, 2, 6)], window=None).padded
    assert (p.count, p.n, p.span) == (3, 8, 8)
    assert p.tokens.tolist() == list(range(21)) and p.cache_rows.tolist() == [0, 1, 2]
    assert p.rows.tolist() == [0] * 8 + [1] * 7 + [2] * 6
    assert p.positions.tolist() == [*range(8), *range(7), *range(2, 8)]
    assert p.slots.tolist() == [*range(15), *range(16, 22)]
    assert p.gather.tolist() == [*range(15), 14, *range(15, 21), 20, 20]  # a pad repeats its chunk's last query
    # the third chunk's first query is position 2: keys 0-2; its pads are its last query's, position 7: all 8
    assert p.mask[2, 0, 0].tolist() == [True] * 3 + [False] * 5 and p.mask[2, 0, 7].all()
    assert p.mask[1, 0, 3].tolist() == [True] * 4 + [False] * 4
    # 16 new and 2 new: 2 x 16 x 16 = 512 against 256 + 4 = 260 (1.97): a call each
    apart = attention.plan([(0, 0, 16), (1, 0, 2)], window=None)
    assert apart.padded is None and [c.n for c in apart.chunks] == [16, 2]

    runner = LlamaRunner(loaded.model, 5, 64)
    first, second, third, fourth = prompt[:12], prompt[3:14], prompt[5:18], prompt[7:15]
    alone = [whole(runner, ids) for ids in (first, second, third, fourth)]
    cached, decoding = runner.new_seq(), runner.new_seq()
    runner.forward([(cached, third[:4]), (decoding, fourth[:-1])])  # 4 of the third's 13 tokens: 9 after them
    seqs = [runner.new_seq(), runner.new_seq()]
    # a decode row between the chunks: its one-token call beside the padded one
    rows = [(seqs[0], first), (decoding, fourth[-1:]), (seqs[1], second), (cached, third[4:])]
    # 3 x 12 x 13 = 468 pairs padded, against 144 + 121 + 9 x 13 = 382 (1.23)
    assert attention.plan([(s.row, s.length, len(ids)) for s, ids in rows], None).padded.count == 3
    together = runner.forward(rows, [True] * 4)
    for got, want in zip(together, [alone[0], alone[3][-1:], alone[1], alone[2][4:]], strict=True):
        assert got.shape == want.shape and torch.allclose(got, want, rtol=0, atol=ATOL)
