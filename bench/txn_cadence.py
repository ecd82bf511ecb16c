"""What one Kafka transaction of a partition costs, back to back: the trade-off behind ``streams/loop.py``.

A plant worker commits every batch of a partition in one transaction: the outputs, the
state record and (when due) the consumer group's offset. This script times ``N`` such
transactions back to back (one 200-byte output, one 2 kB state record, as for a TEP plant)
on the repository's broker, in four variants:

* **producers 1 / 2**: one transactional producer per partition, or two used in turn. A
  producer that begins its next transaction right after a commit finds the coordinator
  still writing the last one's markers and gets ``CONCURRENT_TRANSACTIONS`` (KAFKA-5477);
  aiokafka retries after 20 ms. The count of those answers is reported (read off aiokafka's
  ``AddPartitionsToTxn`` handler, wrapped here for the count only).
* **offsets every batch / never**: ``send_offsets_to_transaction`` adds two round trips
  (``AddOffsetsToTxn``, ``TxnOffsetCommit``) to a transaction.

    python bench/txn_cadence.py [--transactions 300]

Prints p50 / p90 / p99 of the transaction time (ms) per variant and the load average.
Informational (no target): ``docs/streams.md`` quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


async def _variant(bootstrap: str, n: int, producers: int, offsets: bool, counter: dict[str, int]) -> np.ndarray:
    from aiokafka import AIOKafkaProducer, TopicPartition
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    out_topic, state_topic = f"bench.txn.{uuid.uuid4().hex[:8]}", f"bench.txnstate.{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-bench")
    try:
        admin.create_topics([NewTopic(out_topic, 1, 1), NewTopic(state_topic, 1, 1)])
    finally:
        admin.close()
    clients = [
        AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=f"{out_topic}-{k}",
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            retry_backoff_ms=20,
        )
        for k in range(producers)
    ]
    for client in clients:
        await client.start()
    counter["concurrent"] = 0
    times = []
    try:
        for i in range(n):
            producer = clients[i % producers]
            began = time.perf_counter()
            async with producer.transaction():
                sent = [
                    await producer.send(out_topic, b"f" * 200),
                    await producer.send(state_topic, b"s" * 2000, key=b"k"),
                ]
                if offsets:
                    await producer.send_offsets_to_transaction({TopicPartition(out_topic, 0): i}, "fedrca-bench-txn")
                await asyncio.gather(*sent)
            times.append(time.perf_counter() - began)
    finally:
        for client in clients:
            await client.stop()
    return 1000.0 * np.asarray(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300, help="transactions per variant (default 300)")
    args = parser.parse_args([] if argv is None else argv)
    sys.path.insert(0, str(HERE))
    import logging

    from aiokafka.errors import ConcurrentTransactions
    from aiokafka.producer import sender

    from bench_kafka import release_broker, start_broker

    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    counter = {"concurrent": 0}
    handle = sender.AddPartitionsToTxnHandler.handle_response

    def counting(self: object, resp: object) -> object:
        for _, partitions in resp.errors:  # type: ignore[attr-defined]
            counter["concurrent"] += sum(1 for _, code in partitions if code == ConcurrentTransactions.errno)
        return handle(self, resp)  # type: ignore[arg-type]

    sender.AddPartitionsToTxnHandler.handle_response = counting  # type: ignore[method-assign]
    bootstrap, _, _ = start_broker()
    try:
        print(f"{args.transactions} back-to-back transactions per variant, broker {bootstrap}")
        print(f"{'variant':<36}{'p50 ms':>8}{'p90 ms':>8}{'p99 ms':>8}{'CONCURRENT_TRANSACTIONS':>25}")
        for producers in (1, 2):
            for offsets in (True, False):
                ms = asyncio.run(_variant(bootstrap, args.transactions, producers, offsets, counter))
                label = f"producers {producers}, offsets {'every batch' if offsets else 'never'}"
                q = np.percentile(ms, [50, 90, 99])
                print(f"{label:<36}{q[0]:>8.1f}{q[1]:>8.1f}{q[2]:>8.1f}{counter['concurrent']:>25}")
    finally:
        release_broker()
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
