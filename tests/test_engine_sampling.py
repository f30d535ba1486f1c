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
    choices = choose_batch(logits, choosers, lambda i: [])

    reference = logits.log_softmax(-1)
    for i, choice in enumerate(choices):
        if i == 4:
            continue
        assert choice.token_id == int(logits[i].argmax())
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
