"""Message types for TF Serving config files whose protos tensorflow-serving-api does not ship.

TF Serving reads `--batching_parameters_file` and `--monitoring_config_file` as text protos of
messages (BatchingParameters, MonitoringConfig) that are missing from the pip wheel. Declaring
them at run time with the same package, field names and numbers lets protobuf's own text parser
read the files: what TF Serving accepts parses here, and a typo fails the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory, wrappers_pb2

__all__ = ["message_class"]

_FIELD = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "bool": _FIELD.TYPE_BOOL,
    "string": _FIELD.TYPE_STRING,
    "int32": _FIELD.TYPE_INT32,
    "int64": _FIELD.TYPE_INT64,
    "double": _FIELD.TYPE_DOUBLE,
}

# message name -> field name -> (number, type); a type is a scalar above, "repeated <scalar>",
# a message of the same package, or a google.protobuf wrapper such as "google.protobuf.Int64Value".
Messages = Mapping[str, Mapping[str, tuple[int, str]]]


def message_class(package: str, messages: Messages, name: str) -> type[message.Message]:
    """The class of message `name` among `messages`, declared in `package` (proto3)."""
    frozen = tuple((m, tuple(fields.items())) for m, fields in messages.items())
    return _build(package, frozen, name)


@functools.cache
def _build(
    package: str,
    messages: tuple[tuple[str, tuple[tuple[str, tuple[int, str]], ...]], ...],
    name: str,
) -> type[message.Message]:
    proto_file = descriptor_pb2.FileDescriptorProto(
        name=f"graphserve/{package.replace('.', '/')}/{name.lower()}.proto",
        package=package,
        syntax="proto3",
        dependency=[wrappers_pb2.DESCRIPTOR.name],
    )
    for message_name, fields in messages:
        proto = proto_file.message_type.add(name=message_name)
        for field_name, (number, kind) in fields:
            repeated = kind.startswith("repeated ")
            kind = kind.removeprefix("repeated ")
            label = _FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
            if kind in _SCALARS:
                proto.field.add(name=field_name, number=number, label=label, type=_SCALARS[kind])
            else:
                full = kind if kind.startswith("google.") else f"{package}.{kind}"
                proto.field.add(
                    name=field_name,
                    number=number,
                    label=label,
                    type=_FIELD.TYPE_MESSAGE,
                    type_name=f".{full}",
                )
    # A private pool: no clash if the real proto is ever registered in the default one.
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto_file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
