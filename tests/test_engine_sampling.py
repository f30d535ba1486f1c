"""Token choice: the batched greedy path gives what log_softmax over the vocabulary gives."""

from __future__ import annotations

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
