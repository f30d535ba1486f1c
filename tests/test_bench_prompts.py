"""Token-exact prompts from the server's tokenizer, a local one, a count-only one, and a dataset file."""

from __future__ import annotations

import json

import pytest

from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.bench.prompts import (
    LocalTokenizer,
    PromptFactory,
    ServerTokenizer,
    Tokenized,
    exact_prompt,
    load_dataset_text,
)

pytestmark = pytest.mark.slow

LENGTHS = [1, 2, 3, 7, 16, 31, 64, 100, 257, 999]


@pytest.fixture(scope="module")
def server_tokenizer(engine_url):
    tok = ServerTokenizer(engine_url)
    yield tok
    tok.close()


@pytest.fixture(scope="module")
def local_tokenizer(engine_url):
    from tgi_toolkit.models.files import conversion_cache_dir

    folders = sorted(p for p in conversion_cache_dir().iterdir() if (p / "tokenizer.json").exists())
    if not folders:
        pytest.skip("no converted tokenizer in the cache")
    return LocalTokenizer(str(folders[0]))


class CountOnly:
    """A tokenizer that gives counts and no offsets, as vLLM's /tokenize does."""

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, "count-only", 0

    def tokenize(self, text: str) -> Tokenized:
        self.calls += 1
        return Tokenized(self.inner.tokenize(text).count, None)


def test_every_length_is_exact_for_the_server(server_tokenizer):
    factory = PromptFactory(server_tokenizer, seed=3)
    for length in LENGTHS:
        prompts = factory.prompts(length, 3)
        assert [server_tokenizer.tokenize(p).count for p in prompts] == [length] * 3
        assert len(set(prompts)) == 3  # distinct prompts per request index
    assert PromptFactory(server_tokenizer, seed=3).prompt(64, 1) == factory.prompt(64, 1)  # seeded
    assert PromptFactory(server_tokenizer, seed=4).prompt(64, 1) != factory.prompt(64, 1)


def test_local_and_count_only_tokenizers_agree_with_the_server(server_tokenizer, local_tokenizer):
    count_only = CountOnly(local_tokenizer)
    for tok in (local_tokenizer, count_only):
        factory = PromptFactory(tok, seed=5)
        for length in (5, 48, 300):
            assert server_tokenizer.tokenize(factory.prompt(length, 0)).count == length
    assert count_only.calls < 3 * 40  # a binary search, not a walk


def test_shared_prefix(server_tokenizer):
    factory = PromptFactory(server_tokenizer, seed=1, prefix_tokens=20)
    prefix = factory.prefix()
    assert server_tokenizer.tokenize(prefix).count == 20
    prompts = factory.prompts(50, 4)
    assert all(p.startswith(prefix) for p in prompts) and len(set(prompts)) == 4
    assert {server_tokenizer.tokenize(p).count for p in prompts} == {50}
    with pytest.raises(BenchError, match="prefix_tokens"):
        factory.prompt(20)


def test_dataset_file_as_the_text_source(server_tokenizer, tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "Tell me about the history of Rome."},
        {"messages": [{"role": "user", "content": "Explain photosynthesis simply."}]},
        {"text": "Write a haiku about autumn leaves."}]))
    assert load_dataset_text(path)[1] == "Explain photosynthesis simply."
    factory = PromptFactory(server_tokenizer, dataset=path, seed=2)
    for length in (4, 40, 400):  # longer than the whole file: it goes round again
        prompt = factory.prompt(length, 0)
        assert server_tokenizer.tokenize(prompt).count == length
        assert any(word in prompt for word in ("Rome", "photosynthesis", "haiku"))
    with pytest.raises(BenchError, match="dataset"):
        PromptFactory(server_tokenizer, dataset=tmp_path / "missing.jsonl")


def test_text_too_short_is_refused(server_tokenizer):
    with pytest.raises(ValueError):
        exact_prompt(server_tokenizer, "two words", 10)
