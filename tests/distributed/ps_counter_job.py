"""TensorFlow's ParameterServerStrategy on an in-process cluster (3 workers, 1 parameter
server, the coordinator here), with a SharedStepCounter on a variable of the parameter
server; run as ``python ps_counter_job.py DIRECTORY``, it prints what it saw as JSON.

A process of its own: the strategy connects TensorFlow's eager context to the cluster for
the rest of the process, which no other test of a pytest worker must inherit.
"""

from __future__ import annotations

import json
import os
import socket
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from globalstep.checkpoint import CheckpointManager
from globalstep.distributed import SharedStepCounter


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(directory: str) -> None:
    spec = {
        "worker": [f"127.0.0.1:{_port()}" for _ in range(3)],
        "ps": [f"127.0.0.1:{_port()}"],
    }
    cluster = tf.train.ClusterSpec(spec)
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = 4  # 2 cores: the servers' threads must not starve
    servers = [
        tf.distribute.Server(cluster, job_name=job, task_index=i, config=config, start=True)
        for job in ("worker", "ps")
        for i in range(len(spec[job]))
    ]
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        steps = tf.Variable(0, dtype=tf.int64, trainable=False)
    counter = SharedStepCounter(steps, "steps")

    @tf.function
    def update():
        return counter.next()

    taken = [coordinator.schedule(update) for _ in range(200)]
    coordinator.join()
    fetched = [value.fetch() for value in taken]
    seen = {
        "device": steps.device,
        "indices": [int(index) for index in fetched],
        "value": counter.value,
        "coordinator_took": counter.next(),
    }
    with CheckpointManager(directory) as manager:
        manager.save(201, {"counter": counter})
        steps.assign(0)
        seen["restored"] = manager.restore({"counter": counter})["counter"].value
    more = [coordinator.schedule(update) for _ in range(4)]
    coordinator.join()
    seen["after_restore"] = sorted(int(value.fetch()) for value in more)
    print(json.dumps(seen), flush=True)
    del servers


if __name__ == "__main__":
    main(sys.argv[1])
