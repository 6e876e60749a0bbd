"""Java's .properties syntax, as Kafka's configuration files use it (client.properties for the
clients and tools, server.properties for `groupcoord serve --config`). Shared by the client
SDK (client/security.py) and the server (server/config_file.py), so it depends on neither.

    key=value          key: value          key value
    # a comment        ! a comment         (only where a line starts, after blanks)
    long.list=a,\\
              b        a line ending in an odd number of backslashes continues on the next
                       (its leading blanks dropped)

Blanks around the separator are dropped; the value keeps its trailing blanks. Escapes in keys
and values: \\t \\n \\r \\f \\uXXXX, and a backslash before any other character stands for that
character (\\= \\: \\# \\\\ and "\\ " put those in a key). Lines end at \\n, \\r\\n or \\r only.
A key given twice keeps its last value. The file is read as UTF-8 (Java's Properties.load
reads ISO-8859-1: the same for ASCII and \\u escapes).
"""
from __future__ import annotations

import re
from typing import Iterator, Optional

__all__ = ["load_properties", "parse_properties", "iter_properties", "PropertiesError"]

_WS = " \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class PropertiesError(ValueError):
    """Malformed text on line ``lineno`` (1-based): ``reason`` says what."""

    def __init__(self, lineno: int, reason: str):
        super().__init__("line %d: %s" % (lineno, reason))
        self.lineno, self.reason = lineno, reason


def load_properties(path: str) -> dict:
    """Read a properties file -> {key: value}. OSError when it cannot be read; PropertiesError
    (a ValueError) on a malformed \\u escape."""
    with open(path, "r", encoding="utf-8") as f:
        return parse_properties(f.read())


def parse_properties(text: str) -> dict:
    """Java's .properties syntax -> {key: value}; a key given twice keeps its last value."""
    return {key: value for _line, key, value in iter_properties(text)}


def iter_properties(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, key, value) of each property in file order, the line number (1-based)
    being that of the line the property starts on. PropertiesError on a malformed \\u
    escape, naming that line."""
    logical: Optional[str] = None           # a line being continued
    start = 0
    for lineno, raw in enumerate(_LINE_BREAK.split(text), 1):   # Java's breaks only
        line = raw.lstrip(_WS)
        if logical is None:
            if not line or line[0] in "#!":
                continue
            logical, start = "", lineno
        # A trailing backslash continues the line unless it is itself escaped.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            logical += line[:-1]
            continue
        logical += line
        yield (start, *_split_property(logical, start))
        logical = None
    if logical is not None:                 # the file ended on a continuation
        yield (start, *_split_property(logical, start))


def _split_property(line: str, lineno: int) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n and line[i] not in "=:" + _WS:
        i += 2 if line[i] == "\\" else 1
    key_end = min(i, n)
    while i < n and line[i] in _WS:
        i += 1
    if i < n and line[i] in "=:":
        i += 1
        while i < n and line[i] in _WS:
            i += 1
    try:
        return _unescape(line[:key_end]), _unescape(line[i:])
    except ValueError as e:
        raise PropertiesError(lineno, str(e)) from None


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:                      # a lone backslash at the very end: dropped
            break
        c = s[i + 1]
        if c == "u":
            digits = s[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("malformed \\uxxxx escape in a properties file")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(c, c))
        i += 2
    return "".join(out)
