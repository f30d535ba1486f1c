"""Token-exact prompts: text that the server's tokenizer turns into exactly the requested length.

Synthetic prompts drift from their target (special tokens, merges at the joins; docs/measurement.md
pitfall 2), so a prompt is cut from a longer seeded text at a token boundary that the tokenizer
itself reports (offsets), re-tokenized, and repaired until its count is exact. Without offsets (vLLM's
`/tokenize` gives counts only) a binary search over characters finds the cut. The scenarios then
check the length the server reports for a real request (`check_prompt_length`).

Tokenizers: the server's own `/tokenize` (TGI's `[{id,text,start,stop}]`, or vLLM's `{count,tokens}`),
or a local one (`--tokenizer-name`: a transformers name or path, or a tokenizer object).
Text: seeded word salad from a fixed English vocabulary, or a dataset file (.txt, .json, .jsonl).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from tgi_toolkit.bench.errors import BenchError

# Common English words: prompts look like text to the tokenizer (about 1.2 tokens a word).
WORDS = (
    "the of and to in is was it for on with as at by from that this which be have are not or an they "
    "his her their time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book eye job "
    "word business issue side kind head house service friend father power hour game line end member law "
    "car city community name president team minute idea kid body information back parent face others "
    "level office door health person art war history party result change morning reason research girl "
    "guy moment air teacher force education foot boy age policy music market sense nation plan college "
    "interest death experience effect use class control care field development role effort rate heart "
    "drug show leader light voice wife police mind price report decision son view relationship town road "
    "arm difference value building action model season society tax director position player record paper "
    "space ground form event official matter center couple site project activity star table need court "
    "oil situation cost industry figure street image phone data picture practice piece land product doctor "
    "wall patient worker news test movie north love support technology step baby computer type attention "
    "film tree source organization hair window evidence population site economy garden river mountain "
    "simple quick bright quiet strong early late small large old new good great high long little own other "
    "make take give find think tell become leave feel bring begin keep hold write stand hear allow meet "
    "run move live believe happen carry talk appear produce sit offer consider suggest speak read spend grow "
    "open walk win teach remember love consider build stay fall cut reach kill raise pass sell decide return"
).split()


@dataclass
class Tokenized:
    count: int
    stops: list[int] | None  # end offset (characters) of each token, when the tokenizer gives them


class Tokenizer(Protocol):
    name: str

    def tokenize(self, text: str) -> Tokenized: ...


class ServerTokenizer:
    """The server's own tokenizer over HTTP: TGI's `/tokenize`, else vLLM's."""

    def __init__(self, url: str, *, api_key: str | None = None, model: str | None = None,
                 timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        self.model = model
        self.name = f"{url.rstrip('/')}/tokenize"
        self._style: str | None = None  # "tgi" | "vllm", found on first use

    def close(self) -> None:
        self._client.close()

    def tokenize(self, text: str) -> Tokenized:
        if self._style in (None, "tgi"):
            response = self._client.post("/tokenize", json={"inputs": text})
            tokens = _json(response) if response.status_code == 200 else None
            if isinstance(tokens, list) and all(isinstance(t, dict) and "stop" in t for t in tokens):
                self._style = "tgi"
                return Tokenized(len(tokens), [int(t["stop"]) for t in tokens])
            if self._style == "tgi":
                raise BenchError("tokenizer", f"POST {self.name} answered {response.status_code}: "
                                              f"{response.text[:200]}")
        response = self._client.post("/tokenize", json={"prompt": text, "model": self.model,
                                                         "add_special_tokens": True})
        payload = _json(response) if response.status_code == 200 else None
        if not isinstance(payload, dict) or not isinstance(payload.get("count"), int):
            raise BenchError("tokenizer", f"the server at {self._client.base_url} has no usable /tokenize "
                                          f"(HTTP {response.status_code}); pass a local tokenizer",
                             "--tokenizer-name NAME_OR_PATH")
        self._style = "vllm"
        return Tokenized(int(payload["count"]), None)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:  # not JSON: the caller says the route is not usable
        return None


class LocalTokenizer:
    """A transformers tokenizer (a name, a path, or the object), with special tokens as servers add them."""

    def __init__(self, tokenizer: Any) -> None:
        if isinstance(tokenizer, (str, Path)):
            from transformers import AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
            except (OSError, ValueError) as exc:
                raise BenchError("tokenizer_name", f"cannot load {tokenizer!r}: {exc}",
                                 "a Hugging Face model id or a folder with tokenizer files") from exc
        self._tok = tokenizer
        self.name = str(getattr(tokenizer, "name_or_path", type(tokenizer).__name__))

    def tokenize(self, text: str) -> Tokenized:
        try:
            enc = self._tok(text, add_special_tokens=True, return_offsets_mapping=True)
            return Tokenized(len(enc["input_ids"]), [stop for _, stop in enc["offset_mapping"]])
        except NotImplementedError:  # slow tokenizers have no offsets
            return Tokenized(len(self._tok(text, add_special_tokens=True)["input_ids"]), None)


def exact_prompt(tokenizer: Tokenizer, text: str, length: int, *, keep: int = 0) -> str:
    """The prefix of `text` (at least `keep` characters) that tokenizes to exactly `length` tokens.

    Raises ValueError when `text` is too short or no cut gives that length.
    """
    whole = tokenizer.tokenize(text)
    if whole.count < length:
        raise ValueError(f"text of {whole.count} tokens is shorter than {length}")
    if whole.stops is not None:
        index = length - 1
        for _ in range(8):  # repair: the re-tokenized cut may merge or split at its end
            cut = whole.stops[min(max(index, 0), len(whole.stops) - 1)]
            if cut > keep:
                count = tokenizer.tokenize(text[:cut]).count
                if count == length:
                    return text[:cut]
                index += length - count
            else:
                index += 1
    return _bisect_prompt(tokenizer, text, length, keep)


def _bisect_prompt(tokenizer: Tokenizer, text: str, length: int, keep: int) -> str:
    # count(text[:c]) grows (almost) monotonically with c: find the shortest cut reaching `length`.
    lo, hi = keep + 1, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        if tokenizer.tokenize(text[:mid]).count < length:
            lo = mid + 1
        else:
            hi = mid
    for cut in range(lo, min(lo + 16, len(text) + 1)):
        if text[cut - 1:cut].isspace():
            continue  # a trailing space is its own token for some tokenizers: cut before it
        if tokenizer.tokenize(text[:cut]).count == length:
            return text[:cut]
    raise ValueError(f"no cut of the text gives exactly {length} tokens")


def load_dataset_text(path: str | Path) -> list[str]:
    """Texts of a dataset file: .txt (paragraphs), .json (a list), .jsonl (one record a line).

    A record is a string, or an object whose first of `prompt`, `text`, `input`, `question`,
    `instruction`, `content` or `messages` (their contents joined) holds the text.
    """
    path = Path(path)
    if not path.is_file():
        raise BenchError("dataset", f"{path} is not a file", ".txt, .json or .jsonl")
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".jsonl":
        records: list[Any] = [json.loads(line) for line in raw.splitlines() if line.strip()]
    elif path.suffix == ".json":
        data = json.loads(raw)
        records = data if isinstance(data, list) else [data]
    else:
        records = [p for p in raw.split("\n\n")]
    texts = [t for t in (_record_text(r) for r in records) if t and t.strip()]
    if not texts:
        raise BenchError("dataset", f"{path} holds no text", "records with a prompt or text field")
    return texts


def _record_text(record: Any) -> str:
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        for key in ("prompt", "text", "input", "question", "instruction", "content"):
            if isinstance(record.get(key), str):
                return record[key]
        if isinstance(record.get("messages"), list):
            return "\n".join(_record_text(m) for m in record["messages"])
        if isinstance(record.get("conversations"), list):
            return "\n".join(str(m.get("value", "")) for m in record["conversations"] if isinstance(m, dict))
    return ""


class PromptFactory:
    """Seeded, token-exact prompts: `prompt(length, index, salt)` is the same text on every call.

    salt: a run's own key (bench.run.Run gives each run and point one). A prefix-caching server
    (TGI 3, vLLM) keeps what it saw, so a prompt sent again, in a later point or run, would be
    measured from its cache; the salt makes every measured prompt new to the server.

    prefix_tokens: the first `prefix_tokens` tokens are shared by every prompt (prefix caching).
    dataset: a file whose text is cut into prompts instead of word salad.
    """

    def __init__(self, tokenizer: Tokenizer, *, seed: int = 0, prefix_tokens: int = 0,
                 dataset: str | Path | None = None) -> None:
        if prefix_tokens < 0:
            raise BenchError("prefix_tokens", f"{prefix_tokens} is negative", "integers >= 0")
        self.tokenizer, self.seed, self.prefix_tokens = tokenizer, seed, prefix_tokens
        self.dataset = str(dataset) if dataset is not None else None
        self._texts = load_dataset_text(dataset) if dataset is not None else None
        self._cache: dict[tuple[int, int, str], str] = {}
        self._prefix: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer.name, "seed": self.seed, "prefix_tokens": self.prefix_tokens,
                "dataset": self.dataset}

    def _text(self, rng: random.Random, approx_tokens: int) -> str:
        if self._texts is None:
            words = rng.choices(WORDS, k=approx_tokens + 16)
            # sentences of 8-16 words, so punctuation tokens appear as in real text
            out, i = [], 0
            while i < len(words):
                n = rng.randint(8, 16)
                sentence = " ".join(words[i:i + n])
                out.append(sentence[:1].upper() + sentence[1:] + ".")
                i += n
            return " ".join(out)
        start = rng.randrange(len(self._texts))
        parts, chars = [], 0
        # a token is rarely over 8 characters of text; a small dataset goes round again
        while chars < approx_tokens * 8 + 64:
            part = self._texts[(start + len(parts)) % len(self._texts)]
            parts.append(part)
            chars += len(part) + 2
        return "\n\n".join(parts)

    def prefix(self) -> str:
        if self._prefix is None:
            self._prefix = ""
            if self.prefix_tokens:
                rng = random.Random(f"{self.seed}:prefix")
                self._prefix = self._cut(rng, self.prefix_tokens, "")
        return self._prefix

    def prompt(self, length: int, index: int = 0, salt: str = "") -> str:
        """The `index`-th prompt of exactly `length` tokens (under `salt`)."""
        key = (length, index, salt)
        if key not in self._cache:
            if length <= self.prefix_tokens:
                raise BenchError("prefix_tokens", f"{self.prefix_tokens} leaves no room in prompts of {length} tokens",
                                 f"integers < {length}")
            rng = random.Random(f"{self.seed}:{length}:{index}" + (f":{salt}" if salt else ""))
            self._cache[key] = self._cut(rng, length, self.prefix())
        return self._cache[key]

    def prompts(self, length: int, n: int, salt: str = "") -> list[str]:
        return [self.prompt(length, i, salt) for i in range(n)]

    def extend(self, head: str, length: int, key: str) -> str:
        """Text that starts with `head` and is exactly `length` tokens, the rest seeded by `key` (and the
        seed): a shared prefix plus a suffix, or a conversation's history plus a new message."""
        rng = random.Random(f"{self.seed}:extend:{key}")
        return self._cut(rng, length, head)

    def _cut(self, rng: random.Random, length: int, head: str) -> str:
        sep = " " if head else ""
        for attempt in range(4):
            text = head + sep + self._text(rng, length * (attempt + 1))
            try:
                return exact_prompt(self.tokenizer, text, length, keep=len(head))
            except BenchError:
                raise  # the tokenizer itself failed (a ValueError too): its message is the one to show
            except ValueError:
                continue
        raise BenchError("prompt_tokens", f"could not build a prompt of exactly {length} tokens with "
                                          f"{self.tokenizer.name}", "lengths the tokenizer can reach")


def make_tokenizer(url: str, tokenizer: Any = None, *, api_key: str | None = None,
                   model: str | None = None) -> Tokenizer:
    """A local tokenizer when one is named (or given), else the server's `/tokenize`."""
    if tokenizer is None:
        return ServerTokenizer(url, api_key=api_key, model=model)
    if hasattr(tokenizer, "tokenize") and hasattr(tokenizer, "name") and not callable(tokenizer):
        return tokenizer
    return LocalTokenizer(tokenizer)
