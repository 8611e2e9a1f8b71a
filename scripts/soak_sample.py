#!/usr/bin/env python3
"""Runs a command (mpirun ... ulysses-ipc ...) and samples its rank processes until it ends.

    soak_sample.py -o SAMPLES.csv [--interval S] [--name ulysses-ipc] [--gpu N] -- mpirun -np 2 ...

Every interval, for every process under the command whose name is --name (the ranks,
however mpirun forks them): host RSS and threads (/proc/PID/status), open file
descriptors (/proc/PID/fd), the MPI rank (OMPI_COMM_WORLD_RANK or PMI_RANK from
/proc/PID/environ), and where nvidia-smi exists the GPU's memory.used and the process's
own used_memory (blank when nvidia-smi cannot see the process, e.g. in another PID
namespace), each with the wall time its nvidia-smi call returned (gpu_used_time_s,
gpu_proc_time_s): nvidia-smi is asked in threads of its own, so a row carries the latest
answer, which may be older than the row (a call takes 0.1-1 s); `ulysses-post soak` places
the GPU figures at their own times. One CSV row per rank process per sample.
Exits with the command's exit status (2 for bad arguments), so that a script can use it
in place of the command. Standard library only: it runs with any python3.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

COLUMNS = ["time_s", "pid", "rank", "rss_kib", "threads", "fds", "gpu_used_mib", "gpu_proc_mib", "gpu_used_time_s",
           "gpu_proc_time_s"]
NVIDIA_SMI_TIMEOUT_S = 10


def _children() -> dict[int, list[int]]:
    """ppid -> pids, from one pass over /proc."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # The name (field 2) is in parentheses and may hold spaces: ppid follows the last ')'.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _descendants(root: int) -> list[int]:
    kids = _children()
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def _proc_sample(pid: int, name: str) -> dict | None:
    """One rank process's figures, or None if it is not a rank (or just ended)."""
    comm = _read(f"/proc/{pid}/comm")
    if comm is None or comm.strip() != name[:15]:  # the kernel keeps 15 characters of the name
        return None
    status = _read(f"/proc/{pid}/status")
    environ = _read(f"/proc/{pid}/environ")
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    if status is None:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "VmRSS" not in fields:  # a zombie: no memory left to sample
        return None
    env = dict(kv.split("=", 1) for kv in (environ or "").split("\0") if "=" in kv)
    rank = env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", ""))
    if not rank:
        # Every rank runs under mpirun, so a rank's environment names it. An empty one is
        # a process caught inside execve: its name is already the new program's, but its
        # environment is not yet mapped (/proc/PID/environ reads empty). Not a rank yet.
        return None
    return {"pid": pid, "rank": rank, "rss_kib": int(fields["VmRSS"].split()[0]),
            "threads": int(fields["Threads"].split()[0]), "fds": fds}


def _nvidia_smi(args: list[str]) -> list[list[str]]:
    try:
        p = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if p.returncode != 0:
        return []
    return [[c.strip() for c in line.split(",")] for line in p.stdout.splitlines() if line.strip()]


def _mib(text: str) -> str:
    """A figure of nvidia-smi as it came, or blank where it is none ("[N/A]", "[Not Supported]")."""
    try:
        float(text)
    except ValueError:
        return ""
    return text


def _gpu_used(gpu: str) -> str:
    """memory.used of the GPU in MiB; blank without nvidia-smi."""
    used = _nvidia_smi(["--query-gpu=memory.used", "-i", gpu])
    return _mib(used[0][0]) if used and used[0] else ""


def _gpu_procs(gpu: str) -> dict[int, str]:
    """pid -> used_memory MiB of the processes on the GPU."""
    per_pid = {}
    for row in _nvidia_smi(["--query-compute-apps=pid,used_memory", "-i", gpu]):
        if len(row) == 2 and row[0].isdigit():
            per_pid[int(row[0])] = _mib(row[1])
    return per_pid


class _Poll:
    """One nvidia-smi query in a thread of its own, every `interval` s: `latest` is
    (answer, wall time the call returned; "" before the first answer)."""

    def __init__(self, query, empty, interval: float) -> None:
        self.latest = (empty, "")
        self._query, self._interval = query, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            answer = self._query()
            self.latest = (answer, f"{time.time():.3f}")  # one assignment: readers see a whole pair
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - t0)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=NVIDIA_SMI_TIMEOUT_S * 2 + 1)


class GpuPoller:
    """nvidia-smi in threads of their own, one per query (memory.used; the processes'
    used_memory): a slow call (it can take a second) never holds back the /proc samples
    nor the other query; each row carries the latest answers and the times they came."""

    def __init__(self, gpu: str, interval: float) -> None:
        self._used = _Poll(lambda: _gpu_used(gpu), "", interval)
        self._procs = _Poll(lambda: _gpu_procs(gpu), {}, interval)

    @property
    def latest(self) -> tuple[str, dict[int, str], str, str]:
        """(memory.used, pid -> used_memory, the times each answer came)."""
        (used, t_used), (procs, t_procs) = self._used.latest, self._procs.latest
        return used, procs, t_used, t_procs

    def stop(self) -> None:
        self._used.stop()
        self._procs.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="soak_sample.py", description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", required=True, help="the CSV file of samples to write")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5)")
    p.add_argument("--gpu-interval", type=float, default=0.5,
                   help="seconds between nvidia-smi queries, each query in a thread of its own (default 0.5; each row "
                        "carries the latest)")
    p.add_argument("--name", default="ulysses-ipc", help="process name of the ranks (default ulysses-ipc)")
    p.add_argument("--gpu", default=os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0",
                   help="nvidia-smi index of the GPU to sample (default: the first of CUDA_VISIBLE_DEVICES, else 0)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run and sample")
    args = p.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.error("no command to run (give it after --)")
    if not (args.interval > 0 and args.gpu_interval > 0):
        p.error(f"--interval and --gpu-interval must be positive: {args.interval}, {args.gpu_interval}")
    use_gpu = shutil.which("nvidia-smi") is not None
    try:
        out = open(args.output, "w", newline="")
    except OSError as e:
        print(f"soak_sample.py: error: cannot write {args.output}: {e}", file=sys.stderr)
        return 2
    try:
        child = subprocess.Popen(cmd)
    except OSError as e:
        print(f"soak_sample.py: error: cannot run {cmd[0]}: {e}", file=sys.stderr)
        return 2
    # A timeout's SIGTERM to this process reaches the command too, then the sampling stops.
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    poller = GpuPoller(args.gpu, args.gpu_interval) if use_gpu else None
    with out:
        w = csv.writer(out)
        w.writerow(COLUMNS)
        while child.poll() is None:
            t0 = time.monotonic()
            gpu_used, gpu_pid, t_used, t_procs = poller.latest if poller else ("", {}, "", "")
            now = f"{time.time():.3f}"
            for pid in _descendants(child.pid):
                s = _proc_sample(pid, args.name)
                if s is None:
                    continue
                proc_mib = gpu_pid.get(pid, "")
                w.writerow([now, s["pid"], s["rank"], s["rss_kib"], s["threads"], s["fds"], gpu_used, proc_mib,
                            t_used if gpu_used != "" else "", t_procs if proc_mib != "" else ""])
            out.flush()
            time.sleep(max(0.0, args.interval - (time.monotonic() - t0)))
    if poller:
        poller.stop()
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main())
