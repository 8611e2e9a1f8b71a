#!/usr/bin/env python3
"""Golden regression test: what the program makes of the shipped decks (inputs/) and of a
cheap subset of tests/decks/, compared line by line with the committed golden.txt.

Each invocation of RUNS records its exit code, its first error line and, where it wrote a
report, the report's structure (every group, dataset and attribute name, dtype and
shape) and its values: output digests, parity, counters, layouts, and the modelled
figures, rounded to 6 significant digits. Left out, since they change from run to run
or machine to machine: provenance (revision, date, command line, hosts, host CPUs, devices,
versions) and every time a simulated run measured on the CPU (stage_ms, the statistics
over it, measured op times; the trace words, which hold them and handles), of which only
the shape is kept. Error lines have the checkout's path and the host's free memory masked.

Run (ctest -R golden does):   python3 tests/golden/golden.py --app build/app/ulysses-ipc
Regenerate after an intended change (and commit tests/golden/golden.txt with it):
    python3 tests/golden/golden.py --app build/app/ulysses-ipc --update
"""
import argparse
import difflib
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = pathlib.Path(__file__).with_name("golden.txt")
INPUTS = REPO / "inputs"
BAD = REPO / "tests" / "decks"

# (label, ranks, arguments after the program; "{out}" is the report path, and env).
# Simulation decks run for real at 2 ranks; the full-size decks in --mode model at 2 and
# 4 ranks (no data, seconds); bad decks and options at 1 rank.
RUNS = [
    ("default.np2", 2, ["inputs/default.h5", "-o", "{out}"], {}),
    ("default.np1", 1, ["inputs/default.h5", "-o", "{out}", "--ablations", "none"], {}),
    ("protocol.u2-bf16.np2", 2, ["inputs/protocol.h5", "-o", "{out}", "--case", "u2-bf16"], {}),
    ("protocol.tp2u2.np4.nodes2", 4,
     ["inputs/protocol.h5", "-o", "{out}", "--case", "tp2-u2-bf16", "--ranks-per-node", "2", "--ablations", "none"], {}),
    ("protocol.u4-fp16.np4.hier", 4,
     ["inputs/protocol.h5", "-o", "{out}", "--case", "u4-fp16", "--ranks-per-node", "2", "--gather", "ipc",
      "--ablations", "none"], {}),
    ("flux-dev-sim.np2", 2, ["inputs/flux-dev-sim.h5", "-o", "{out}"], {}),
    ("sd3-medium-sim.np2", 2, ["inputs/sd3-medium-sim.h5", "-o", "{out}", "--ablations", "none"], {}),
    ("wan2.1-14b-sim.np2", 2, ["inputs/wan2.1-14b-sim.h5", "-o", "{out}", "--ablations", "none"], {}),
    ("default.corrupt.np2", 2, ["inputs/default.h5", "-o", "{out}", "--ablations", "none"],
     {"ULYSSES_TEST_CORRUPT_RANK": "1"}),
    ("flux-dev-1024.model.np2", 2, ["inputs/flux-dev-1024.h5", "-o", "{out}", "--mode", "model"], {}),
    ("wan2.1-14b-480p.model.np4", 4,
     ["inputs/wan2.1-14b-480p.h5", "-o", "{out}", "--mode", "model", "--ablations", "none"], {}),
    ("hunyuanvideo-720p.model.np2.h100", 2,
     ["inputs/hunyuanvideo-720p.h5", "-o", "{out}", "--mode", "model", "--machine", "h100-sxm",
      "--ablations", "none"], {}),
    ("bad-option.mode", 1, ["inputs/default.h5", "-o", "{out}", "--mode", "fast"], {}),
    ("bad-option.case", 1, ["inputs/default.h5", "-o", "{out}", "--case", "nope"], {}),
    ("bad-option.ablation", 1, ["inputs/default.h5", "-o", "{out}", "--ablations", "no-such"], {}),
    ("bad-option.machine", 1, ["inputs/default.h5", "-o", "{out}", "--machine", "no-such-machine"], {}),
    ("bad-layout.protocol.np1", 1, ["inputs/protocol.h5", "-o", "{out}", "--case", "u4-fp16"], {}),
] + [(f"bad-deck.{name}", 1, [f"tests/decks/{name}", "-o", "{out}"], {"ULYSSES_DECK_PARSE_TIMEOUT": "5"})
     for name in ["missing_seq_len.h5", "string_where_int.h5", "unknown_dtype.h5", "soft_link_case.h5",
                  "schema_v99.h5", "heads_not_divisible.h5", "odd_head_dim_with_rope.h5", "nan_tolerance.h5",
                  "empty_transports.h5", "duplicate_schedule.h5", "unknown_field.h5", "huge_memory.h5",
                  "not_hdf5.h5", "no_cases.h5"]]

# Run attributes and datasets that hold times a simulated run measured on the CPU: only
# their shape is recorded (in --mode model they are modelled, and recorded in full).
MEASURED = {"stage_ms", "v_copy_ms", "v_overlap_ms", "median_ms", "p10_ms", "p90_ms", "scatter_bandwidth_gbs",
            "op_measured_start_ms", "op_measured_end_ms", "timed_wall_start_s", "timed_wall_end_s"}
# Host wall times: measured in every mode (the host's own clock), never modelled.
HOST_TIMES = {"host_enqueue_ms"}
# Provenance: changes with the build, the date and the machine.
PROVENANCE = {"software_version", "date", "command_line", "hosts", "host_cpus", "devices"}
# Datasets longer than this are recorded as a digest of their (rounded) values.
INLINE_MAX = 16


def fmt_scalar(v) -> str:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (float, np.floating)):
        return "nan" if np.isnan(v) else f"{float(v):.6g}"
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return repr(v)


def fmt_value(v) -> str:
    a = np.asarray(v)
    if a.ndim == 0:
        return fmt_scalar(a.item() if a.dtype != object else a.item())
    flat = [fmt_scalar(x) for x in a.reshape(-1).tolist()]
    if len(flat) <= INLINE_MAX:
        return "[" + ", ".join(flat) + "]"
    return f"<{len(flat)} values sha1 {hashlib.sha1(' '.join(flat).encode()).hexdigest()[:16]}>"


def describe_report(path: pathlib.Path, lines: list[str]) -> None:
    with h5py.File(path, "r") as f:
        modelled = f.attrs.get("mode") == "model"

        def attrs(name, obj):
            for k in sorted(obj.attrs):
                if k in PROVENANCE or (name == "/" and k == "deck"):
                    lines.append(f"  {name} @{k}")
                    continue
                v = obj.attrs[k]
                shape = np.shape(v)
                if (k in MEASURED and not modelled) or k in HOST_TIMES:
                    lines.append(f"  {name} @{k} shape {shape}")
                else:
                    lines.append(f"  {name} @{k} = {fmt_value(v)}")

        attrs("/", f)

        def visit(name, obj):
            if name == "versions":
                lines.append("  /versions (group)")
                return
            if name.startswith("versions/"):
                return
            if isinstance(obj, h5py.Group):
                lines.append(f"  /{name} (group)")
            else:
                base = name.rsplit("/", 1)[-1]
                head = f"  /{name} {obj.dtype.str if obj.dtype.kind != 'O' else 'str'} {obj.shape}"
                # A trace's exact bytes hold measured op times and run-specific words (handles;
                # its ops are recorded through op_*): shape only.
                if (base in MEASURED and not modelled) or base in HOST_TIMES or base.startswith(("op_measured", "trace_rank")):
                    lines.append(head)
                else:
                    lines.append(f"{head} = {fmt_value(obj[()])}")
            attrs("/" + name, obj)

        f.visititems(visit)


def first_error_line(text: str) -> str:
    """The first line that says "error", with what depends on the machine masked: the
    checkout's path and the memory a host has free."""
    for line in text.splitlines():
        if "error" in line.lower():
            line = line.strip().replace(str(REPO), "<repo>")
            return re.sub(r"which has [0-9.]+ GiB free", "which has <free> GiB free", line)
    return ""


def run_all(app: str) -> list[str]:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    lines = []
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        for label, np_, args, extra in RUNS:
            out = pathlib.Path(tmp) / f"{label}.h5"
            cmd = ["mpirun", "-np", str(np_), "--oversubscribe", app] + [a.replace("{out}", str(out)) for a in args]
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**env, **extra}, timeout=300)
            lines.append(f"run {label}: exit {p.returncode}")
            err = first_error_line(p.stderr).replace(str(out), "REPORT")
            if err:
                lines.append(f"  error: {err}")
            if out.exists():
                describe_report(out, lines)
            print(f"golden: {label}: exit {p.returncode}", file=sys.stderr, flush=True)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--app", default=str(REPO / "build" / "app" / "ulysses-ipc"))
    ap.add_argument("--update", action="store_true", help="rewrite golden.txt from this build")
    a = ap.parse_args()
    lines = run_all(os.path.abspath(a.app))
    text = "\n".join(lines) + "\n"
    if a.update:
        GOLDEN.write_text(text)
        print(f"golden: wrote {GOLDEN} ({len(lines)} lines)")
        return 0
    want = GOLDEN.read_text()
    if want == text:
        print(f"golden: {len(lines)} lines agree with {GOLDEN}")
        return 0
    diff = difflib.unified_diff(want.splitlines(), lines, "golden.txt", "this build", lineterm="", n=1)
    sys.stdout.write("\n".join(list(diff)[:400]) + "\n")
    print("golden: FAILED: the output differs from tests/golden/golden.txt (regenerate with --update only if the "
          "change is intended)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
