#!/usr/bin/env python3
"""How long a stream takes to resume after the event it waits for on another stream,
by what the event was recorded behind: measured op by op in GPU reports' traced layers
(events around every op).

For every cross-stream event wait that started before its event completed (so it was
blocked on it), prints the hop (end of the wait - end of the record) and what the record
follows on its stream (records aside): device work (a kernel, copy, memset or collective)
or a stream wait/write. The machine files' `work_event_hop_us` is the median hop behind
work, its range the least and most measured (docs/model.md, "Events behind work").
The default reports are none of the leave-one-out pairs (scripts/model_pairs.sh), so the
leave-one-out check stays blind to this source.

    python3 scripts/model_wake.py [REPORT.h5 ...]
"""
import statistics
import sys

import h5py
import numpy as np

DEFAULT = [
    "docs/measured/2026-12-01-h200-kernels22/flux-2048-u1-schedules-0fb166f.h5",
    "docs/measured/2026-12-02-h200-graphs/graphs-flux-dev-1024-u1.h5",
    "docs/measured/2026-12-02-h200-graphs/graphs-flux-dev-2048-u1.h5",
    "docs/measured/2026-12-02-h200-graphs/graphs-floor-u1.h5",
]
KERNEL, COPY, MEMSET, RECORD, WAIT_EVENT, COLLECTIVE = 0, 1, 2, 5, 6, 7  # model::OpKind
WORK = (KERNEL, COPY, MEMSET, COLLECTIVE)


def waits(path):
    with h5py.File(path, "r") as f:
        for case in f["cases"]:
            for run in f["cases"][case]:
                g = f["cases"][case][run]
                if "traced_layer" not in g:
                    continue
                t = g["traced_layer"]
                kind, stream, waits_for, rank = (t[k][:] for k in ("op_kind", "op_stream", "op_waits_for", "op_rank"))
                start = t["op_measured_start_ms"][:] * 1e3
                end = t["op_measured_end_ms"][:] * 1e3
                for i in np.where((kind == WAIT_EVENT) & (waits_for >= 0))[0]:
                    mine = np.where(rank == rank[i])[0]
                    j = mine[waits_for[i]]
                    if stream[j] == stream[i] or np.isnan(start[i]) or end[j] - start[i] <= 0:
                        continue
                    before = [k for k in mine if k < j and stream[k] == stream[j] and kind[k] != RECORD]
                    behind = "work" if before and kind[before[-1]] in WORK else "wait"
                    yield f"{path.split('/')[-1]} {case}/{run} rank {rank[i]}", behind, end[j] - start[i], end[i] - end[j]


def main():
    rows = [w for p in (sys.argv[1:] or DEFAULT) for w in waits(p)]
    print("# run, the record is behind, blocked us, hop us (end of the wait - end of the record)")
    for name, behind, b, h in sorted(rows, key=lambda r: (r[1], r[3])):
        print(f"{name}  behind {behind}  blocked {b:8.1f}  hop {h:6.1f}")
    for behind in ("wait", "work"):
        hops = [h for _, w, _, h in rows if w == behind]
        if hops:
            print(f"# behind {behind}: {len(hops)} waits resumed {min(hops):.1f}-{max(hops):.1f} us after their event "
                  f"(median {statistics.median(hops):.1f}, mean {statistics.mean(hops):.1f})")


if __name__ == "__main__":
    main()
