"""Token choice: the batched greedy path gives what log_softmax over the vocabulary gives."""

from __future__ import annotations

import pytest
import torch

from tgi_toolkit.engine.sampling import SamplingParams, TokenChooser, choose_batch


def test_greedy_logprobs_and_top_tokens_equal_log_softmax():
    torch.manual_seed(0)
    logits = (torch.randn(6, 49152) * 4).bfloat16().float()  # bfloat16 logits, as the runner gives
    logits[2, 7] = logits[2, 9] = logits[2].max() + 1  # a tie: the first index wins, as argmax
    top_n = [0, 3, 0, 5, 1, 0]
    params = [SamplingParams(top_n_tokens=n) for n in top_n]
    params[4] = SamplingParams(do_sample=True, seed=7, top_n_tokens=2)  # a sampling row among greedy ones
    choosers = [TokenChooser(p) for p in params]
    reference = logits.log_softmax(-1)
    argmax = logits.argmax(-1)
    choices = choose_batch(logits.clone(), choosers, lambda i: [])
    for i, choice in enumerate(choices):
        if i == 4:
            continue
        assert choice.token_id == int(argmax[i])
        assert abs(choice.logprob - float(reference[i, choice.token_id])) < 1e-5
        values, ids = torch.topk(reference[i], top_n[i])
        assert [t for t, _ in choice.top_tokens] == ids.tolist()
        assert torch.allclose(torch.tensor([lp for _, lp in choice.top_tokens]), values, atol=1e-5)
    assert choices[2].token_id == 7

    sampled = choices[4]
    again = TokenChooser(params[4]).choose(logits[4], torch.tensor([], dtype=torch.long))
    assert (sampled.token_id, sampled.logprob, sampled.top_tokens) == (again.token_id, again.logprob,
                                                                        again.top_tokens)
    assert len(sampled.top_tokens) == 2


def test_an_all_greedy_batch_gives_the_same_choices_as_each_row_alone():
    torch.manual_seed(1)
    logits = (torch.randn(4, 1000) * 3).float()
    choosers = [TokenChooser(SamplingParams(top_n_tokens=n)) for n in (0, 2, 0, 5)]
    together = choose_batch(logits.clone(), choosers, lambda i: [])  # the whole tensor is worked on in place
    for i, chooser in enumerate(choosers):
        alone = choose_batch(logits[i:i + 1].clone(), [chooser], lambda i: [])[0]
        assert (together[i].token_id, [t for t, _ in together[i].top_tokens]) == (
            alone.token_id, [t for t, _ in alone.top_tokens])
        assert abs(together[i].logprob - alone.logprob) < 1e-6
        assert abs(together[i].logprob - float(logits[i].log_softmax(-1).max())) < 1e-5


# -- the processed distribution against transformers' logits processors -------------------------------------
# TGI's NextTokenChooser runs transformers' own processors: the repetition penalty, then its StaticWarper's
# temperature, top-k, top-p and typical-p, in the order transformers' generate applies them too.
VOCAB = 1000
HISTORY = [3, 3, 17, 42, 999, 500, 17, 0]  # prompt and generated ids, repeats included

SETTINGS = [
    dict(do_sample=True),  # the chat route's default: plain sampling at temperature 1
    dict(temperature=0.7), dict(temperature=1.6),
    dict(top_k=1), dict(top_k=10), dict(top_k=VOCAB + 5),
    dict(top_p=0.05), dict(top_p=0.5), dict(top_p=0.9), dict(top_p=0.95),
    dict(typical_p=0.2), dict(typical_p=0.9),
    dict(repetition_penalty=1.3), dict(repetition_penalty=0.8),
    dict(repetition_penalty=1.3, do_sample=True),
    dict(temperature=0.7, top_p=0.95),  # common chat settings
    dict(temperature=0.6, top_k=50, top_p=0.9),
    dict(temperature=1.4, top_k=40, typical_p=0.7),
    dict(temperature=0.8, top_k=100, top_p=0.9, typical_p=0.95, repetition_penalty=1.2, seed=11),
]


def _transformers_scores(logits: torch.Tensor, history: list[int], s: dict) -> torch.Tensor:
    from transformers import (
        LogitsProcessorList,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
        TypicalLogitsWarper,
    )

    processors = LogitsProcessorList()
    if s.get("repetition_penalty", 1.0) != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(s["repetition_penalty"]))
    if s.get("temperature", 1.0) != 1.0:
        processors.append(TemperatureLogitsWarper(s["temperature"]))
    if s.get("top_k"):
        processors.append(TopKLogitsWarper(s["top_k"]))
    if s.get("top_p", 1.0) < 1.0:
        processors.append(TopPLogitsWarper(s["top_p"]))
    if s.get("typical_p", 1.0) < 1.0:
        processors.append(TypicalLogitsWarper(s["typical_p"]))
    return processors(torch.tensor([history]), logits[None].clone())[0]


def _engine_logprobs(logits: torch.Tensor, history: list[int], s: dict) -> tuple[torch.Tensor, int]:
    """The engine's processed log-probabilities over the whole vocabulary (its top_n_tokens, all of them),
    through choose_batch as the backend calls it, and the token it picked."""
    chooser = TokenChooser(SamplingParams(**s, top_n_tokens=VOCAB))
    choice = choose_batch(logits[None].clone(), [chooser], lambda i: list(history))[0]
    out = torch.full((VOCAB,), float("nan"))
    for token, logprob in choice.top_tokens:
        out[token] = logprob
    return out, choice.token_id


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_the_next_token_distribution_is_transformers_one(settings):
    for trial in range(5):
        generator = torch.Generator().manual_seed(1000 + trial)
        scale = (0.5, 2.0, 4.0, 8.0, 3.0)[trial]  # flat to peaked distributions
        logits = torch.randn(VOCAB, generator=generator) * scale
        if trial == 4:
            logits[HISTORY[:4]] = torch.tensor([6.0, 6.0, -2.0, 9.0])  # repeated tokens among the likeliest
        expected = _transformers_scores(logits, HISTORY, settings).softmax(-1)
        logprobs, token = _engine_logprobs(logits, HISTORY, settings)
        assert not torch.isnan(logprobs).any()
        probs = logprobs.exp()
        assert torch.equal(probs > 0, expected > 0), "the same tokens are kept"
        assert torch.allclose(probs, expected, atol=1e-6, rtol=1e-4)
        assert expected[token] > 0
        if not SamplingParams(**settings).sampling:  # greedy after the penalty
            assert token == int(expected.argmax())


def test_top_p_keeps_the_smallest_set_that_reaches_p_and_at_least_one_token():
    # probabilities 0.5, 0.3, 0.15, 0.05 (worked by hand): top_p 0.8 keeps {0.5, 0.3} (their 0.8 reaches it),
    # 0.81 adds 0.15, and 0.4 keeps the single 0.5 token; transformers' TopPLogitsWarper agrees on each.
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    for top_p, kept in ((0.8, [0, 1]), (0.81, [0, 1, 2]), (0.4, [0])):
        chooser = TokenChooser(SamplingParams(top_p=top_p, top_n_tokens=4, seed=0))
        choice = choose_batch(logits[None].clone(), [chooser], lambda i: [])[0]
        assert sorted(t for t, lp in choice.top_tokens if lp > float("-inf")) == kept
        reference = _transformers_scores(logits, [], dict(top_p=top_p))
        assert sorted(torch.nonzero(reference > float("-inf")).flatten().tolist()) == kept


def test_a_seed_draws_the_same_token_and_the_draws_follow_the_distribution():
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(20, generator=generator) * 1.5
    settings = dict(temperature=0.8, top_k=8, top_p=0.9)
    expected = _transformers_scores(logits, [], settings).softmax(-1)
    draws = []
    for seed in range(3000):
        chooser = TokenChooser(SamplingParams(**settings, seed=seed))
        first = chooser.choose(logits, torch.tensor([], dtype=torch.long)).token_id
        again = TokenChooser(SamplingParams(**settings, seed=seed)).choose(logits, torch.tensor([], dtype=torch.long))
        assert again.token_id == first
        draws.append(first)
    counts = torch.bincount(torch.tensor(draws), minlength=20).double() / len(draws)
    assert float(counts[expected == 0].sum()) == 0.0  # never a token the warpers removed
    # 3000 draws: each frequency within 4 standard deviations of its probability
    sd = (expected.double() * (1 - expected.double()) / len(draws)).sqrt()
    assert bool(((counts - expected.double()).abs() <= 4 * sd + 1e-9).all())


def test_the_frequency_penalty_is_tgi_s_share_of_the_ids_so_far():
    # TGI subtracts penalty x count / len(ids): ids [5, 5, 7, 9], penalty 1.0, logits all 0 -> token 5 at
    # -2/4 = -0.5, tokens 7 and 9 at -1/4 = -0.25, the others at 0 (worked by hand); greedy picks token 0.
    history = [5, 5, 7, 9]
    chooser = TokenChooser(SamplingParams(frequency_penalty=1.0, top_n_tokens=12))
    choice = choose_batch(torch.zeros(1, 12), [chooser], lambda i: history)[0]
    scores = torch.zeros(12)
    scores[5], scores[7], scores[9] = -0.5, -0.25, -0.25
    expected = scores.log_softmax(-1)
    got = dict(choice.top_tokens)
    assert choice.token_id == 0
    assert all(abs(got[t] - float(expected[t])) < 1e-6 for t in range(12))
