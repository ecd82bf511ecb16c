"""fedrca.edge.mqtt_client's read path, packet by packet, next to paho-mqtt's own client on the same bytes.

Each client reads from one end of a socket pair; the test writes MQTT packets to the other end
and calls ``loop_read`` while the socket is readable, as aiomqtt's reader callback does (the
event loop calls it on readiness only). What the edge's client delivers, writes back (PUBACK,
PUBREC, PUBCOMP) and returns must be what paho's client does with the same bytes. The broker's
side (mosquitto) is ``tests/edge/test_mqtt.py``.
"""

from __future__ import annotations

import asyncio
import random
import select
import socket
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from fedrca.edge.mqtt import PendingQueue
from fedrca.edge.mqtt_client import EdgeMqttClient, _PahoClient

# the benchmark's packet encoder (bench/mqtt_helpers.py): one MQTT encoder for the tests and the load generator
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from mqtt_helpers import packet

SUCCESS, PROTOCOL = paho.MQTTErrorCode.MQTT_ERR_SUCCESS, paho.MQTTErrorCode.MQTT_ERR_PROTOCOL


def publish(topic: bytes, payload: bytes, qos: int = 0, mid: int = 1, flags: int = 0) -> bytes:
    """A PUBLISH packet (MQTT 3.1.1, 3.3); ``flags``: DUP (8) and RETAIN (1) bits."""
    body = struct.pack(">H", len(topic)) + topic + (struct.pack(">H", mid) if qos else b"") + payload
    return packet(0x30 | qos << 1 | flags, body)


def pubrel(mid: int) -> bytes:
    return b"\x62\x02" + struct.pack(">H", mid)


PINGRESP = b"\xd0\x00"


@dataclass
class Wired:
    """A client on one end of a socket pair: what it delivered (topic bytes, payload, path) and wrote back."""

    client: paho.Client
    peer: socket.socket
    got: list[tuple[bytes, bytes, str]] = field(default_factory=list)
    codes: list[paho.MQTTErrorCode] = field(default_factory=list)
    written_back: bytes = b""  # what it wrote to the peer, read by :func:`both`

    def send(self, data: bytes) -> None:
        self.peer.sendall(data)
        self.read()

    def read(self) -> None:
        """``loop_read`` while the socket is readable (the event loop's readiness), as aiomqtt calls it."""
        sock = self.client._sock
        while sock is not None and self.client._sock is sock and select.select([sock], [], [], 0)[0]:
            self.codes.append(self.client.loop_read())

    def written(self) -> bytes:
        self.peer.setblocking(False)
        try:
            return self.peer.recv(1 << 20)
        except (BlockingIOError, ConnectionResetError):  # nothing written; or closed with bytes unread
            return b""
        finally:
            self.peer.setblocking(True)

    def delivered(self) -> list[tuple[bytes, bytes]]:
        return [(t, p) for t, p, _ in self.got]


@contextmanager
def wired(cls: type[paho.Client], **options: Any) -> Iterator[Wired]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    client = cls(paho.CallbackAPIVersion.VERSION2, **options)
    client._sock = ours
    w = Wired(client, theirs)
    client.on_message = lambda c, u, m: w.got.append((m._topic, bytes(m.payload), "paho"))
    if isinstance(client, _PahoClient):
        client.deliver = lambda topic, payload: w.got.append((topic, payload, "direct"))
    try:
        yield w
    finally:
        ours.close()
        theirs.close()


def both(chunks: list[bytes], **options: Any) -> tuple[Wired, Wired]:
    """The edge's client and paho's, each sent ``chunks`` one by one."""
    with wired(_PahoClient, **options) as ours, wired(paho.Client, **options) as reference:
        for chunk in chunks:
            ours.send(chunk)
            reference.send(chunk)
        ours.written_back, reference.written_back = ours.written(), reference.written()
        return ours, reference


def test_publishes_in_one_read_arrive_whole_and_in_order() -> None:
    burst = b"".join(publish(b"plant/t%d" % i, b"%d.5" % i) for i in range(200))
    ours, reference = both([burst])
    assert ours.delivered() == reference.delivered() == [(b"plant/t%d" % i, b"%d.5" % i) for i in range(200)]
    # whole packets of QoS 0 or 1 in the buffer skip paho's per-message path (the point of the class)
    assert sum(path == "direct" for *_, path in ours.got) >= 190


def test_one_read_delivers_every_buffered_packet() -> None:
    # publishes behind packets that paho reads itself (QoS 2, a PINGRESP), all in one write: after the
    # socket stops being readable nothing may wait in the buffer (the event loop would not call again)
    burst = (publish(b"a", b"1") + publish(b"q2", b"2", qos=2, mid=7) + publish(b"a", b"3") + PINGRESP
             + publish(b"a", b"4", qos=1, mid=8) + pubrel(7) + publish(b"a", b"5"))  # fmt: skip
    ours, reference = both([burst])
    assert ours.delivered() == reference.delivered()
    assert [p for _, p in ours.delivered()] == [b"1", b"3", b"4", b"2", b"5"]  # QoS 2: on its PUBREL
    assert ours.written_back == reference.written_back
    assert isinstance(ours.client, _PahoClient) and ours.client.buffered() == 0


def test_one_call_reads_a_bounded_amount() -> None:
    # a flood must not hold the event loop: one call of the reader reads the socket for up to READ
    # bytes and the rest of one packet, then returns (the socket, still readable, brings it back)
    packet = publish(b"flood/t", b"12.5")
    with wired(_PahoClient) as ours:
        ours.peer.sendall(packet * (4 * _PahoClient.READ // len(packet)))
        assert ours.client.loop_read() == SUCCESS
        assert 0 < len(ours.got) * len(packet) <= _PahoClient.READ + len(packet)
        ours.read()
        assert len(ours.got) == 4 * _PahoClient.READ // len(packet)


def test_a_packet_split_across_reads() -> None:
    packets = [publish(b"t/%d" % i, b"x" * n) for i, n in enumerate([3, 300, 20_000, 5, 70_000, 1])]
    stream = b"".join(packets)
    for cuts in ([1], [2, 3], [len(packets[0]) + 1], [9000, 9001, 30_000], list(range(0, len(stream), 4096))):
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True) if b > a]
        ours, reference = both(chunks)
        assert ours.delivered() == reference.delivered() == [(b"t/%d" % i, b"x" * n) for i, n in
                                                             enumerate([3, 300, 20_000, 5, 70_000, 1])]  # fmt: skip


def test_qos_1_is_acknowledged_after_delivery() -> None:
    ours, reference = both([publish(b"t", b"1", qos=1, mid=0x1234) + publish(b"t", b"2", qos=1, mid=0x0102)])
    assert ours.written_back == reference.written_back == b"\x40\x02\x12\x34\x40\x02\x01\x02"
    ours, reference = both([publish(b"t", b"1", qos=1, mid=9)], manual_ack=True)
    assert ours.delivered() == reference.delivered() == [(b"t", b"1")]
    assert ours.written_back == reference.written_back == b""


def test_qos_2_and_filtered_callbacks_take_pahos_path() -> None:
    with wired(_PahoClient) as ours:
        filtered: list[bytes] = []
        ours.client.message_callback_add("f/#", lambda c, u, m: filtered.append(bytes(m.payload)))
        ours.send(publish(b"f/x", b"1") + publish(b"g", b"2") + publish(b"f/y", b"3", qos=1, mid=4))
        assert filtered == [b"1", b"3"]
        assert ours.got == [(b"g", b"2", "paho")]  # paho's on_message for what no filter takes
    ours, _ = both([publish(b"q", b"1", qos=2, mid=3) + pubrel(3)])
    assert ours.got == [(b"q", b"1", "paho")]


@pytest.mark.parametrize(
    "bad",
    [
        b"\x30\x03\x00\x00x",  # an empty topic (MQTT 3.1.1 forbids it)
        b"\x30\x04\x00\x09ab",  # the topic's length beyond the packet
        b"\x30\x01\x00",  # no room for the topic's length
        b"\x32\x03\x00\x01a",  # QoS 1 without its packet id
        b"\x36\x04\x00\x01ab",  # QoS 3
        b"\x30\xff\xff\xff\xff\x01",  # a remaining length of 5 bytes
        b"\x20\x05\x00\x00\x00\x00\x00",  # a CONNACK of the wrong length
    ],
)
@pytest.mark.parametrize("last", [False, True])
def test_malformed_publish_ends_the_connection_as_paho_does(bad: bytes, last: bool) -> None:
    after = b"" if last else publish(b"ok", b"2")  # the bad packet ends the buffer, or a good one follows
    ours, reference = both([publish(b"ok", b"1") + bad + after])
    assert ours.delivered() == reference.delivered() == [(b"ok", b"1")]  # nothing after the bad packet
    assert ours.codes[-1] == reference.codes[-1] != SUCCESS
    assert ours.client._sock is None and reference.client._sock is None  # paho closed the connection


def test_topics_that_are_not_utf8_are_delivered_as_bytes_as_paho_does() -> None:
    ours, reference = both([publish(b"\xff\xfe", b"1") + publish(b"caf\xc3\xa9", b"2")])
    assert ours.delivered() == reference.delivered() == [(b"\xff\xfe", b"1"), (b"caf\xc3\xa9", b"2")]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_streams_cut_anywhere_read_as_paho_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    packets: list[bytes] = []
    open_qos2: list[int] = []
    for mid in range(1, 300):
        kind = rng.random()
        if kind < 0.05:
            packets.append(PINGRESP)
        elif kind < 0.1 and open_qos2:
            packets.append(pubrel(open_qos2.pop(0)))
        else:
            qos = rng.choice([0, 0, 0, 1, 1, 2])
            if qos == 2:
                open_qos2.append(mid)
            size = rng.choice([0, 1, 8, 120, 130, 2000, 17_000])
            topic = rng.choice(["plant/p1/t", "ünïcode/τ", "a" * 300]).encode()
            packets.append(publish(topic, rng.randbytes(size), qos, mid, flags=rng.choice([0, 1, 8, 9])))
    stream = b"".join(packets)
    cuts = sorted(rng.sample(range(1, len(stream)), 40))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    ours, reference = both(chunks)
    assert len(ours.delivered()) > 200 and ours.delivered() == reference.delivered()
    assert ours.written_back == reference.written_back
    assert set(ours.codes) == set(reference.codes) == {SUCCESS}


def test_the_edge_client_queues_topic_and_payload_and_refuses_topics_that_are_not_utf8() -> None:
    refused: list[tuple[int | None, str, str]] = []

    async def main() -> list[tuple[str, bytes]]:
        queue = PendingQueue.factory(reject=lambda *r: refused.append(r))
        client = EdgeMqttClient("127.0.0.1", 1, queue_type=queue)  # never connected
        paho_client = client._client
        assert isinstance(paho_client, _PahoClient) and paho_client.deliver is not None
        paho_client.deliver(b"plant/\xff", b"1")
        paho_client.deliver("plant/τ".encode(), b"2")
        return client._queue.drain(10)  # type: ignore[attr-defined]

    assert asyncio.run(main()) == [("plant/τ", b"2")]
    assert [(tag, reason) for tag, reason, _ in refused] == [(None, "malformed")]
