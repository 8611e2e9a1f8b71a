"""`ulysses-post clocks`: nvidia-smi's samples placed beside a GPU check's stamped steps.

Synthetic samples with known clocks, power and throttle reasons (fresh random draws each
run) must come back as the right medians and shares per step, a step copied into two logs
must count once, and bad input must end in exit 2 with one line. Then the stored H100
check of 520fd4b: the FLUX 2048 layers ran under the power cap at a lower SM clock than the
kernel benchmark's (docs/model.md, "Clocks under sustained work").
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import statistics
from pathlib import Path

import numpy as np
from helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
MEASURED = REPO / "docs" / "measured" / "2026-12-05-h100-520fd4b"
HEADER = ["timestamp", " index", " clocks.current.sm [MHz]", " clocks.current.memory [MHz]", " power.draw [W]",
          " temperature.gpu", " utilization.gpu [%]", " clocks_event_reasons.active"]
T0 = dt.datetime(2026, 12, 5, 23, 59, 0)  # the check runs past midnight: step stamps wrap


def write_samples(path: Path, samples: list[tuple[float, int, int, float, int, int]]) -> None:
    """samples: (seconds after T0, gpu, SM MHz, watts, utilization %, reasons)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for t, gpu, sm, watts, util, reasons in samples:
            stamp = (T0 + dt.timedelta(seconds=t)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            w.writerow([stamp, f" {gpu}", f" {sm} MHz", " 2619 MHz", f" {watts:.2f} W", " 40", f" {util} %",
                        f" 0x{reasons:016x}"])
        f.write("2026/12/06 00:10:00.000, 0, 19")  # the line cut off when the sampler was stopped


def stamp(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%H:%M:%S")


def parse(out: str) -> dict[tuple[str, int], dict[str, str]]:
    return {(r["step"], int(r["gpu"])): r for r in csv.DictReader(io.StringIO(out))}


def test_each_steps_busy_samples_give_its_clock_power_and_cap_share(tmp_path: Path) -> None:
    rng = np.random.default_rng()
    samples, expect = [], {}
    # step "burst" (20..40 s) boosts; step "sustained" (50..110 s, across midnight) is capped on
    # a random share of its busy samples; idle samples between and inside must not count.
    burst = [int(x) for x in rng.integers(1900, 1981, size=100)]
    capped_share = float(rng.uniform(0.5, 1.0))
    sustained = [int(x) for x in rng.integers(1500, 1800, size=300)]
    for i, sm in enumerate(burst):
        samples.append((20 + 0.2 * i, 0, sm, 400.0 + i, 90, 0))
        samples.append((20 + 0.2 * i + 0.1, 0, 345, 70.0, 0, 1))  # idle between kernels
    n_cap = int(round(capped_share * len(sustained)))
    for i, sm in enumerate(sustained):
        samples.append((50 + 0.2 * i, 0, sm, 690.0, 99, 0x4 if i < n_cap else 0))
        samples.append((50 + 0.2 * i, 1, 1980, 300.0, 99, 0x20 if i % 2 else 0))  # a second GPU, thermal
    samples.append((45, 0, 1995, 100.0, 90, 0))  # between the steps: the top clock, in no step
    samples.sort()
    write_samples(tmp_path / "clocks.csv", samples)
    log = [f"=== burst [{stamp(20)}]: bench", f"=== burst [{stamp(40)}]: PASS",
           f"=== sustained [{stamp(50)}]: app", f"=== sustained [{stamp(110)}]: FAIL (rc 1)"]
    (tmp_path / "a.log").write_text("\n".join(log) + "\n")
    (tmp_path / "env.log").write_text("\n".join(log[:2]) + "\n")  # the same step copied into a second log
    r = run_cli("clocks", str(tmp_path / "clocks.csv"), str(tmp_path / "a.log"), str(tmp_path / "env.log"),
                "--format", "csv")
    assert r.rc == 0, r.err
    rows = parse(r.out)
    assert len(r.out.strip().splitlines()) == 1 + 4, r.out  # the copied step counts once
    assert sorted(rows) == [("burst", 0), ("burst", 1), ("sustained", 0), ("sustained", 1)], sorted(rows)
    b = rows[("burst", 0)]
    assert int(b["busy"]) == len(burst) and int(b["samples"]) == 2 * len(burst)
    assert float(b["sm_mhz_median"]) == statistics.median(burst)
    assert abs(float(b["sm_share_median"]) - statistics.median(burst) / 1995) < 1e-12
    assert float(b["power_w_max"]) == 400.0 + len(burst) - 1 and float(b["power_capped"]) == 0
    assert int(rows[("burst", 1)]["busy"]) == 0
    s = rows[("sustained", 0)]
    assert int(s["busy"]) == len(sustained) and float(s["sm_mhz_median"]) == statistics.median(sustained)
    assert abs(float(s["sm_mhz_p10"]) - float(np.percentile(sustained, 10))) < 1e-9
    assert abs(float(s["power_capped"]) - n_cap / len(sustained)) < 1e-12 and float(s["slowdown"]) == 0
    g1 = rows[("sustained", 1)]
    assert float(g1["slowdown"]) == 0.5 and float(g1["sm_share_median"]) == 1.0  # GPU 1's own top clock
    table = run_cli("clocks", str(tmp_path / "clocks.csv"), str(tmp_path / "a.log"))
    assert table.rc == 0 and "GPU 0: 1995 MHz" in table.out and "sustained" in table.out, table.out


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    write_samples(tmp_path / "clocks.csv", [(1, 0, 1980, 100.0, 90, 0)])
    (tmp_path / "none.log").write_text("no stamped step here\n")
    (tmp_path / "a.log").write_text(f"=== s [{stamp(0)}]: x\n=== s [{stamp(2)}]: PASS\n")
    (tmp_path / "bad.csv").write_text("name, value\n1, 2\n")
    (tmp_path / "cols.csv").write_text("timestamp, index\n2026/12/05 23:59:01.000, 0\n")
    cases = [
        ([str(tmp_path / "missing.csv"), str(tmp_path / "a.log")], "missing.csv"),
        ([str(tmp_path / "bad.csv"), str(tmp_path / "a.log")], "not nvidia-smi's CSV"),
        ([str(tmp_path / "cols.csv"), str(tmp_path / "a.log")], "no column 'clocks.current.sm'"),
        ([str(tmp_path / "clocks.csv"), str(tmp_path / "none.log")], "no stamped steps"),
        ([str(tmp_path / "clocks.csv"), str(tmp_path / "gone.log")], "gone.log"),
    ]
    for args, what in cases:
        r = run_cli("clocks", *args)
        assert r.rc == 2 and what in r.err and len(r.err.strip().splitlines()) == 1, (args, r.rc, r.err)


def test_the_h100s_flux_2048_layers_ran_power_capped_below_the_benchs_clock() -> None:
    r = run_cli("clocks", str(MEASURED / "clocks-520fd4b.csv"), str(MEASURED / "steps-520fd4b.txt"),
                "--format", "csv")
    assert r.rc == 0, r.err
    rows = {k[0]: v for k, v in parse(r.out).items()}
    flux2048, flux1024, bench = (rows["app graphs-flux-dev-2048-u1"], rows["app graphs-flux-dev-1024-u1"],
                                 rows["bench_kernels"])
    assert float(flux2048["power_capped"]) == 1.0 and int(flux2048["busy"]) >= 60
    assert 0.85 < float(flux2048["sm_share_median"]) < 0.89, flux2048  # 1725 of 1980 MHz
    assert 0.95 < float(flux1024["sm_share_median"]) < 0.99, flux1024  # 1920
    assert float(bench["sm_share_median"]) == 1.0 and float(bench["power_capped"]) < 0.5, bench
