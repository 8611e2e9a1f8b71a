"""The statistics of docs/report.md, computed from the raw timing arrays with numpy.

The critical path of a stage in one timed layer is its maximum over ranks (the slowest
rank sets the layer's pace); medians and percentiles are numpy's default linear
interpolation, exactly what the writer (lib/report.cpp) uses, so that the stored
attributes can be checked against these to rounding noise.
"""

from __future__ import annotations

import numpy as np


def critical_path(stage_ms: np.ndarray) -> np.ndarray:
    """(repeats, iterations, ranks, stages) -> (repeats*iterations, stages): max over ranks."""
    r, i, _, s = stage_ms.shape
    if stage_ms.shape[2] == 0:
        return np.empty((0, s))
    return stage_ms.max(axis=2).reshape(r * i, s)


def percentile(x: np.ndarray, q: float) -> float:
    """numpy's default percentile of a 1-D sample; NaN for an empty one (the writer's rule)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    return float(np.percentile(x, q)) if x.size else float("nan")


def median(x: np.ndarray) -> float:
    return percentile(x, 50)


def stage_percentiles(stage_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per stage: median, p10 and p90 of the critical path over every timed layer."""
    crit = critical_path(stage_ms)

    def per_stage(q: float) -> np.ndarray:
        return np.array([percentile(crit[:, s], q) for s in range(crit.shape[1])])

    return per_stage(50), per_stage(10), per_stage(90)


def repeat_medians(stage_ms: np.ndarray, stage: int) -> np.ndarray:
    """Per repeat, the median over its iterations of one stage's critical path.

    The repeats are the independent samples of a run (each starts with its own warmup),
    so their spread, not the spread of single layers, is what tells a real A/B
    difference from noise.
    """
    if stage_ms.shape[2] == 0:
        return np.full(stage_ms.shape[0], np.nan)
    per_layer = stage_ms[..., stage].max(axis=2)  # (repeats, iterations)
    return np.array([median(row) for row in per_layer])


def spread(x: np.ndarray) -> tuple[float, float]:
    """(p10, p90) of a sample: the band the tools print beside a median."""
    return percentile(x, 10), percentile(x, 90)


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN where that is undefined (0 or NaN time)."""
    if not (np.isfinite(numerator) and np.isfinite(denominator)) or denominator == 0:
        return float("nan")
    return numerator / denominator
