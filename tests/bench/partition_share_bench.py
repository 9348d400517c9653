#!/usr/bin/env python3
"""Compute shares on a busy device: several sessions flood matmuls, all in one partition, then
split over two partitions with compute shares 0.5 / 0.5 and 0.8 / 0.2 (issue 16: "a
partition's delivered GPU time within +-3 points of its configured share when all partitions
are busy"). Each session is a process of its own running `c = a @ a` synchronously, as fast as
it goes, for --seconds; gpukitd is started fresh for each layout.

    partition_share_bench.py [--size 8192] [--seconds 8] [--sessions 4] [--backend cuda]

Reports per layout: ops/s and TFLOP/s over all sessions, each partition's ops and its share of
them (the work done: every op is the same size), and the device time gpukitd charged each
partition (`gpukitctl partitions`), which on a GPU includes the time concurrent work of other
streams shared the GPU with it. The last line is one JSON object with every figure.

Binaries come from the bundle this script sits in (bin/, python/) or from $GPUKIT_BUILD_DIR.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # gpukitd_socket.py lies beside this file, here and in a bundle
    sys.path.insert(0, str(HERE))
from gpukitd_socket import wait_for_gpukitd  # noqa: E402


def _layout() -> Dict[str, Path]:
    """gpukitd, gpukitctl and the Python package: the bundle's, else a build tree's."""
    bundle = HERE.parent
    if (bundle / "bin" / "gpukitd").exists() and (bundle / "python").exists():
        return {"gpukitd": bundle / "bin" / "gpukitd", "gpukitctl": bundle / "bin" / "gpukitctl",
                "python": bundle / "python"}
    build = Path(os.environ.get("GPUKIT_BUILD_DIR", HERE.parents[1] / "build"))
    return {"gpukitd": build / "daemon" / "gpukitd",
            "gpukitctl": build / "client" / "cpp" / "gpukitctl",
            "python": build / "python"}


def _session(address: str, partition: str, size: int, dtype: str, seconds: float, queue) -> None:
    sys.path.insert(0, str(_layout()["python"]))
    import gpukit
    import numpy as np

    gk = gpukit.connect(address, tenant=f"share-{partition}", partition=partition,
                        pipeline=False)  # each op timed to its end
    a = gk.array(np.full((size, size), 0.01, np.float32))
    if dtype != "float32":
        a = a.astype(dtype)
    for _ in range(3):
        a @ a
    ops, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        a @ a
        ops += 1
    queue.put((partition, ops, time.monotonic() - start))


def _run(args: argparse.Namespace, partitions: Optional[List[dict]], placement: List[str]) -> dict:
    paths = _layout()
    work = Path(tempfile.mkdtemp(prefix="gpukit-share-"))
    sock = work / "gpukitd.sock"
    config: dict = {"jit": {"cacheDir": "none"}, **json.loads(args.daemon_config)}
    if partitions:
        extra = json.loads(args.partition_config)
        config["partitions"] = [{**p, **extra} for p in partitions]
    (work / "config.json").write_text(json.dumps(config))
    with open(work / "gpukitd.log", "w") as log:
        daemon = subprocess.Popen(
            [str(paths["gpukitd"]), "--listen", f"unix://{sock}", "--backend", args.backend,
             "--config", str(work / "config.json")], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_for_gpukitd(daemon, sock, timeout_s=120):
            raise RuntimeError((work / "gpukitd.log").read_text(errors="replace")[-2000:])
        address = f"unix://{sock}"
        queue: mp.Queue = mp.Queue()
        sessions = [mp.Process(target=_session,
                               args=(address, p, args.size, args.dtype, args.seconds, queue))
                    for p in placement]
        for s in sessions:
            s.start()
        results = [queue.get(timeout=args.seconds + 300) for _ in sessions]
        for s in sessions:
            s.join()
        shown = subprocess.run([str(paths["gpukitctl"]), "--addr", address, "-o", "json",
                                "partitions"], capture_output=True, text=True, check=True).stdout
    finally:
        daemon.terminate()
        daemon.wait()
    ops: Dict[str, int] = {}
    for partition, n, _ in results:
        ops[partition] = ops.get(partition, 0) + n
    elapsed = max(e for _, _, e in results)
    total = sum(ops.values())
    charged = {p["partition"]["name"]: int(p.get("deviceTimeNs", 0)) / 1e9
               for p in json.loads(shown).get("partitions", [])}
    flops = 2.0 * args.size ** 3
    return {"ops_per_s": total / elapsed, "tflops": total * flops / elapsed / 1e12,
            "ops": ops, "share_of_ops": {p: n / total for p, n in ops.items()},
            "charged_device_s": {p: charged.get(p, 0.0) for p in ops}, "wall_s": elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--sessions", type=int, default=4, help="even: half per partition")
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--memory", default="16GiB", help="each partition's memory quota")
    parser.add_argument("--daemon-config", default="{}",
                        help="JSON object of more config keys, e.g. '{\"scheduler\": {...}}'")
    parser.add_argument("--partition-config", default="{}",
                        help="JSON object merged into both partitions of the two-partition "
                        "layouts, e.g. '{\"reserveSms\": true}' (each its share of the SMs)")
    args = parser.parse_args()
    half = args.sessions // 2
    layouts = {
        "one partition": (None, ["default"] * args.sessions),
        "0.5 / 0.5": ([{"name": "a", "memory": args.memory, "compute": 0.5},
                       {"name": "b", "memory": args.memory, "compute": 0.5}],
                      ["a"] * half + ["b"] * half),
        "0.8 / 0.2": ([{"name": "a", "memory": args.memory, "compute": 0.8},
                       {"name": "b", "memory": args.memory, "compute": 0.2}],
                      ["a"] * half + ["b"] * half),
    }
    print(f"partition_share_bench: {args.size}^3 {args.dtype} matmuls, {args.sessions} sessions, "
          f"{args.seconds:g} s per layout, backend {args.backend}", flush=True)
    out = {"size": args.size, "dtype": args.dtype, "sessions": args.sessions,
           "daemon_config": json.loads(args.daemon_config),
           "partition_config": json.loads(args.partition_config),
           "seconds": args.seconds, "backend": args.backend, "layouts": {}}
    for name, (partitions, placement) in layouts.items():
        r = _run(args, partitions, placement)
        out["layouts"][name] = r
        shares = ", ".join(f"{p} {s:.3f}" for p, s in sorted(r["share_of_ops"].items()))
        charged = ", ".join(f"{p} {s:.2f} s" for p, s in sorted(r["charged_device_s"].items()))
        print(f"{name:14s} {r['ops_per_s']:9.0f} ops/s {r['tflops']:7.1f} TFLOP/s  "
              f"share of ops: {shares}  charged: {charged} in {r['wall_s']:.1f} s", flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
