"""Walking composed YAML nodes, so that every value keeps the line it came from.

A person fixing a hosts file wants ``hosts.yaml:12: nodes[1].port: ...`` for every mistake at
once, not the first one wrapped in a traceback; so values are read node by node, and a wrong
one becomes a :class:`~ddptui.config.model.Problem` instead of an exception. Nothing here
knows a hosts-file key: the caller passes the keys a mapping allows and the checks to run.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Final, Literal, TypeVar

import yaml

from ddptui.config.model import Problem
from ddptui.config.values import Invalid, ListStandIn, MapStandIn, kind, show

MAP_TAG: Final = "tag:yaml.org,2002:map"
SEQ_TAG: Final = "tag:yaml.org,2002:seq"
STR_TAG: Final = "tag:yaml.org,2002:str"
NULL_TAG: Final = "tag:yaml.org,2002:null"
MERGE_TAG: Final = "tag:yaml.org,2002:merge"


class _Missing(Enum):
    """A value that was wrong (and reported), as opposed to one that was not given; one
    member, so that ``value is not MISSING`` tells the type checker what is left."""

    MISSING = "missing"


MISSING: Final = _Missing.MISSING
#: What a check makes of a value.
T = TypeVar("T")


def yaml_reason(exc: yaml.YAMLError) -> str:
    """PyYAML's own words for what is wrong, without its multi-line context dump."""
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = [p for p in (exc.context, exc.problem) if p]
        text = ", ".join(parts) if parts else "unreadable"
    else:
        text = str(exc).splitlines()[0] if str(exc) else "unreadable"
    return text.rstrip(".")


def line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


@dataclass
class Entry:
    """One key of a YAML mapping with the nodes that carry its lines."""

    key: str
    key_node: yaml.Node
    value_node: yaml.Node

    @property
    def line(self) -> int:
        return line_of(self.key_node)


class MarkedWalker:
    """Reads one YAML text node by node, collecting problems instead of raising them.

    ``synonyms`` maps names people reach for from other tools to the keys the caller uses;
    they only feed "did you mean".
    """

    def __init__(self, text: str, path: Path, synonyms: Mapping[str, str]) -> None:
        self.text = text
        self.path = path
        self.file = str(path)
        self.synonyms = synonyms
        self.problems: list[Problem] = []
        self.loader = yaml.SafeLoader("")
        self.merged: dict[int, int] = {}

    def problem(self, line: int | None, field: str, message: str) -> None:
        self.problems.append(Problem(self.file, line, field or "file", message))

    def compose(self) -> yaml.Node | None:
        """The document's root node; None after reporting why there is none."""
        try:
            # The reader checks the characters as it is built: inside the try.
            self.loader = yaml.SafeLoader(self.text)
            return self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            col = f", column {mark.column + 1}" if mark else ""
            self.problem(line, "yaml", f"is not valid YAML{col}: {yaml_reason(exc)}.")
        except yaml.reader.ReaderError as exc:
            line = self.text.count("\n", 0, exc.position) + 1
            self.problem(line, "yaml", f"is not valid YAML: it holds the character "
                                       f"{exc.character!r}, which YAML does not allow.")
        except yaml.YAMLError as exc:
            self.problem(None, "yaml", f"is not valid YAML: {yaml_reason(exc)}.")
        finally:
            self.loader.dispose()
        return None

    def scalar(self, node: yaml.Node) -> object:
        """A plain Python value for a scalar node; stand-ins for lists and mappings."""
        if isinstance(node, yaml.SequenceNode):
            if all(isinstance(item, yaml.ScalarNode) for item in node.value):
                return [self.loader.construct_object(item, deep=True) for item in node.value]
            return ListStandIn()
        if isinstance(node, yaml.MappingNode):
            return MapStandIn()
        return self.loader.construct_object(node, deep=True)

    def check(self, node: yaml.Node, field: str, validate: Callable[[object], T]
              ) -> T | Literal[_Missing.MISSING]:
        """The validated value, or ``MISSING`` after recording why it is wrong."""
        try:
            value = self.scalar(node)
        except yaml.YAMLError as exc:
            self.problem(line_of(node), field, f"cannot be read: {yaml_reason(exc)}.")
            return MISSING
        except Exception:  # PyYAML's constructors fail in their own ways on explicit tags
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            self.problem(line_of(node), field, f"cannot be read as {tag}.")
            return MISSING
        try:
            return validate(value)
        except Invalid as exc:
            self.problem(line_of(node), field, str(exc))
            return MISSING

    def mapping(
        self, node: yaml.Node, field: str, allowed: tuple[str, ...] | None, *,
        what: str = "a mapping",
        misplaced: Mapping[str, str] | None = None,
    ) -> dict[str, Entry] | None:
        """The keys of a mapping node; unknown and repeated keys are reported here."""
        if isinstance(node, yaml.ScalarNode) and node.tag == NULL_TAG:
            return {}
        if not isinstance(node, yaml.MappingNode) or node.tag != MAP_TAG:
            self.problem(line_of(node), field,
                         f"must be {what} (key: value lines), not {self.describe(node)}.")
            return None
        merged = self.flatten(node, field)
        if merged is None:
            return None
        entries: dict[str, Entry] = {}
        from_merge: set[str] = set()  # `<<: *anchor` keys: the mapping's own keys override them
        for index, (key_node, value_node) in enumerate(node.value):
            key_line = line_of(key_node)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != STR_TAG:
                self.problem(key_line, field,
                             f"has a key that is not a name: {self.describe(key_node)}.")
                continue
            key = str(key_node.value)
            sub = f"{field}.{key}" if field else key
            if key in entries and key not in from_merge:
                self.problem(key_line, sub,
                             f"is given twice (first on line {entries[key].line}); keep one.")
                continue
            if index < merged:
                from_merge.add(key)
            else:
                from_merge.discard(key)
            if allowed is not None and key not in allowed:
                self.problem(key_line, sub, self.unknown_key(key, allowed, misplaced))
                continue
            entries[key] = Entry(key, key_node, value_node)
        return entries

    def flatten(self, node: yaml.MappingNode, field: str) -> int | None:
        """Resolve YAML merge keys in place; how many leading pairs came from them."""
        if id(node) in self.merged:  # an aliased mapping is visited once per use
            return self.merged[id(node)]
        own = sum(1 for k, _ in node.value if k.tag != MERGE_TAG)
        try:
            self.loader.flatten_mapping(node)
        except yaml.YAMLError as exc:
            self.problem(line_of(node), field, f"has a bad merge key: {yaml_reason(exc)}.")
            return None
        self.merged[id(node)] = len(node.value) - own
        return self.merged[id(node)]

    def unknown_key(
        self, key: str, allowed: tuple[str, ...], misplaced: Mapping[str, str] | None
    ) -> str:
        if misplaced and key in misplaced:
            return misplaced[key]
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        if not close:
            close = difflib.get_close_matches(key.lower().replace("-", "_"), allowed, n=1,
                                              cutoff=0.6)
        if not close and self.synonyms.get(key.lower()) in allowed:
            close = [self.synonyms[key.lower()]]
        if close:
            return f"is not a known key; did you mean `{close[0]}`?"
        return f"is not a known key; the keys here are: {', '.join(allowed)}."

    def describe(self, node: yaml.Node) -> str:
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        try:
            return kind(self.scalar(node))
        except yaml.YAMLError:
            return f"a value tagged {show(node.tag)}, which this file does not allow"
        except Exception:  # as in check(): a bad explicitly tagged scalar
            return "an unreadable value"

    def sequence(self, node: yaml.Node) -> list[yaml.Node] | None:
        if isinstance(node, yaml.SequenceNode) and node.tag == SEQ_TAG:
            return list(node.value)
        return None
