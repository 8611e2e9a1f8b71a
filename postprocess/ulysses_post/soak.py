"""The soak's verdict: samples taken beside a long run against the run's own report.

`ulysses-post soak SAMPLES.csv REPORT.h5` reads what scripts/soak_sample.py wrote while
the ranks ran (per rank process: host RSS, threads, open file descriptors; the GPU's
memory.used and each process's own GPU memory where nvidia-smi sees them) and the report
of that run, and for every run of the report:

- places the samples on the run's timed layers (the report's `timed_wall_start_s` and
  `timed_wall_end_s`) and cuts that span into equal windows; the first windows are the
  warm-up and judge nothing. The GPU figures go by the time their nvidia-smi call
  returned (`gpu_used_time_s`, `gpu_proc_time_s`, where the sampler wrote them), not by
  the row's: a row carries the latest answer, up to a second old, and a step made in
  the warm-up must not show as growth in a later window;
- growth: per rank and figure, the floor of no window after the warm-up (its lowest
  sample) may stand above the first window after it by more than the figure's tolerance
  (a leak of 1 KiB a layer over 10,000 layers is 10 MiB: above the 4 MiB RSS tolerance).
  The floor, because a leak lifts it while a descriptor or buffer held for a moment
  (a target exchanged every layer under no-target-cache) lifts only a window's peak;
- the layer's timing (the critical path over ranks, per timed layer, in run order, cut
  into as many windows): each window's p90/p10 at most `spread_tol` above the median
  window's, and its p50 within `p50_tol` of the median window's;
- parity at the end of the run (the report's own verdict).

Prints one table per run (per window: samples, the floors of memory, RSS, fds and
threads, layer p10/p50/p90) and a PASS/FAIL line; `--csv FILE` writes the windows per
rank, with each figure's floor and peak. Exit 0 when every run passes, 1 when one fails,
2 for bad input (as every ulysses-post command).
"""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass, field

import h5py
import numpy as np

from . import stats
from .report import ReportError, Run, load_report

SAMPLE_COLUMNS = ("time_s", "pid", "rank", "rss_kib", "threads", "fds", "gpu_used_mib", "gpu_proc_mib",
                  "gpu_used_time_s", "gpu_proc_time_s")
# What samplers before the GPU figures' own times wrote: those figures go by the row's time.
OLD_SAMPLE_COLUMNS = SAMPLE_COLUMNS[:8]
# The figures that carry a time of their own (the column), where the sampler wrote it.
_OWN_TIME = {"gpu_used_mib": "gpu_used_time_s", "gpu_proc_mib": "gpu_proc_time_s"}
KIB_PER_MIB = 1024.0


@dataclass
class Tolerances:
    """What a figure may rise after the warm-up, and how far the layer's timing may wander."""

    gpu_mib: float = 2.0  # nvidia-smi counts whole MiB; CUDA allocates in 2 MiB pages
    rss_mib: float = 4.0
    fds: float = 0.0
    threads: float = 0.0
    spread_tol: float = 0.25  # a window's p90/p10 may be at most 25% above the median window's
    p50_tol: float = 0.10  # a window's p50 within 10% of the median window's


@dataclass
class Samples:
    """The sampler's rows as columns; NaN where a figure was not sampled (blank)."""

    time_s: np.ndarray
    rank: np.ndarray  # int: the MPI rank, or the process's order by pid where none was found
    figures: dict[str, np.ndarray]  # rss_mib, threads, fds, gpu_used_mib, gpu_proc_mib
    # When each figure was taken, where not at the row's time_s (the GPU figures: when
    # their nvidia-smi call returned; NaN where blank).
    figure_time_s: dict[str, np.ndarray] = field(default_factory=dict)

    def time_of(self, figure: str) -> np.ndarray:
        t = self.figure_time_s.get(figure)
        return self.time_s if t is None else t


@dataclass
class RunVerdict:
    name: str
    passed: bool = True
    reasons: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the table and the checks, for people
    rows: list[dict] = field(default_factory=list)  # per window and rank, for the CSV

    def fail(self, why: str) -> None:
        self.passed = False
        self.reasons.append(why)


def _number(text: str, where: str) -> float:
    if text.strip() == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ReportError(f"{where}: not a number: {text!r}") from None


def read_samples(path: str) -> Samples:
    """The sampler's CSV; a ReportError naming the file and line for anything malformed."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise ReportError(f"{path}: cannot read the samples: {e.strerror or e}") from None
    except (csv.Error, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: not a CSV file of samples: {e}") from None
    header = tuple(c.strip() for c in rows[0]) if rows else ()
    if header not in (SAMPLE_COLUMNS, OLD_SAMPLE_COLUMNS):
        raise ReportError(f"{path}: the header must be {','.join(SAMPLE_COLUMNS)} (scripts/soak_sample.py writes it)")
    cols: dict[str, list[float]] = {c: [] for c in header}
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ReportError(f"{path}:{n}: {len(row)} fields, expected {len(header)}")
        for c, text in zip(header, row):
            cols[c].append(_number(text, f"{path}:{n}: {c}"))
    if len(rows) < 2:
        raise ReportError(f"{path}: no samples (did the sampler see the rank processes?)")
    a = {c: np.asarray(v, dtype=np.float64) for c, v in cols.items()}
    for c in ("time_s", "pid", "rss_kib", "threads", "fds"):
        if not np.all(np.isfinite(a[c])):
            raise ReportError(f"{path}: column {c} has blank or non-finite values")
    rank = a["rank"]
    if np.any(np.isnan(rank)):  # no MPI rank in the environment: number the processes by pid
        pids = np.unique(a["pid"])
        rank = np.searchsorted(pids, a["pid"]).astype(np.float64)
    own_time = {}
    for fig, tcol in _OWN_TIME.items():
        if tcol in a:
            t = a[tcol]
            if np.any(np.isfinite(a[fig]) & ~np.isfinite(t)):
                raise ReportError(f"{path}: {fig} without its time ({tcol}) in some rows")
            own_time[fig] = t
    return Samples(time_s=a["time_s"], rank=rank.astype(np.int64),
                   figures={"gpu_used_mib": a["gpu_used_mib"], "gpu_proc_mib": a["gpu_proc_mib"],
                            "rss_mib": a["rss_kib"] / KIB_PER_MIB, "fds": a["fds"], "threads": a["threads"]},
                   figure_time_s=own_time)


def _timed_span(report_path: str, case: str, run: str) -> tuple[float, float]:
    with h5py.File(report_path, "r") as f:
        a = f["cases"][case][run].attrs
        if "timed_wall_start_s" not in a or "timed_wall_end_s" not in a:
            raise ReportError(f"{report_path}: case '{case}' run '{run}' has no timed_wall_start_s/timed_wall_end_s "
                              "(a report of an older ulysses-ipc): the samples cannot be placed on its layers")
        t0, t1 = float(a["timed_wall_start_s"]), float(a["timed_wall_end_s"])
    if not (math.isfinite(t0) and math.isfinite(t1) and t1 > t0):
        raise ReportError(f"{report_path}: case '{case}' run '{run}': timed span {t0}..{t1} is empty (nothing timed: "
                          "--mode model?)")
    return t0, t1


def _nanmax(xs: list[float]) -> float:
    """The largest of the finite values; NaN when there is none."""
    finite = [x for x in xs if not math.isnan(x)]
    return max(finite) if finite else math.nan


# The figures judged for growth: (column, label, tolerance field, per rank?)
_FIGURES = (("gpu_used_mib", "GPU memory.used MiB", "gpu_mib", False),
            ("gpu_proc_mib", "GPU MiB of the process", "gpu_mib", True),
            ("rss_mib", "host RSS MiB", "rss_mib", True),
            ("fds", "open fds", "fds", True),
            ("threads", "threads", "threads", True))


def analyze_run(samples: Samples, run: Run, ranks: int, span: tuple[float, float], windows: int, warmup: int,
                tol: Tolerances, min_samples: int = 2) -> RunVerdict:
    """The verdict of one run: growth of every sampled figure, timing stability, parity."""
    if not 0 <= warmup < windows - 1:
        raise ReportError(f"{warmup} warm-up window(s) of {windows} leave fewer than 2 to compare")
    v = RunVerdict(run.name)
    t0, t1 = span
    edges = np.linspace(t0, t1, windows + 1)
    inside = (samples.time_s >= t0) & (samples.time_s <= t1)
    win = np.clip(np.searchsorted(edges, samples.time_s, side="right") - 1, 0, windows - 1)
    layer = run.stage_ms[..., run.stage("layer")].max(axis=2).reshape(-1)  # critical path, run order
    chunks = np.array_split(layer, windows)
    if min(len(c) for c in chunks) == 0:
        raise ReportError(f"run '{run.name}': {layer.size} timed layers cannot fill {windows} windows")
    pct = np.array([[stats.percentile(c, q) for q in (10, 50, 90)] for c in chunks])

    present = sorted(set(samples.rank[inside].tolist()))
    if present != list(range(ranks)):
        v.fail(f"samples during the timed layers are of ranks {present}, expected 0..{ranks - 1}")
        ranks_seen = present
    else:
        ranks_seen = list(range(ranks))

    # Each figure in the window of the time it was taken (the GPU figures' own times).
    def placed(col: str) -> tuple[np.ndarray, np.ndarray]:
        t = samples.time_of(col)
        with np.errstate(invalid="ignore"):
            ins = (t >= t0) & (t <= t1)
        return ins, np.clip(np.searchsorted(edges, np.nan_to_num(t, nan=-np.inf), side="right") - 1, 0, windows - 1)

    placement = {c: placed(c) for c, _, _, _ in _FIGURES}

    def window_stat(col: str, rank: int | None, w: int, fn) -> float:
        ins, wn = placement[col]
        m = ins & (wn == w) & (np.ones_like(ins) if rank is None else samples.rank == rank)
        x = samples.figures[col][m]
        x = x[np.isfinite(x)]
        return float(fn(x)) if x.size else math.nan

    # Every window after the warm-up needs samples of every rank, or nothing was watched there.
    for r in ranks_seen:
        for w in range(warmup, windows):
            n = int(np.count_nonzero(inside & (win == w) & (samples.rank == r)))
            if n < min_samples:
                v.fail(f"rank {r} has {n} sample(s) in window {w} (at least {min_samples}): sample faster or run longer")
                break

    # The table: per window, the figures' floors (the largest over ranks) and the layer's percentiles.
    v.lines.append(f"run {run.name}: {layer.size} timed layers, {windows} windows of {(t1 - t0) / windows:.2f} s "
                   f"(the first {warmup} warm-up), ranks {ranks}")
    v.lines.append(f"{'win':>3} {'phase':7} {'samples':>7} {'gpu MiB':>8} {'proc MiB':>8} {'rss MiB':>8} {'fds':>5} "
                   f"{'thr':>4} {'layers':>6} {'p10 ms':>8} {'p50 ms':>8} {'p90 ms':>8} {'p90/p10':>7}")
    for w in range(windows):
        n = int(np.count_nonzero(inside & (win == w)))
        floor = {c: _nanmax([window_stat(c, r, w, np.min) for r in ranks_seen]) for c, _, _, per_rank in _FIGURES
                 if per_rank}
        gpu = window_stat("gpu_used_mib", None, w, np.min)
        p10, p50, p90 = pct[w]
        v.lines.append(f"{w:3d} {'warm-up' if w < warmup else 'steady':7} {n:7d} {gpu:8.0f} {floor['gpu_proc_mib']:8.0f} "
                       f"{floor['rss_mib']:8.1f} {floor['fds']:5.0f} {floor['threads']:4.0f} {len(chunks[w]):6d} "
                       f"{p10:8.3f} {p50:8.3f} {p90:8.3f} {p90 / p10 if p10 > 0 else math.nan:7.3f}")
        for r in ranks_seen:
            m = inside & (win == w) & (samples.rank == r)
            row = {"run": run.name, "window": w, "warmup": int(w < warmup), "t_start_s": edges[w] - t0,
                   "t_end_s": edges[w + 1] - t0, "rank": r, "samples": int(np.count_nonzero(m)),
                   "layers": len(chunks[w]), "layer_p10_ms": p10, "layer_p50_ms": p50, "layer_p90_ms": p90}
            for c, _, _, _ in _FIGURES:
                row[f"{c}_min"] = window_stat(c, r, w, np.min)
                row[f"{c}_max"] = window_stat(c, r, w, np.max)
            v.rows.append(row)

    # Growth: after the warm-up, no window's floor may stand above the first steady
    # window's by more than the tolerance (any window, not only the last one).
    for col, label, tname, per_rank in _FIGURES:
        limit = getattr(tol, tname)
        for r in (ranks_seen if per_rank else [None]):
            floors = np.array([window_stat(col, r, w, np.min) for w in range(warmup, windows)])
            if np.all(np.isnan(floors)):
                continue  # not sampled here (no nvidia-smi, or it cannot see the process)
            if np.any(np.isnan(floors)):
                v.fail(f"{label}{'' if r is None else f' of rank {r}'}: not sampled in every steady window")
                continue
            rise = float(np.max(floors[1:]) - floors[0])
            worst = warmup + 1 + int(np.argmax(floors[1:]))
            who = "" if r is None else f" rank {r}"
            ok = rise <= limit
            v.lines.append(f"  growth {label}{who}: floor {floors[0]:.1f} -> {np.max(floors[1:]):.1f} (window {worst}), "
                           f"{rise:+.1f} (tolerance {limit:g}) {'ok' if ok else 'GROWS'}")
            if not ok:
                v.fail(f"{label}{who} grew {rise:+.1f} after the warm-up (tolerance {limit:g})")

    steady = pct[warmup:]
    spread = steady[:, 2] / steady[:, 0]
    ref_spread = float(np.median(spread))
    ref_p50 = float(np.median(steady[:, 1]))
    worst_spread = int(np.argmax(spread))
    spread_ok = bool(np.all(spread <= ref_spread * (1 + tol.spread_tol)))
    v.lines.append(f"  layer p90/p10: median window {ref_spread:.3f}, worst {spread[worst_spread]:.3f} (window "
                   f"{warmup + worst_spread}); limit {ref_spread * (1 + tol.spread_tol):.3f} "
                   f"{'ok' if spread_ok else 'UNSTABLE'}")
    if not spread_ok:
        v.fail(f"layer p90/p10 {spread[worst_spread]:.3f} in window {warmup + worst_spread} is more than "
               f"{tol.spread_tol:.0%} above the median window's {ref_spread:.3f}")
    drift = steady[:, 1] / ref_p50 - 1
    worst_drift = int(np.argmax(np.abs(drift)))
    drift_ok = bool(np.all(np.abs(drift) <= tol.p50_tol))
    v.lines.append(f"  layer p50: median window {ref_p50:.3f} ms, furthest {steady[worst_drift, 1]:.3f} ms (window "
                   f"{warmup + worst_drift}, {drift[worst_drift]:+.1%}); limit +-{tol.p50_tol:.0%} "
                   f"{'ok' if drift_ok else 'DRIFTS'}")
    if not drift_ok:
        v.fail(f"layer p50 {steady[worst_drift, 1]:.3f} ms in window {warmup + worst_drift} is "
               f"{drift[worst_drift]:+.1%} from the median window's {ref_p50:.3f} ms (limit +-{tol.p50_tol:.0%})")

    if run.approximate:
        parity_ok = run.approx_pass
    else:
        parity_ok = run.parity_computed and run.parity_pass
    v.lines.append(f"  parity at the end: {'PASS' if parity_ok else 'FAIL'} (max_abs {run.parity_max_abs:.2e}, "
                   f"rel_l2 {run.parity_rel_l2:.2e})")
    if not parity_ok:
        v.fail("parity failed at the end of the run")
    v.lines.append(f"soak {run.name}: {'PASS' if v.passed else 'FAIL: ' + '; '.join(v.reasons)}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Tolerances()
    p.add_argument("samples", metavar="SAMPLES.csv", help="what scripts/soak_sample.py wrote beside the run")
    p.add_argument("report", metavar="REPORT.h5", help="the run's report")
    p.add_argument("--windows", type=int, default=10, help="windows the timed span is cut into (default 10)")
    p.add_argument("--warmup-windows", type=int, default=1, help="the first windows, not judged (default 1)")
    p.add_argument("--min-samples", type=int, default=2, help="samples a rank needs in every steady window (default 2)")
    p.add_argument("--gpu-tol-mib", type=float, default=d.gpu_mib, help=f"GPU memory rise allowed (default {d.gpu_mib:g})")
    p.add_argument("--rss-tol-mib", type=float, default=d.rss_mib, help=f"RSS rise allowed (default {d.rss_mib:g})")
    p.add_argument("--fd-tol", type=float, default=d.fds, help=f"open fds rise allowed (default {d.fds:g})")
    p.add_argument("--thread-tol", type=float, default=d.threads, help=f"threads rise allowed (default {d.threads:g})")
    p.add_argument("--spread-tol", type=float, default=d.spread_tol,
                   help=f"a window's p90/p10 over the median window's, minus 1, allowed (default {d.spread_tol:g})")
    p.add_argument("--p50-tol", type=float, default=d.p50_tol,
                   help=f"a window's p50 off the median window's, as a fraction (default {d.p50_tol:g})")
    p.add_argument("--csv", metavar="FILE", help="write the windows (per run and rank) to FILE")


def run(args: argparse.Namespace) -> int:
    """The `soak` command: 0 when every run passes, 1 when one fails (ReportError: bad input)."""
    if args.windows < 2:
        raise ReportError(f"--windows must be at least 2: {args.windows}")
    if not 0 <= args.warmup_windows < args.windows - 1:
        raise ReportError(f"--warmup-windows must be 0..{args.windows - 2} (two steady windows to compare): "
                          f"{args.warmup_windows}")
    for name in ("gpu_tol_mib", "rss_tol_mib", "fd_tol", "thread_tol", "spread_tol", "p50_tol"):
        x = getattr(args, name)
        if not (math.isfinite(x) and x >= 0):
            raise ReportError(f"--{name.replace('_', '-')} must be a finite number >= 0: {x}")
    tol = Tolerances(gpu_mib=args.gpu_tol_mib, rss_mib=args.rss_tol_mib, fds=args.fd_tol, threads=args.thread_tol,
                     spread_tol=args.spread_tol, p50_tol=args.p50_tol)
    samples = read_samples(args.samples)
    report = load_report(args.report)
    verdicts = []
    for case in report.cases:
        for r in case.runs:
            span = _timed_span(args.report, case.name, r.name)
            v = analyze_run(samples, r, r.ranks, span, args.windows, args.warmup_windows, tol, args.min_samples)
            v.name = f"{case.name}/{r.name}"
            v.lines[-1] = v.lines[-1].replace(f"soak {r.name}:", f"soak {v.name}:", 1)
            verdicts.append(v)
            print("\n".join(v.lines))
            print()
    if not verdicts:
        raise ReportError(f"{args.report}: no runs")
    if args.csv:
        fields = ["case_run", "window", "warmup", "t_start_s", "t_end_s", "rank", "samples", "layers", "layer_p10_ms",
                  "layer_p50_ms", "layer_p90_ms", *(f"{c}_{m}" for c, _, _, _ in _FIGURES for m in ("min", "max"))]
        try:
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields)
                w.writeheader()
                for v in verdicts:
                    for row in v.rows:
                        w.writerow({"case_run": v.name, **{k: row[k] for k in fields[1:]}})
        except OSError as e:
            raise ReportError(f"{args.csv}: cannot write: {e.strerror or e}") from None
    return 0 if all(v.passed for v in verdicts) else 1
