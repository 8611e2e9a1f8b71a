#!/usr/bin/env python3
"""Writes the machine files derived from the measured H200 one (h200-nvlink.json):

- h100-sxm.json: an H100 SXM node from public specs and one H100's bench. Same GH100
  compute die, SM count, clocks, NVLink 4 and copy engines as the H200, so fixed costs, the
  link and the attention profile (with the attention_scale fitted to it) are the H200's;
  HBM3 at 3.35 TB/s instead of HBM3e at 4.8 TB/s, so the scalar memory-bound rates
  (norm_rope_gbs, stream_gbs) scale by 3.35/4.8. The norm+RoPE and GEMM profiles are the
  H100's own, as bench_kernels measured them at the current kernels (H100_BENCH, written in
  by `ulysses-ipc model rates`). The strided same-device copy (sm_copy_gbs, 1.58 TB/s on the
  H200) is not HBM-bound and keeps its rate.
- h200-2node.json: two such H200 nodes of 8 GPUs, one 400 Gb/s NIC per GPU.
- h200-4node.json: four of them (the same node and NIC): Ulysses32, and hierarchical
  against flat all-to-all across more than one remote node (docs/predictions-hier.md).

Run it after h200-nvlink.json changes (e.g. after `ulysses-ipc model calibrate`), with the app
built (build/app/ulysses-ipc, or $ULYSSES_IPC):
    python3 inputs/machines/derive.py
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# One H100's bench_kernels at the current kernels (f0e2405's; docs/measured/2026-12-07-h100-e74c950):
# its norm+RoPE rows of the fused view and its GEMM-by-shape rows become h100-sxm's profiles.
H100_BENCH = "docs/measured/2026-12-07-h100-e74c950/bench_kernels-e74c950.h5"  # from the repository root


def load(name):
    with open(os.path.join(HERE, name + ".json")) as f:
        return json.load(f)


def save(name, m):
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(m, f, indent=2)
        f.write("\n")


def main():
    h200 = load("h200-nvlink")
    p = h200["parameters"]

    h100 = copy.deepcopy(h200)
    h100["name"] = "h100-sxm"
    h100["description"] = ("One node of 8 NVIDIA H100 SXM GPUs (NVLink 4 through NVSwitch), derived from public specs, "
                           "the measured H200 and one H100's bench (inputs/machines/derive.py): same GH100 die, so "
                           "fixed costs, the link and the attention profile (with the attention_scale fitted to it) "
                           "are the H200's; the norm+RoPE and GEMM profiles are the H100's own (bench_kernels at "
                           "e74c950, docs/measured/2026-12-07-h100-e74c950); HBM3 3.35 TB/s scales the scalar "
                           "memory-bound rates by 3.35/4.8 (not the strided same-device copy, which HBM does not "
                           "bound).")
    q = h100["parameters"]
    scale = 3350.0 / 4800.0
    hbm_range = "hi: HBM3 spec 3.35 TB/s (read + write cannot exceed it)"
    q["hbm_gbs"] = {"value": 3350, "unit": "GB/s", "source": "spec: H100 SXM HBM3 3.35 TB/s", "range": [3350, 3350],
                    "range_source": "spec: H100 SXM HBM3 3.35 TB/s"}
    # sm_copy_gbs is not among them: the strided same-device copy it rates runs at 1.58 TB/s on
    # the H200, a third of its HBM, so HBM does not bound it; the same die, clocks and copy
    # kernel keep the H200's rate. (Until 2026-12-05 it was scaled by 3350/4800 too; the first
    # H100 run, docs/measured/2026-12-05-h100-ordering, measured that copy at 1.43 TB/s, 0.91 of
    # the H200's, and the gather it carries at Ulysses1 modelled 44% long.)
    for k in ("norm_rope_gbs", "stream_gbs"):
        q[k] = {"value": round(p[k]["value"] * scale, 2), "unit": "GB/s",
                "source": f"H200's {p[k]['value']} GB/s x 3350/4800 (HBM spec ratio; derive.py)",
                "range": [100, 3350], "range_source": hbm_range}
    q["sm_copy_gbs"]["source"] = ("H200's rate (not HBM-bound: a third of the H200's HBM; same die, clocks and copy "
                                  "kernel; derive.py): " + q["sm_copy_gbs"]["source"])
    q["sm_copy_gbs"]["range"], q["sm_copy_gbs"]["range_source"] = [100, 3350], hbm_range
    h100.pop("norm_rope_profile", None)  # the H100's own, below (the H200's would break HBM3's range)
    # The attention profile stays the H200's: attention_scale was fitted with it (the H100's own
    # attention rows with that scale put FLUX 1024's attention 10-13% long; docs/model.md).
    for pt in h100.get("attention_profile", []):
        pt["source"] = "H200's rate (same GH100 die; attention_scale was fitted with it; derive.py): " + pt["source"]
    q["sm_count"] = {"value": 132, "unit": "SMs", "source": "spec: H100 SXM, 132 SMs", "range": [132, 132],
                     "range_source": "spec: H100 SXM has 132 SMs"}
    for k, v in q.items():
        if "fit" in v:
            del v["fit"]
            if not v["source"].startswith("H200"):
                v["source"] = "H200's value (same die; derive.py): " + v["source"]
    # The H100's own norm+RoPE and GEMM profiles, read from its bench by the app's reader; the
    # derived file is written whole or not at all.
    app = os.environ.get("ULYSSES_IPC", os.path.join(ROOT, "build", "app", "ulysses-ipc"))
    if not os.access(app, os.X_OK):
        sys.exit(f"derive.py: {app} not found: build the app first (scripts/setup.sh) or set ULYSSES_IPC")
    with tempfile.TemporaryDirectory() as tmp:
        derived = os.path.join(tmp, "h100-sxm.json")
        with open(derived, "w") as f:
            json.dump(h100, f, indent=2)
        subprocess.run([app, "model", "rates", "--machine", derived, "--rates", H100_BENCH, "--profile", "norm_rope",
                        "--profile", "gemm", "-o", os.path.join(HERE, "h100-sxm.json")], check=True, cwd=ROOT)

    for nodes, word in ((2, "Two"), (4, "Four")):
        multi = copy.deepcopy(h200)
        multi["name"] = f"h200-{nodes}node"
        multi["description"] = (f"{word} nodes of 8 NVIDIA H200 SXM GPUs, one 400 Gb/s NIC per GPU (rail-aligned), each "
                                "node as h200-nvlink (inputs/machines/derive.py).")
        multi["topology"] = {"gpus_per_node": 8, "nodes": nodes}
        for v in multi["parameters"].values():
            v.pop("fit", None)
        nic = multi["parameters"]["nic_gbs"]
        nic["value"] = 50
        nic["source"] = "spec: one 400 Gb/s NIC per GPU"
        save(multi["name"], multi)

if __name__ == "__main__":
    main()
