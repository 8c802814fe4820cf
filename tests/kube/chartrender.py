"""Render the Helm chart in deploy/helm/shoal without helm, for tests.

A small interpreter for the part of Go's text/template and Helm's functions that the
chart uses (if/with/range/else/end/define, pipelines, `include`, `toYaml`, `nindent`, `quote`,
`default`, `omit`, `not`, `join`, `print`, `printf`, `sha256sum`). Anything else is an error, so a
template that starts using more fails here loudly instead of being checked loosely.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACTION = re.compile(r"\{\{(-\s)?\s*(.*?)\s*(\s-)?\}\}", re.S)
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\(|\)|\||[^\s()|]+')


@dataclass
class Node:
    kind: str  # text, out, if, with, define
    value: str = ""
    body: list[Node] = field(default_factory=list)
    other: list[Node] = field(default_factory=list)  # the else branch


def _lex(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    trim_next = False
    for m in ACTION.finditer(text):
        chunk = text[pos : m.start()]
        if trim_next:
            chunk = chunk.lstrip()
        if m.group(1):
            chunk = chunk.rstrip()
        out.append(("text", chunk))
        out.append(("action", m.group(2)))
        trim_next = bool(m.group(3))
        pos = m.end()
    tail = text[pos:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def _parse(tokens: list[tuple[str, str]], i: int = 0) -> tuple[list[Node], int, str]:
    """Nodes up to a closing `end`/`else` (returned as the third item) or the end."""
    nodes: list[Node] = []
    while i < len(tokens):
        kind, value = tokens[i]
        i += 1
        if kind == "text":
            if value:
                nodes.append(Node("text", value))
            continue
        if value.startswith("/*"):
            continue
        word = value.split(None, 1)[0] if value else ""
        if word in ("end", "else"):
            return nodes, i, word
        if word in ("if", "with", "range", "define"):
            node = Node(word, value.split(None, 1)[1])
            node.body, i, closer = _parse(tokens, i)
            if closer == "else":
                node.other, i, closer = _parse(tokens, i)
            if closer != "end":
                raise ValueError(f"{word} without end")
            nodes.append(node)
            continue
        nodes.append(Node("out", value))
    return nodes, i, ""


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).removesuffix("\n")


class Chart:
    def __init__(self, path: Path, release: str = "shoal", namespace: str = "shoal-system"):
        self.path = path
        meta = yaml.safe_load((path / "Chart.yaml").read_text())
        self.chart = {
            "Name": meta["name"],
            "Version": meta["version"],
            "AppVersion": meta.get("appVersion", ""),
        }
        self.release = {"Name": release, "Namespace": namespace}
        self.defaults = yaml.safe_load((path / "values.yaml").read_text())
        self.templates: dict[str, list[Node]] = {}
        self.defines: dict[str, list[Node]] = {}
        for file in sorted((path / "templates").iterdir()):
            nodes, _, closer = _parse(_lex(file.read_text()))
            if closer:
                raise ValueError(f"{file.name}: unexpected {closer}")
            self.templates[f"{meta['name']}/templates/{file.name}"] = nodes
            for node in nodes:
                if node.kind == "define":
                    self.defines[_string(node.value)] = node.body

    def values(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The values a render with `overrides` sees (coalesced over values.yaml)."""
        return _merge(self.defaults, overrides or {})

    def render(self, values: dict[str, Any] | None = None) -> dict[str, str]:
        """file name -> rendered text, for every template but the helpers."""
        merged = self.values(values)
        top = {
            "Values": merged,
            "Release": self.release,
            "Chart": self.chart,
            "Template": {"BasePath": f"{self.chart['Name']}/templates"},
        }
        out = {}
        for name, nodes in self.templates.items():
            if not name.endswith(".tpl"):
                out[name.rsplit("/", 1)[1]] = self._run(nodes, top, top)
        return out

    # ---- evaluation -------------------------------------------------------------------

    def _run(self, nodes: list[Node], dot: Any, top: dict[str, Any]) -> str:
        parts = []
        for node in nodes:
            if node.kind == "text":
                parts.append(node.value)
            elif node.kind == "out":
                value = self._pipeline(node.value, dot, top)
                parts.append("" if value is None else _text(value))
            elif node.kind == "range":
                items = self._pipeline(node.value, dot, top)
                if truthy(items):
                    parts += [self._run(node.body, item, top) for item in items]
                else:
                    parts.append(self._run(node.other, dot, top))
            elif node.kind in ("if", "with"):
                value = self._pipeline(node.value, dot, top)
                if truthy(value):
                    parts.append(self._run(node.body, value if node.kind == "with" else dot, top))
                else:
                    parts.append(self._run(node.other, dot, top))
        return "".join(parts)

    def _pipeline(self, text: str, dot: Any, top: dict[str, Any]) -> Any:
        tokens = TOKEN.findall(text)
        value, rest = self._commands(tokens, dot, top)
        if rest:
            raise ValueError(f"unexpected {rest!r} in {text!r}")
        return value

    def _commands(self, tokens: list[str], dot: Any, top: dict[str, Any]) -> tuple[Any, list[str]]:
        value: Any = _NOTHING
        while tokens and tokens[0] != ")":
            command: list[str | tuple[Any]] = []
            while tokens and tokens[0] not in ("|", ")"):
                token = tokens.pop(0)
                if token == "(":
                    inner, tokens = self._commands(tokens, dot, top)
                    if not tokens or tokens[0] != ")":
                        raise ValueError("unbalanced parentheses")
                    tokens = tokens[1:]
                    command.append((inner,))
                else:
                    command.append(token)
            args = [self._operand(a, dot, top) for a in command[1:]]
            if value is not _NOTHING:
                args.append(value)
            head = command[0]
            if isinstance(head, str) and head in self.functions():
                value = self.functions()[head](*args)
            elif not args:
                value = self._operand(head, dot, top)
            else:
                raise ValueError(f"unknown function {head!r}")
            if tokens and tokens[0] == "|":
                tokens = tokens[1:]
        return value, tokens

    def _operand(self, token: str | tuple[Any], dot: Any, top: dict[str, Any]) -> Any:
        if isinstance(token, tuple):
            return token[0]
        if token.startswith('"'):
            return _string(token)
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if token in ("true", "false"):
            return token == "true"
        if token == ".":
            return dot
        if token.startswith("$."):
            return _field(top, token[2:])
        if token.startswith("."):
            return _field(dot, token[1:])
        raise ValueError(f"unsupported operand {token!r}")

    def functions(self) -> dict[str, Callable[..., Any]]:
        return {
            "include": self._include,
            "toYaml": to_yaml,
            "nindent": lambda n, s: "\n" + _indent(n, _text(s)),
            "indent": lambda n, s: _indent(n, _text(s)),
            "quote": lambda *s: " ".join('"' + _text(x).replace('"', '\\"') + '"' for x in s),
            "default": lambda d, v=None: v if truthy(v) else d,
            "omit": lambda d, *keys: {k: v for k, v in (d or {}).items() if k not in keys},
            "not": lambda v: not truthy(v),
            "join": lambda sep, items: sep.join(_text(x) for x in items or []),
            "print": lambda *a: "".join(_text(x) for x in a),
            "printf": lambda f, *a: f % tuple(_text(x) for x in a),
            "sha256sum": lambda s: hashlib.sha256(_text(s).encode()).hexdigest(),
        }

    def _include(self, name: str, dot: Any) -> str:
        top = dot if isinstance(dot, dict) and "Values" in dot else {}
        nodes = self.defines[name] if name in self.defines else self.templates.get(name)
        if nodes is None:
            raise ValueError(f"include of unknown template {name!r}")
        return self._run([n for n in nodes if n.kind != "define"], dot, top)


_NOTHING = object()


def _string(token: str) -> str:
    token = token.strip()
    if not (token.startswith('"') and token.endswith('"')):
        raise ValueError(f"not a string literal: {token!r}")
    return bytes(token[1:-1], "utf-8").decode("unicode_escape")


def _field(value: Any, path: str) -> Any:
    for part in path.split(".") if path else []:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return to_yaml(value)  # Go would print a map literal; nothing here relies on it
    return str(value)


def _indent(n: int, text: str) -> str:
    pad = " " * n
    return "\n".join(pad + line for line in text.split("\n"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Helm's value coalescing: maps merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
