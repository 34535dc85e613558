"""A script's text assembled from its file and the pieces of lua/includes/ it asks for, with
only what it runs.

A line `--- @include "name"` writes in lua/includes/name.lua, once per script, where it is
first asked for. Redis runs a script's whole text at each call, so each `local function` of
each include is made anew at every call (a closure, whose captured locals Lua finds one by one
among those captured before): a function the script never calls costs time all the same. So
the top-level `local function`s and constants that nothing kept refers to are left out,
repeated until nothing more goes.

A statement is top-level when it begins a line at column 0 outside any block or bracket (the
style every file of lua/ keeps). A name refers to a local when it is not a field (`a.name`,
`a:name`). A statement is left out only when it is a `local function`, or a `local` whose
value calls nothing but `math` (so leaving it out changes no state), and none of the names it
defines appears in a kept statement. Anything this reading does not understand (an unfinished
string or block, a closing word at column 0 outside a block) raises LuaLayoutError at start-up.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

_INCLUDE = re.compile(r'--- @include "([a-z_]+)"')

# Lua 5.1's reserved words (goto is 5.2's, and harmless here).
_KEYWORDS = frozenset({"and", "break", "do", "else", "elseif", "end", "false", "for", "function"})
_KEYWORDS |= {"goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then"}
_KEYWORDS |= {"true", "until", "while"}
_OPENERS = frozenset({"function", "if", "do", "repeat", "(", "{", "["})
_CLOSERS = frozenset({"end", "until", ")", "}", "]"})
# Words that continue a statement even at column 0.
_CONTINUING = _CLOSERS | {"else", "elseif"}

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<long_comment>--\[(?P<lc_eq>=*)\[)
    | (?P<comment>--[^\n]*)
    | (?P<long_string>\[(?P<ls_eq>=*)\[)
    | (?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<op>\.\.\.|\.\.|==|~=|<=|>=|::|[-+*/%^\#&|~<>=(){}\[\];:,.])
    """,
    re.VERBOSE | re.DOTALL,
)


class LuaLayoutError(ValueError):
    """A file of lua/ that the assembly cannot read safely."""


@dataclass(frozen=True)
class _Token:
    kind: str  # name, keyword, number, string, op, include
    value: str
    line: int  # 0-based
    first: bool  # the first token on its line, at column 0


def _tokens(text: str, where: str) -> Iterator[_Token]:
    pos, line, line_start = 0, 0, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise LuaLayoutError(f"{where}:{line + 1}: cannot read {text[pos : pos + 20]!r}")
        kind = match.lastgroup
        end = match.end()
        if kind in ("long_comment", "long_string"):
            closing = "]" + (match["lc_eq"] or match["ls_eq"] or "") + "]"
            found = text.find(closing, end)
            if found < 0:
                raise LuaLayoutError(f"{where}:{line + 1}: unfinished long bracket")
            end = found + len(closing)
        value = text[pos:end]
        at_line_start = pos == line_start
        if kind == "comment" and at_line_start and (include := _INCLUDE.fullmatch(value)):
            yield _Token("include", include[1], line, True)
        elif kind in ("name", "number", "op", "string", "long_string"):
            if kind == "name" and value in _KEYWORDS:
                kind = "keyword"
            yield _Token("string" if kind == "long_string" else kind, value, line, at_line_start)
        newlines = value.count("\n")
        if newlines:
            line += newlines
            line_start = pos + value.rindex("\n") + 1
        pos = end


@dataclass
class _Unit:
    """A top-level statement with the comment lines after it; its includes' pieces
    in `pieces`, by line."""

    start: int  # its first line in its file, 0-based
    lines: list[str]
    tokens: list[_Token]
    defines: frozenset[str] = frozenset()  # empty: kept whenever its parent is
    pieces: dict[int, list[_Unit]] = field(default_factory=dict)
    parent: _Unit | None = None

    def uses(self) -> set[str]:
        names: set[str] = set()
        after_dot = False
        for token in self.tokens:
            if token.kind == "name" and not after_dot:
                names.add(token.value)
            after_dot = token.kind == "op" and token.value in (".", ":")
        return names


def _units(text: str, where: str) -> list[_Unit]:
    """The file's top-level statements (the first holds what comes before the first one)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    by_start: dict[int, list[_Token]] = {0: []}
    depth = 0
    for token in _tokens(text, where):
        if token.first and depth == 0 and token.value not in _CONTINUING:
            if token.line != starts[-1]:
                starts.append(token.line)
                by_start[token.line] = []
        elif token.first and depth == 0 and token.kind == "keyword":
            raise LuaLayoutError(f"{where}:{token.line + 1}: {token.value!r} outside a block")
        by_start[starts[-1]].append(token)
        if token.kind in ("keyword", "op") and token.value in _OPENERS:
            depth += 1
        elif token.kind in ("keyword", "op") and token.value in _CLOSERS:
            depth -= 1
            if depth < 0:
                raise LuaLayoutError(f"{where}:{token.line + 1}: {token.value!r} closes nothing")
    if depth != 0:
        raise LuaLayoutError(f"{where}: a block or bracket is not closed at the end")
    units = []
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        unit = _Unit(start, lines[start:end], by_start[start])
        unit.defines = _defines(unit.tokens, where)
        units.append(unit)
    return units


def _defines(tokens: list[_Token], where: str) -> frozenset[str]:
    """The names a statement defines when leaving it out changes nothing but those names."""
    values = [t.value for t in tokens]
    if values[:1] != ["local"]:
        return frozenset()
    if values[1:2] == ["function"] and tokens[2].kind == "name":
        if values[-1] != "end":
            raise LuaLayoutError(f"{where}:{tokens[0].line + 1}: a function that does not end")
        return frozenset({values[2]})
    names: list[str] = []
    i = 1
    while i < len(tokens) and tokens[i].kind == "name":
        names.append(tokens[i].value)
        if values[i + 1 : i + 2] != [","]:
            break
        i += 2
    rest = tokens[i + 1 :]
    if not names or (rest and rest[0].value != "="):
        return frozenset()
    for j, token in enumerate(rest):
        called = token.value in ("(", "{") or token.kind == "string"
        if called and j > 0 and (rest[j - 1].kind == "name" or rest[j - 1].value in (")", "]")):
            pure = j >= 3 and rest[j - 2].value == "." and rest[j - 3].value == "math"
            if not pure:
                return frozenset()
    return frozenset(names)


def assemble(name: str, read: Callable[[str | None], str], *, whole: bool = False) -> str:
    """lua/<name>.lua with its includes written in (`read(None)` is the script's own text,
    `read(piece)` an include's), less what it never refers to (all of it with `whole`)."""
    # Each piece written in, with the blocks it was written in (the units that hold it, outer
    # first; none at the top): its functions are locals of the innermost.
    included: dict[str, tuple[int, ...]] = {}

    def expand(text: str, where: str, parent: _Unit | None, blocks: tuple[int, ...]) -> list[_Unit]:
        units = _units(text, where)
        for unit in units:
            unit.parent = parent
            for token in unit.tokens:
                if token.kind != "include":
                    continue
                inside = blocks if unit.tokens[0] is token else (*blocks, id(unit))
                written = included.get(token.value)
                piece: list[_Unit] = []
                if written is None:
                    included[token.value] = inside
                    piece = expand(read(token.value), f"includes/{token.value}.lua", unit, inside)
                elif inside[: len(written)] != written:
                    # Written once, inside a block that this place is not in: its names would be
                    # globals here, which Redis refuses only when the call reaches them.
                    raise LuaLayoutError(
                        f"{where}:{token.line + 1}: includes/{token.value}.lua was written in "
                        "before inside a function, whose locals this place cannot see: ask for "
                        "it first where both can"
                    )
                unit.pieces[token.line - unit.start] = piece
        return units

    top = expand(read(None), f"{name}.lua", None, ())
    every: list[_Unit] = []

    def walk(units: list[_Unit]) -> None:
        for unit in units:
            every.append(unit)
            for piece in unit.pieces.values():
                walk(piece)

    walk(top)
    kept: set[int] = set()
    needed: set[str] = set()
    changed = True
    while changed:
        changed = False
        for unit in every:
            if id(unit) in kept or (unit.parent is not None and id(unit.parent) not in kept):
                continue
            if whole or not unit.defines or unit.defines & needed:
                kept.add(id(unit))
                needed |= unit.uses()
                changed = True

    def emit(units: list[_Unit]) -> Iterator[str]:
        for unit in units:
            if id(unit) not in kept:
                continue
            for i, line in enumerate(unit.lines):
                if i in unit.pieces:
                    yield from emit(unit.pieces[i])
                else:
                    yield line

    return "".join(emit(top))
