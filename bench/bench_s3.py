"""Checkpoints on S3: save and restore throughput against a local S3-protocol server,
beside s3fs moving the same bytes (issue 12, object storage).

A moto server (``python -m moto.server``) runs in its own process on 127.0.0.1. The state
is ``--arrays`` float32 arrays totalling ``--mib`` MiB. Each round, interleaved:

- ``globalstep save``: ``CheckpointManager(s3://...).save(step, state)`` (``max_to_keep=1``,
  so each save also deletes the previous one, as in training); it writes the safetensors
  file (staged in a local temporary file past 64 MiB, then uploaded whole), state.json
  and the marker, and checks the lock-free listing;
- ``globalstep restore``: ``manager.restore(template)`` into preallocated arrays, with
  every checksum checked;
- ``s3fs put`` / ``s3fs get``: ``fs.put_file`` / ``fs.get_file`` of a local file holding
  the checkpoint's own ``arrays.safetensors`` (same bytes, page cache);
- ``s3fs pipe`` / ``s3fs cat``: ``fs.pipe_file`` / ``fs.cat_file`` of those bytes from and
  into memory.

Throughput is the state's bytes over wall time; the table gives the median of the rounds,
the spread (min to max) and each globalstep figure's ratio to s3fs put/get's median.

Run:
    PYTHONPATH=src python bench/bench_s3.py [--mib 256] [--arrays 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return server, endpoint
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError("the moto server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--arrays", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import s3fs

    from globalstep.checkpoint import CheckpointManager

    server, endpoint = start_server()
    try:
        options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench"}
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("bench")
        n = args.mib * (1 << 20) // 4 // args.arrays
        rng = np.random.default_rng(0)
        state = {f"layer{i}": rng.random(n, dtype=np.float32) for i in range(args.arrays)}
        nbytes = sum(a.nbytes for a in state.values())
        template = {k: np.empty_like(v) for k, v in state.items()}
        url = "s3://bench/ckpt"
        times: dict[str, list[float]] = {}
        manager = CheckpointManager(url, max_to_keep=1, storage_options=options)
        manager.save(0, state)  # warm-up; also gives the file s3fs moves
        local = os.path.join(tempfile.mkdtemp(prefix="bench-s3-"), "arrays.safetensors")
        fs.get_file("bench/ckpt/step-000000000000/arrays.safetensors", local)
        with open(local, "rb") as f:
            blob = f.read()
        print(f"state {nbytes / 2**20:.0f} MiB in {args.arrays} arrays; file {len(blob)} B")

        def timed(name: str, action: object) -> None:
            began = time.perf_counter()
            action()  # type: ignore[operator]
            times.setdefault(name, []).append(time.perf_counter() - began)

        for step in range(1, args.rounds + 1):
            timed("globalstep save", lambda s=step: manager.save(s, state))
            timed("globalstep restore", lambda: manager.restore(template))
            assert np.array_equal(template["layer0"], state["layer0"])
            timed("s3fs put", lambda: fs.put_file(local, "bench/raw/put.bin"))
            timed("s3fs get", lambda: fs.get_file("bench/raw/put.bin", local + ".got"))
            timed("s3fs pipe", lambda: fs.pipe_file("bench/raw/pipe.bin", blob))
            timed("s3fs cat", lambda: fs.cat_file("bench/raw/pipe.bin"))
        manager.close()
        peers = {"globalstep save": "s3fs put", "globalstep restore": "s3fs get"}
        medians = {k: statistics.median(v) for k, v in times.items()}
        print(f"rounds {args.rounds}; load {os.getloadavg()}")
        print("| operation | MiB/s (median) | spread (MiB/s) | vs s3fs |")
        print("|---|---|---|---|")
        for name, values in times.items():
            rate = nbytes / 2**20 / medians[name]
            low, high = nbytes / 2**20 / max(values), nbytes / 2**20 / min(values)
            ratio = f"{medians[peers[name]] / medians[name]:.2f}x" if name in peers else ""
            print(f"| {name} | {rate:.0f} | {low:.0f}-{high:.0f} | {ratio} |")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
