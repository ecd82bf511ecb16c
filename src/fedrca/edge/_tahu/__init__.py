"""The Sparkplug B payload of Eclipse Tahu, loaded from its compiled descriptor (vendored, EPL-2.0).

``sparkplug_b.proto`` is Eclipse Tahu's ``sparkplug_b/sparkplug_b.proto`` verbatim (the
Sparkplug B reference implementation, Eclipse Public License 2.0: ``LICENCE`` beside it).
``sparkplug_b.pb`` is that file compiled by protobuf's compiler into a
``FileDescriptorSet``::

    python -m grpc_tools.protoc -I src/fedrca/edge/_tahu \\
        --descriptor_set_out=src/fedrca/edge/_tahu/sparkplug_b.pb sparkplug_b.proto

(``tests/edge/test_sparkplug.py::test_vendored_descriptor_is_the_compiled_proto`` compiles
it again and compares). The message classes are built from the descriptor at import with
protobuf's ``message_factory``: the same classes generated code would give, without tying
the package to one protobuf release's generated-code version check.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["PACKAGE", "Payload", "descriptor_set"]

#: protobuf package of the Tahu messages
PACKAGE = "org.eclipse.tahu.protobuf"


def descriptor_set() -> bytes:
    """The vendored ``FileDescriptorSet`` (``sparkplug_b.pb``), as bytes."""
    return resources.files(__package__).joinpath("sparkplug_b.pb").read_bytes()


def _payload_class() -> Any:
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set())
    pool = descriptor_pool.DescriptorPool()  # a pool of its own: no clash with another copy of the proto
    for proto in files.file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.Payload"))


#: ``org.eclipse.tahu.protobuf.Payload`` (its nested ``Payload.Metric``, ``Payload.PropertySet``, ...)
Payload: Any = _payload_class()
