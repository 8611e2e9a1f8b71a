#!/usr/bin/env python3
"""Writes bench_kernels.h5 beside bench_kernels.txt: the 2026-11-29 run's table (code of
commit add1657, which printed text only) in the layout `bench_kernels -o` writes today,
so that `ulysses-ipc model ... --bench REPORT=bench_kernels.h5` replays these reports with
the norm+RoPE rate their code had (1.57 TB/s, a kernel since replaced). Every figure is
copied from the text; the file's `revision` attribute says so.
    python3 docs/measured/2026-11-29-h200x2/bench_kernels_h5.py
"""
import os
import re

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SECTION = {"attention": "attention", "norm+RoPE": "norm+rope", "gemm": "gemm", "cudaMemcpy2DAsync": "copies",
           "peer": "peer"}


def main():
    rows = []
    for line in open(os.path.join(HERE, "bench_kernels.txt")):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 5 or not re.match(r"^[\d.]+$", parts[2]):
            continue
        what, shape, ms, rate, note = parts
        value, unit = rate.split()
        section = next(v for k, v in SECTION.items() if what.startswith(k))
        if section == "norm+rope":  # the dispatched kernel's row, named as bench_kernels names it now
            what = "norm+RoPE rms"
            shape = shape.replace(" fused view", " fused")
        rows.append((section, what, shape, float(ms), float(value), unit, note))
    with h5py.File(os.path.join(HERE, "bench_kernels.h5"), "w") as f:
        g = f.create_group("bench_kernels")
        g.attrs["device"] = "NVIDIA H200 (0)"
        g.attrs["revision"] = "add1657 (converted from bench_kernels.txt by bench_kernels_h5.py)"
        s = h5py.string_dtype()
        for i, name in enumerate(("section", "what", "shape")):
            g.attrs.create(name, [r[i] for r in rows], dtype=s)
        g.attrs.create("unit", [r[5] for r in rows], dtype=s)
        g.attrs.create("note", [r[6] for r in rows], dtype=s)
        g.attrs["ms"] = np.array([r[3] for r in rows])
        g.attrs["rate"] = np.array([r[4] for r in rows])
        g.attrs["of_bound"] = np.full(len(rows), np.nan)


if __name__ == "__main__":
    main()
