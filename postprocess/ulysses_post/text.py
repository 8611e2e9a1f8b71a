"""Plain-text formatting shared by the table commands: numbers, provenance, tables."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .report import Report

SIM_NOTE = ("simulation mode: times are CPU wall-clock times of a simulated run (every rank a simulated "
            "GPU on the host CPU), NOT GPU figures")
MODEL_NOTE = ("model mode: every time is MODELLED by the simulator for the machine named (no data, no "
              "arithmetic ran); parity was not computed")


def ms(value: float | None) -> str:
    """A time in ms with three decimals; '-' when absent, 'nan' when undefined."""
    if value is None:
        return "-"
    return "nan" if math.isnan(value) else f"{value:.3f}"


def factor(value: float) -> str:
    """A speedup or ratio as '1.23x'."""
    return "nan" if math.isnan(value) else f"{value:.2f}x"


def sci(value: float) -> str:
    """A parity error: small numbers whose order of magnitude is what matters."""
    return f"{value:.2e}"


def attr_text(value: object) -> str:
    """An HDF5 attribute value as the deck would print it ('-' when absent)."""
    if value is None:
        return "-"
    arr = np.asarray(value).reshape(-1)
    items = [v.decode() if isinstance(v, bytes) else str(v) for v in arr.tolist()]
    return ",".join(items)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Aligned columns: the first `left` columns left-aligned (names), the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _counted(values: list[str]) -> str:
    """'a x2, b' for per-rank lists, so 8 identical host names take one word."""
    out: list[str] = []
    for v in dict.fromkeys(values):
        n = values.count(v)
        out.append(f"{v} x{n}" if n > 1 else v)
    return ", ".join(out) or "-"


def provenance(report: Report) -> list[str]:
    """The header every table command prints: where the numbers come from."""
    lines = [
        f"report         {report.path}",
        f"software       ulysses-ipc {report.software_version} (report schema 1)",
        f"date           {report.date}",
        f"mode           {report.mode}, world size {report.world_size}",
        f"deck           {report.deck}",
        f"hosts          {_counted(report.hosts)}",
        f"devices        {_counted(report.devices)}",
    ]
    if report.host_cpus:
        lines.append(f"host CPUs      {_counted(report.host_cpus)}")
    if report.versions:
        lines.append("versions       " + ", ".join(f"{k} {v}" for k, v in sorted(report.versions.items())))
    if report.command_line:
        lines.append(f"command line   {report.command_line}")
    if report.simulated:
        lines.append(f"NOTE           {SIM_NOTE}")
    if report.model_only:
        lines.append(f"NOTE           {MODEL_NOTE}")
    return lines
