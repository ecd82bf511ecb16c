"""The MQTT client under :mod:`fedrca.edge.mqtt`: aiomqtt, with paho-mqtt's read path made cheap.

aiomqtt runs paho-mqtt's client on the asyncio loop: each time the socket is readable it calls
paho's ``loop_read``, which reads one packet with three ``recv`` calls (the fixed header's byte,
the remaining length, the body), decodes it into an ``MQTTMessage``, walks the matcher of
per-topic callbacks and calls aiomqtt's ``on_message``, which builds an aiomqtt ``Message`` for
its queue: a pass of the event loop and a dozen Python calls per tag update, most of the
edge's CPU at full rate (``python bench/run.py edge``, the mosquitto figures). :class:`EdgeMqttClient`
keeps aiomqtt's connection handling (connect, subscribe, publish, keep-alive, errors) whole and
replaces the read path on three methods of paho-mqtt 2's client (:class:`_PahoClient`):

* ``_packet_read`` (paho's reader of one packet): while paho is between packets, it reads up to
  :attr:`_PahoClient.READ` bytes from the socket at once, then hands every complete PUBLISH of
  QoS 0 or 1 at the head of that buffer straight to :meth:`EdgeMqttClient._deliver` (its topic and
  payload: all the edge reads), a QoS 1 one then acknowledged as paho does (PUBACK after
  delivery, none with manual acknowledgement). Anything else (another packet type, QoS 2, MQTT 5
  properties, a packet not yet whole, a malformed one, or a per-topic callback registered with
  ``message_callback_add``) stops that and goes to paho's own reader, so paho's checks, errors and
  answers stay paho's. ``tests/edge/test_mqtt_client.py`` feeds both clients the same bytes:
  ``test_random_streams_cut_anywhere_read_as_paho_reads_them``,
  ``test_malformed_publish_ends_the_connection_as_paho_does``,
  ``test_qos_1_is_acknowledged_after_delivery``, ``test_qos_2_and_filtered_callbacks_take_pahos_path``.
* ``_sock_recv`` (paho's one socket read) serves paho's reader from that buffer first. Bytes
  buffered from one socket are never served for another (a reconnect starts clean).
* ``loop_read`` goes on until the buffer is empty: buffered bytes do not make the socket readable
  again, so without this the packets behind one that paho read would wait for the next message to
  arrive (``test_one_read_delivers_every_buffered_packet``; on mosquitto,
  ``tests/edge/test_mqtt.py::test_a_burst_is_delivered_whole_with_nothing_after_it``). One call
  reads the socket for at most ``READ`` bytes and the rest of one packet per packet paho's
  ``loop_read`` asks for (one, unless messages of ours await their acknowledgement), so a flood
  cannot hold the event loop (``test_one_call_reads_a_bounded_amount``).

aiomqtt's ``_on_message`` (paho's path) queues the same ``(topic, payload)`` pair as ``_deliver``.
The incoming queue (aiomqtt's ``queue_type``) receives those pairs and may carry a
``reject(tag, reason, detail)`` attribute: a message whose topic is not UTF-8 is refused through
it. aiomqtt and paho-mqtt are pinned below 3 in pyproject.toml; if one of the methods above moves
in a release, the tests named above fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiomqtt
import paho.mqtt.client as paho

__all__ = ["EdgeMqttClient"]

_SUCCESS = paho.MQTTErrorCode.MQTT_ERR_SUCCESS
_PUBLISH = 0x30


class _PahoClient(paho.Client):
    """paho-mqtt's client with a buffered read and a direct hand-over of PUBLISH (module docstring)."""

    #: most bytes read from the socket at once: a burst costs one system call per this many bytes,
    #: and one call of :meth:`loop_read` reads about this much at most (module docstring)
    READ = 8 * 1024

    _buffer: bytes = b""
    _at = 0  # how much of ``_buffer`` has been consumed
    _buffered_from: Any = None  # the socket ``_buffer`` came from
    _filtered = False  # a per-topic callback was registered (message_callback_add): paho's path only
    #: where a PUBLISH read by :meth:`_packet_read` goes: ``deliver(topic, payload)`` (None: paho's path)
    deliver: Callable[[bytes, bytes], None] | None = None

    def buffered(self) -> int:
        """Bytes read from the socket and not consumed yet."""
        return len(self._buffer) - self._at if self._buffered_from is self._sock else 0

    def _fast(self) -> bool:
        """Whether :meth:`_packet_read` may deliver PUBLISH packets itself (module docstring)."""
        return (
            self.deliver is not None
            and self._in_packet["command"] == 0  # paho is between packets
            and not self._filtered
            and self._protocol != paho.MQTTv5
        )

    def _sock_recv(self, bufsize: int) -> bytes:
        if self.buffered() > 0:
            at = self._at
            self._at = min(at + bufsize, len(self._buffer))
            return self._buffer[at : at + bufsize]
        return super()._sock_recv(bufsize)  # paho's read: at most the rest of the packet it reads

    def _packet_read(self) -> paho.MQTTErrorCode:
        if not self._fast():
            return super()._packet_read()
        if self.buffered() == 0:
            try:
                # paho's read (SSL's "want read" becomes BlockingIOError), of up to READ bytes
                self._buffer, self._at = super()._sock_recv(self.READ), 0
                self._buffered_from = self._sock
            except OSError:  # nothing there, or the connection's end: paho's reader meets it again
                return super()._packet_read()  # and answers as paho does
            if self.buffered() == 0:  # the end of the stream (b""): paho's reader reports it
                return super()._packet_read()
        rc = self._deliver_publishes(self.deliver)  # type: ignore[arg-type]
        if rc != _SUCCESS or self.buffered() == 0:
            return rc
        return super()._packet_read()  # the head is not a whole QoS 0/1 PUBLISH: paho reads it

    def loop_read(self, max_packets: int = 1) -> paho.MQTTErrorCode:
        rc = super().loop_read(max_packets)
        # every round consumes buffered bytes (paho reads at least one when there are any) and
        # reads the socket for at most the rest of one packet: this ends, and soon
        while rc == _SUCCESS and self._sock is not None and self.buffered() > 0:
            rc = super().loop_read(max_packets)
        return rc

    def message_callback_add(self, sub: str, callback: Any) -> None:
        self._filtered = True  # from then on every PUBLISH goes through paho's matcher
        super().message_callback_add(sub, callback)

    def _deliver_publishes(self, deliver: Callable[[bytes, bytes], None]) -> paho.MQTTErrorCode:
        """Deliver the complete, well-formed QoS 0/1 PUBLISH packets at the head of the buffer.

        MQTT 3.1.1, 2 and 3.3: a fixed header byte (type 3 in the high nibble, QoS in bits 1-2),
        the remaining length (1 to 4 bytes of 7 bits, low first), then the topic (a 16-bit length
        and its bytes), a 16-bit packet id when QoS > 0, and the payload to the end.
        """
        buffer, at = self._buffer, self._at
        end = len(buffer)
        delivered = 0
        while at < end:
            header = buffer[at]
            qos = (header >> 1) & 0x03
            if header & 0xF0 != _PUBLISH or qos > 1:
                break
            # remaining length; more than 4 bytes is paho's protocol error
            length = shift = 0
            i = at + 1
            while i < end and i - at <= 4:
                byte = buffer[i]
                length |= (byte & 0x7F) << shift
                shift += 7
                i += 1
                if not byte & 0x80:
                    break
            else:
                break  # not whole yet, or too long: paho's reader
            stop = i + length
            if stop > end or length < 2:
                break
            topic_end = i + 2 + ((buffer[i] << 8) | buffer[i + 1])
            body = topic_end + 2 * qos  # the packet id of QoS 1
            if topic_end == i + 2 or body > stop:
                break  # an empty topic or lengths beyond the packet: paho's MalformedPacket
            self._at = at = stop  # consumed before delivery: a delivery that raises loses no place
            deliver(buffer[i + 2 : topic_end], buffer[body:stop])
            delivered += 1
            if qos and not self._manual_ack:
                rc = self._send_puback((buffer[topic_end] << 8) | buffer[topic_end + 1])
                if rc != _SUCCESS:
                    return rc
        if delivered:
            with self._msgtime_mutex:  # the keep-alive's "heard from the broker" (as paho's reader)
                self._last_bytes_received = paho.time_func()
        return _SUCCESS


class EdgeMqttClient(aiomqtt.Client):
    """aiomqtt's client, queueing each incoming message as a ``(topic, payload)`` pair, over a
    paho-mqtt client whose read path is cheap (module docstring). Takes aiomqtt's arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # aiomqtt builds a plain paho client; give it the read path above (a subclass that adds
        # methods and class attributes only, so the instance's state stays valid as it is)
        if type(self._client) is not paho.Client:
            raise TypeError(
                f"aiomqtt built a {type(self._client)!r}, not paho's client: see fedrca/edge/mqtt_client.py"
            )
        self._client.__class__ = _PahoClient
        self._client.deliver = self._deliver  # type: ignore[attr-defined]

    def _deliver(self, topic: bytes, payload: bytes) -> None:
        try:
            name = topic.decode()
        except UnicodeDecodeError:  # MQTT requires UTF-8 topics; a broker that let one through
            self._refuse("a message whose topic is not UTF-8: dropped")
            return
        self._queue.put_nowait((name, payload))  # type: ignore[arg-type]

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        try:
            topic = message.topic
        except UnicodeDecodeError:
            self._refuse("a message whose topic is not UTF-8: dropped")
            return
        payload = message.payload
        self._queue.put_nowait((topic, payload if isinstance(payload, bytes) else bytes(payload)))  # type: ignore[arg-type]

    def _refuse(self, detail: str) -> None:
        reject = getattr(self._queue, "reject", None)
        if reject is not None:
            reject(None, "malformed", detail)
