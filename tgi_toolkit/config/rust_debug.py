"""Read and write the launcher's `Args { ... }` log line (Rust's `Debug` format).

Values: `"quoted strings"`, `None`, `Some(x)` (also pretty-printed as `Some( x, )`), `true`/`false`,
numbers, lists `[a, b]`, and enum variants written as bare CamelCase names (`Gptq`, `On`). Python
reprs (single quotes, `True`) are read too, so a log line written by Python code parses the same way.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<number>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.]))
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<punct>[{}()\[\],:])
    )""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


class Variant(str):
    """A bare enum variant such as `Gptq` or `BitsandbytesNf4`: the caller maps it to a value."""


class DebugSyntaxError(ValueError):
    pass


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


class _Parser:
    def __init__(self, text: str, pos: int = 0) -> None:
        self.text = text
        self.pos = pos

    def peek(self) -> tuple[str, str] | None:
        match = _TOKEN.match(self.text, self.pos)
        if not match or match.end() == match.start():
            return None
        kind = match.lastgroup or ""
        return kind, match.group(kind)

    def take(self) -> tuple[str, str]:
        match = _TOKEN.match(self.text, self.pos)
        if not match or match.lastgroup is None:
            snippet = self.text[self.pos: self.pos + 30]
            raise DebugSyntaxError(f"unexpected text at {self.pos}: {snippet!r}")
        self.pos = match.end()
        return match.lastgroup, match.group(match.lastgroup)

    def expect(self, punct: str) -> None:
        kind, value = self.take()
        if kind != "punct" or value != punct:
            raise DebugSyntaxError(f"expected {punct!r} at {self.pos}, found {value!r}")

    def value(self) -> Any:
        kind, token = self.take()
        if kind == "string":
            return _unquote(token)
        if kind == "number":
            return float(token) if any(c in token for c in ".eE") else int(token)
        if kind == "punct" and token == "[":
            items = []
            while not self._closing("]"):
                items.append(self.value())
                self._comma()
            self.expect("]")
            return items
        if kind == "ident":
            if token == "None":
                return None
            if token in ("true", "True"):
                return True
            if token in ("false", "False"):
                return False
            if token == "Some":
                self.expect("(")
                inner = self.value()
                self._comma()
                self.expect(")")
                return inner
            return Variant(token)
        raise DebugSyntaxError(f"unexpected {token!r} at {self.pos}")

    def _closing(self, punct: str) -> bool:
        nxt = self.peek()
        return nxt is not None and nxt == ("punct", punct)

    def _comma(self) -> None:
        if self._closing(","):
            self.take()

    def struct_body(self) -> dict[str, Any]:
        """`{ key: value, ... }` from the opening brace."""
        self.expect("{")
        out: dict[str, Any] = {}
        while not self._closing("}"):
            kind, key = self.take()
            if kind != "ident":
                raise DebugSyntaxError(f"expected a field name at {self.pos}, found {key!r}")
            self.expect(":")
            out[key] = self.value()
            self._comma()
        self.expect("}")
        return out


def parse_args_struct(text: str) -> dict[str, Any]:
    """The fields of the first `Args { ... }` in `text` (a log line, or a whole log)."""
    match = re.search(r"\bArgs\s*(?=\{)", text)
    if match is None:
        raise DebugSyntaxError("no `Args { ... }` found")
    return _Parser(text, match.end()).struct_body()


def parse_value(text: str) -> Any:
    """One value in Debug syntax, e.g. `Some(4)`, `"x"`, `[]`, `Gptq`."""
    parser = _Parser(text)
    value = parser.value()
    if text[parser.pos:].strip():
        raise DebugSyntaxError(f"trailing text after value: {text[parser.pos:]!r}")
    return value


def render_value(value: Any, *, optional: bool, variant: str | None = None) -> str:
    """`value` as Rust's Debug would print it; `variant` is the enum variant name for enum values."""
    if value is None:
        return "None"
    if variant is not None:
        text = variant
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(render_value(item, optional=False) for item in value) + "]"
    else:
        text = str(value)
    return f"Some({text})" if optional else text
