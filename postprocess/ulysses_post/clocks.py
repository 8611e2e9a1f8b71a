"""`clocks CLOCKS.CSV LOG...`: the GPU's clocks and power through each step of a GPU check.

scripts/gpu_check.sh samples `nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,
power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active --format=csv
-lms 200` into clocks.csv for the whole check, and stamps each step's log lines with its
start and end ("=== NAME [HH:MM:SS]: command" and "=== NAME [HH:MM:SS]: PASS"). This puts
the two side by side: per step and GPU, the samples while the GPU was busy (utilization at
least --busy percent), the SM clock's median and 10th percentile (stats.percentile, as every
table here), as MHz and as a share of
the highest SM clock sampled in the whole file (the boost the GPU reached), the power
drawn, and the share of busy samples the driver held under its software power cap (reason
bit 0x4) or a thermal or hardware slowdown (bits 0x8, 0x20, 0x40, 0x80).

Why: a compute-bound kernel's rate follows the SM clock, and a layer that keeps the GPU
busy for seconds runs under the power cap at a lower clock than a benchmark's short bursts
(docs/model.md, "Clocks under sustained work"). Step times are the check host's UTC time of
day and the samples' timestamps its local time: the check's host runs in UTC.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from . import formats, stats
from .report import ReportError

POWER_CAP = 0x4
SLOWDOWN = 0x8 | 0x20 | 0x40 | 0x80  # HW slowdown, SW thermal, HW thermal, HW power brake
_STEP = re.compile(r"^=== (?P<name>.+?) \[(?P<t>\d\d:\d\d:\d\d)\]: (?P<rest>.*)$")
_VERDICT = re.compile(r"^(PASS|FAIL \(rc \d+\)|TIMEOUT \(\d+s\))$")
FIELDS = ("step", "gpu", "seconds", "samples", "busy", "sm_mhz_median", "sm_mhz_p10", "sm_share_median",
          "power_w_median", "power_w_max", "power_capped", "slowdown")


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the epoch (the samples' own clock)
    gpu: int
    sm_mhz: float
    power_w: float
    util: float
    reasons: int


@dataclass(frozen=True)
class Step:
    name: str
    start: float
    end: float


def _number(field: str) -> float:
    return float(field.strip().split()[0])


def read_samples(path: str) -> list[Sample]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ReportError(f"{path}: {e.strerror or e}") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows or not rows[0] or rows[0][0].strip() != "timestamp":
        raise ReportError(f"{path}: not nvidia-smi's CSV (no 'timestamp' header; see scripts/gpu_check.sh)")
    head = [h.strip() for h in rows[0]]

    def col(prefix: str) -> int:
        for i, h in enumerate(head):
            if h.startswith(prefix):
                return i
        raise ReportError(f"{path}: no column '{prefix}' (columns: {', '.join(head)})")

    i_gpu, i_sm, i_pw, i_ut = col("index"), col("clocks.current.sm"), col("power.draw"), col("utilization.gpu")
    i_rs = col("clocks_event_reasons.active") if any(h.startswith("clocks_event") for h in head) \
        else col("clocks_throttle_reasons.active")
    out = []
    for r in rows[1:]:
        if len(r) != len(head):
            continue  # a line cut off when the sampler was stopped
        try:
            t = dt.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
            out.append(Sample(t.timestamp(), int(r[i_gpu]), _number(r[i_sm]), _number(r[i_pw]), _number(r[i_ut]),
                              int(r[i_rs].strip(), 16)))
        except ValueError:
            continue  # [N/A] or a partial line
    if not out:
        raise ReportError(f"{path}: no samples")
    return out


def read_steps(paths: list[str], first: float) -> list[Step]:
    """Each step's start and end from the logs' stamped lines, placed on the samples' day."""
    day = dt.datetime.fromtimestamp(first, dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    steps: list[Step] = []
    for path in paths:
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
        except OSError as e:
            raise ReportError(f"{path}: {e.strerror or e}") from None
        open_: dict[str, float] = {}
        for line in lines:
            m = _STEP.match(line)
            if not m:
                continue
            h, mi, s = (int(x) for x in m["t"].split(":"))
            t = day.timestamp() + 3600 * h + 60 * mi + s
            if t < first - 12 * 3600:
                t += 86400  # the check ran past midnight
            if _VERDICT.match(m["rest"]) and m["name"] in open_:
                steps.append(Step(m["name"], open_.pop(m["name"]), t + 1.0))  # stamps are whole seconds
            else:
                open_[m["name"]] = t
    return sorted(set(steps), key=lambda s: (s.start, s.name))  # a step copied into two logs counts once


def top_clocks(samples: list[Sample]) -> dict[int, float]:
    """Per GPU, the highest SM clock sampled (the boost it reached)."""
    top: dict[int, float] = {}
    for s in samples:
        top[s.gpu] = max(top.get(s.gpu, 0.0), s.sm_mhz)
    return top


def _share(busy: list[Sample], bits: int) -> float:
    """The share of the busy samples with any of these throttle-reason bits set (NaN: none busy)."""
    return sum(1 for s in busy if s.reasons & bits) / len(busy) if busy else float("nan")


def rows(samples: list[Sample], steps: list[Step], busy: float, top: dict[int, float]) -> list[dict]:
    out = []
    for st in steps:
        for g in sorted(top):
            w = [s for s in samples if s.gpu == g and st.start <= s.t <= st.end]
            b = [s for s in w if s.util >= busy]
            sm = [s.sm_mhz for s in b]
            pw = [s.power_w for s in b]
            med = stats.median(sm)
            out.append({
                "step": st.name, "gpu": g, "seconds": st.end - st.start, "samples": len(w), "busy": len(b),
                "sm_mhz_median": med, "sm_mhz_p10": stats.percentile(sm, 10), "sm_share_median": med / top[g],
                "power_w_median": stats.median(pw), "power_w_max": max(pw, default=float("nan")),
                "power_capped": _share(b, POWER_CAP), "slowdown": _share(b, SLOWDOWN),
            })
    return out


def write(csv_path: str, logs: list[str], busy: float, fmt: str, out: TextIO = sys.stdout) -> None:
    samples = read_samples(csv_path)
    steps = read_steps(logs, min(s.t for s in samples))
    if not steps:
        raise ReportError("no stamped steps ('=== NAME [HH:MM:SS]: ...') in " + ", ".join(logs))
    top = top_clocks(samples)
    rs = rows(samples, steps, busy, top)
    if formats.write_records(fmt, FIELDS, rs, out):
        return
    tops = ", ".join(f"GPU {g}: {mhz:.0f} MHz" for g, mhz in sorted(top.items()))
    print(f"highest SM clock sampled: {tops}; busy: utilization >= {busy:g}%; capped: share of busy samples "
          f"under the SW power cap; slowdown: thermal or HW", file=out)
    print(f"{'step':44} {'gpu':>3} {'s':>5} {'busy':>5} {'SM MHz':>7} {'p10':>6} {'of top':>6} {'W med':>6} "
          f"{'W max':>6} {'capped':>6} {'slow':>5}", file=out)
    for r in rs:
        if not r["busy"]:
            continue
        print(f"{r['step'][:44]:44} {r['gpu']:>3} {r['seconds']:5.0f} {r['busy']:5d} {r['sm_mhz_median']:7.0f} "
              f"{r['sm_mhz_p10']:6.0f} {100 * r['sm_share_median']:5.1f}% {r['power_w_median']:6.0f} "
              f"{r['power_w_max']:6.0f} {100 * r['power_capped']:5.0f}% {100 * r['slowdown']:4.0f}%", file=out)
