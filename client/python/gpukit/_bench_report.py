"""The figures of a gpukit-bench run and its compare mode (gpukit.bench is the tool).

A run is a :class:`Report`: figures (name, value, unit, which direction is better, whether it
is a reference such as torch's time) and the rows it skipped with the reason, printed as a
table row by row and saved as JSON (``schema: "gpukit-bench"``). :func:`compare` and
:func:`print_comparison` put two saved runs side by side::

    changes = compare(load_report("old.json"), load_report("new.json"))
    regressions = print_comparison(changes, 0.10, "old.json", "new.json", old, new)
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO

#: The JSON's "schema"; "schema_version" grows when a field changes meaning.
SCHEMA = "gpukit-bench"
SCHEMA_VERSION = 1
DEFAULT_THRESHOLD = 0.10


# --- figures and the report ----------------------------------------------------------------


@dataclass
class Figure:
    """One measured number.

    ``reference`` marks a figure of something other than gpukit (torch's time): it is shown
    and compared, but never counts as a regression of gpukit.
    """

    name: str
    value: float
    unit: str
    higher_is_better: bool
    reference: bool = False


@dataclass
class Skipped:
    """A figure, or a group of them, that this run could not measure, and why."""

    name: str
    reason: str


def _format_value(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return f"{value:.3e}"


class Report:
    """The figures of one run, printed as a table row by row as they are added."""

    def __init__(self, header: Dict[str, Any], out: Optional[TextIO] = None) -> None:
        self.header = header
        self.figures: List[Figure] = []
        self.skipped: List[Skipped] = []
        self._out = out  # None: sys.stdout as it is when a line is printed

    def print_header(self) -> None:
        h = self.header
        self._print(
            f"gpukit-bench: gpukit {h['gpukit_version']}, gpukitd {h['daemon_version']} "
            f"({h['backend']}: {h['device']}) at {h['address']}"
            f"{', quick' if h['quick'] else ''}"
            f"{', ops over gRPC' if h.get('submit_socket') is False else ''}"
        )
        self._print(f"{'figure':<40} {'value':>12} {'unit':<8} better")

    def add(self, figure: Figure, note: str = "") -> None:
        if not (isinstance(figure.value, (int, float)) and math.isfinite(figure.value)):
            raise ValueError(f"figure {figure.name} = {figure.value!r} is not a finite number")
        self.figures.append(figure)
        better = "higher" if figure.higher_is_better else "lower"
        tail = "  (reference)" if figure.reference else ""
        tail += f"  {note}" if note else ""
        self._print(
            f"{figure.name:<40} {_format_value(figure.value):>12} {figure.unit:<8} {better}{tail}"
        )

    def skip(self, name: str, reason: str) -> None:
        self.skipped.append(Skipped(name, reason))
        self._print(f"{name:<40} {'skipped':>12} {'':<8} {reason}")

    def section(self, title: str) -> None:
        self._print(f"-- {title}")

    def to_json(self) -> Dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            **self.header,
            "figures": [asdict(f) for f in self.figures],
            "skipped": [asdict(s) for s in self.skipped],
        }

    def _print(self, line: str) -> None:
        print(line, file=self._out or sys.stdout, flush=True)


# --- statistics ----------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-th percentile (0 < q <= 100) of `samples`, which must not be
    empty: the smallest sample with at least q% of the samples at or below it."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# --- compare mode --------------------------------------------------------------------------


def load_report(path: str) -> Dict[str, Any]:
    """A saved run, checked to be one; raises ValueError naming the file and the problem."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} file (no \"schema\": \"{SCHEMA}\")")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {data.get('schema_version')!r}; this "
                         f"gpukit-bench reads {SCHEMA_VERSION}")
    for i, f in enumerate(data.get("figures", [])):
        value = f.get("value") if isinstance(f, dict) else None
        if (not isinstance(f, dict) or not isinstance(f.get("name"), str)
                or not isinstance(value, (int, float)) or isinstance(value, bool)
                or not isinstance(f.get("higher_is_better"), bool)):
            raise ValueError(f"{path}: figures[{i}] needs name, a number value and "
                             f"higher_is_better: {f!r}")
    return data


@dataclass
class Change:
    """One figure of the comparison. `worse_by` is how much worse the new value is than the
    old, in the figure's own direction, as a fraction of the old (negative: better)."""

    name: str
    old: Optional[float]
    new: Optional[float]
    unit: str
    higher_is_better: bool
    reference: bool
    worse_by: Optional[float]

    def regressed(self, threshold: float) -> bool:
        return (not self.reference and self.worse_by is not None
                and self.worse_by > threshold)


def compare(old: Dict[str, Any], new: Dict[str, Any]) -> List[Change]:
    """Every figure of either run, in the new run's order, then those only the old one has."""
    old_figures = {f["name"]: f for f in old.get("figures", [])}
    new_figures = {f["name"]: f for f in new.get("figures", [])}
    names = list(new_figures) + [n for n in old_figures if n not in new_figures]
    changes = []
    for name in names:
        o, n = old_figures.get(name), new_figures.get(name)
        either = n or o
        higher = bool(either["higher_is_better"])
        worse_by = None
        if o is not None and n is not None and o["value"] != 0:
            change = (n["value"] - o["value"]) / abs(o["value"])
            worse_by = -change if higher else change
        changes.append(Change(name, o and o["value"], n and n["value"], either.get("unit", ""),
                              higher, bool(either.get("reference", False)), worse_by))
    return changes


def print_comparison(changes: Sequence[Change], threshold: float, old_label: str,
                     new_label: str, old_header: Dict[str, Any], new_header: Dict[str, Any],
                     out: Optional[TextIO] = None) -> List[Change]:
    """Prints old, new and the change of each figure (after a note for each of backend,
    device, --quick and the synchronous transport where the runs differ); returns the
    regressions."""
    out = out or sys.stdout
    for key in ("backend", "device", "quick", "submit_socket"):
        if old_header.get(key) != new_header.get(key):
            print(f"note: {key} differs: old {old_header.get(key)!r}, new "
                  f"{new_header.get(key)!r}", file=out)
    print(f"comparison: old {old_label}, new {new_label}; worse by more than "
          f"{threshold:.0%} in a figure's own direction is a regression", file=out)
    print(f"{'figure':<40} {'old':>12} {'new':>12} {'change':>8}  verdict", file=out)
    regressions = []
    for c in changes:
        if c.old is None or c.new is None:
            verdict = "only in " + ("new" if c.old is None else "old")
            change = ""
        elif c.worse_by is None:
            verdict, change = "old is 0", ""
        else:
            change = f"{(c.new - c.old) / abs(c.old):+.1%}"
            if c.regressed(threshold):
                verdict = "REGRESSION"
                regressions.append(c)
            elif c.worse_by > threshold:
                verdict = "worse (reference)"
            elif -c.worse_by > threshold:
                verdict = "better"
            else:
                verdict = "same"
        print(f"{c.name:<40} {_format_value(c.old):>12} {_format_value(c.new):>12} "
              f"{change:>8}  {verdict}", file=out)
    print(f"{len(regressions)} regression(s) of {sum(1 for c in changes if c.worse_by is not None)}"
          " figure(s) in both runs", file=out)
    return regressions
