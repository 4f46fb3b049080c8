"""Compiled protobuf encoders and decoders for the generated message classes.

betterproto2 encodes and decodes every message by walking its field metadata
at run time, reading the input one byte at a time through ``BytesIO`` and
building a frozen ``ParsedField`` per field: a reserve reply with one job took
about 100 microseconds to decode and 85 to encode, more than the whole RPC
around it. This module reads the same metadata once per class and writes a
straight-line encoder and decoder for it (Python source, compiled with
``exec``), so each field costs a few bytecode instructions.

What stays exactly as betterproto2 does it (tests/test_proto_codec.py checks
every message class against betterproto2's own code with hypothesis):

* the bytes produced: field order, default values skipped, optional fields
  present when not ``None``, map entries with both key and value, unknown
  fields appended at the end, well-known types (Timestamp, Duration) converted
  from and to ``datetime``/``timedelta`` with the same arithmetic;
* the decoded messages: last value wins (embedded messages are replaced, not
  merged), unknown fields kept in ``_unknown_fields``, integers masked and
  sign-extended to their declared width, unknown enum values kept.

Where betterproto2 is lax the decoders here are strict, as protobuf and
prost are: a field whose wire type does not match its declaration, a
truncated field, a group, a field number 0 or a varint longer than ten bytes
raise :class:`DecodeError` (a ``ValueError``) instead of producing a message
whose fields have the wrong types. A map entry without its message value
decodes to the empty message (what the entry means; betterproto2 gives
``None``). So a decoded message from a compiled class never needs
:func:`sepp_anyio._decoded.check_decoded`. A Timestamp or Duration outside
the range of ``datetime``/``timedelta`` raises :class:`OutOfRangeError`, an
``OverflowError`` as with betterproto2; a string that is not UTF-8 raises
:class:`DecodeError` (betterproto2: ``UnicodeDecodeError``). Every error names
the field (the transport and the server turn any decoding error into
INTERNAL).

A whole message is decoded strictly: one bad field anywhere makes all of it
undecodable. A reply that carries a list of independent items (the jobs of a
reserve, the records of a drain, the results of a batch) is better read item
by item, so that one bad item costs only itself: :class:`ElementWise` is such
a reply type, and :func:`salvage_fields` reads what it can of an item that
did not decode (a job's id and attempt, to dead-letter it).

Only the classes passed to :func:`install` are changed (class attributes
``__bytes__``, ``SerializeToString``, ``parse``, ``FromString``); the
generated files are not edited and betterproto2 itself is untouched.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable, Iterable
from typing import Any

import betterproto2

__all__ = [
    "DecodeError",
    "ElementWise",
    "OutOfRangeError",
    "UndecodedElement",
    "compile_classes",
    "decodes_strictly",
    "install",
    "installed_classes",
    "is_compiled",
    "salvage_fields",
    "uninstall",
]


class DecodeError(ValueError):
    """The bytes are not a valid encoding of the message type; the message names the
    field (``Job.id has the wrong wire type``, ``Job.queue: invalid UTF-8``)."""


class OutOfRangeError(DecodeError, OverflowError):
    """A well-formed Timestamp or Duration outside the range of ``datetime`` /
    ``timedelta`` (``Job.scheduled_at: timestamp out of range``). Also an
    ``OverflowError``, which is what betterproto2 raises for it."""


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_MICROSECOND = datetime.timedelta(microseconds=1)
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    """Encode ``value`` as betterproto2 does: negatives as their 64-bit two's complement."""
    if value < 0:
        if value < -(1 << 63):
            raise ValueError(
                "Negative value is not representable as a 64-bit integer - "
                "unable to encode a varint within 10 bytes."
            )
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a varint of at most ten bytes at ``pos``; return it and the next position."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes")


def _skip(data: bytes, pos: int, end: int, tag: int) -> int:
    """Return the position after the value of an unknown field with ``tag``."""
    wire_type = tag & 7
    if tag >> 3 == 0:
        raise DecodeError("field number 0")
    if wire_type == 0:
        return _read_varint(data, pos, end)[1]
    if wire_type == 2:
        length, pos = _read_varint(data, pos, end)
        stop = pos + length
    elif wire_type == 1:
        stop = pos + 8
    elif wire_type == 5:
        stop = pos + 4
    else:
        raise DecodeError(f"unsupported wire type {wire_type} (field {tag >> 3})")
    if stop > end:
        raise DecodeError(f"truncated field {tag >> 3}")
    return stop


def _wrong_wire_type(where: str) -> DecodeError:
    return DecodeError(f"{where} has the wrong wire type")


def _truncated(where: str) -> DecodeError:
    return DecodeError(f"{where} is truncated")


def _not_utf8(where: str) -> DecodeError:
    return DecodeError(f"{where}: invalid UTF-8")


def _out_of_range(where: str, what: str) -> OutOfRangeError:
    return OutOfRangeError(f"{where}: {what} out of range")


# ------------------------------------------------------------ well-known wrapped types
# The arithmetic is the generated Timestamp/Duration's own (from_datetime, to_datetime,
# from_timedelta, to_timedelta), written out so that no intermediate message is built.


def _timestamp_fields(value: datetime.datetime) -> tuple[int, int]:
    if not value.tzinfo:
        raise ValueError("datetime must be timezone aware")
    offset = value.astimezone(datetime.UTC) - _EPOCH
    offset_us = (offset.days * 86400 + offset.seconds) * 10**6 + offset.microseconds
    seconds, micros = divmod(offset_us, 10**6)
    return seconds, micros * 1000


def _timestamp_value(seconds: int, nanos: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(seconds=seconds, microseconds=nanos // 1000)


def _duration_fields(value: datetime.timedelta) -> tuple[int, int]:
    total_us = value // _ONE_MICROSECOND
    return int(total_us / 1e6), int((total_us % 1e6) * 1e3)


def _duration_value(seconds: int, nanos: int) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds, microseconds=nanos / 1e3)


# --------------------------------------------------------------------- code generation

_VARINT_TYPES = {
    betterproto2.TYPE_BOOL,
    betterproto2.TYPE_INT32,
    betterproto2.TYPE_INT64,
    betterproto2.TYPE_UINT32,
    betterproto2.TYPE_UINT64,
    betterproto2.TYPE_SINT32,
    betterproto2.TYPE_SINT64,
    betterproto2.TYPE_ENUM,
}
_FIXED_FORMATS = {
    betterproto2.TYPE_DOUBLE: ("<d", 1, 8),
    betterproto2.TYPE_FLOAT: ("<f", 5, 4),
    betterproto2.TYPE_FIXED32: ("<I", 5, 4),
    betterproto2.TYPE_SFIXED32: ("<i", 5, 4),
    betterproto2.TYPE_FIXED64: ("<Q", 1, 8),
    betterproto2.TYPE_SFIXED64: ("<q", 1, 8),
}
_LENGTH_TYPES = {
    betterproto2.TYPE_STRING,
    betterproto2.TYPE_BYTES,
    betterproto2.TYPE_MESSAGE,
    betterproto2.TYPE_MAP,
}


def _wire_type(proto_type: str) -> int:
    if proto_type in _VARINT_TYPES:
        return 0
    if proto_type in _FIXED_FORMATS:
        return _FIXED_FORMATS[proto_type][1]
    if proto_type in _LENGTH_TYPES:
        return 2
    raise NotImplementedError(f"protobuf type {proto_type!r}")


class _Source:
    """Lines of Python source with indentation, plus the names they refer to."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.namespace = namespace
        self._counter = 0

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def ref(self, value: Any, hint: str = "c") -> str:
        """A name under which ``value`` is visible to the generated code."""
        for name, known in self.namespace.items():
            if known is value and name.startswith("_k_"):
                return name
        self._counter += 1
        name = f"_k_{hint}_{self._counter}"
        self.namespace[name] = value
        return name


def _tag_bytes(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


class _Compiler:
    """Writes the encoder and decoder functions of a set of message classes."""

    def __init__(self, classes: Iterable[type[betterproto2.Message]]) -> None:
        self.classes = list(classes)
        self.names = {cls: f"{cls.__name__}_{index}" for index, cls in enumerate(self.classes)}
        self.namespace: dict[str, Any] = {
            "_varint": _varint,
            "_read_varint": _read_varint,
            "_skip": _skip,
            "_wrong_wire_type": _wrong_wire_type,
            "_truncated": _truncated,
            "_not_utf8": _not_utf8,
            "_out_of_range": _out_of_range,
            "_timestamp_fields": _timestamp_fields,
            "_timestamp_value": _timestamp_value,
            "_duration_fields": _duration_fields,
            "_duration_value": _duration_value,
            "_new": object.__new__,
            "_MASK32": _MASK32,
            "_MASK64": _MASK64,
        }
        self.src = _Source(self.namespace)
        # Map entry decoders are written while a message decoder is half written, so
        # they are kept apart and joined at the end.
        self.entry_lines: list[str] = []
        from .._proto.google import protobuf as wkt

        self._timestamp = wkt.Timestamp
        self._duration = wkt.Duration

    # ..................................................................... encoding

    def _encode_length(self, indent: int, length: str) -> None:
        self.src.add(indent, f"if {length} < 128:")
        self.src.add(indent + 1, f"buf.append({length})")
        self.src.add(indent, "else:")
        self.src.add(indent + 1, f"buf += _varint({length})")

    def _encode_value(
        self, indent: int, number: int, proto_type: str, unwrap: Any, value: str
    ) -> None:
        """Append field ``number`` holding ``value`` to ``buf`` (no default check)."""
        add = self.src.add
        tag = self.src.ref(_tag_bytes(number, _wire_type(proto_type)), "tag")
        add(indent, f"buf += {tag}")
        if proto_type == betterproto2.TYPE_STRING:
            add(indent, f"b = {value}.encode('utf-8')")
            add(indent, "n = len(b)")
            self._encode_length(indent, "n")
            add(indent, "buf += b")
        elif proto_type == betterproto2.TYPE_BYTES:
            add(indent, f"n = len({value})")
            self._encode_length(indent, "n")
            add(indent, f"buf += {value}")
        elif proto_type in (betterproto2.TYPE_SINT32, betterproto2.TYPE_SINT64):
            add(indent, f"buf += _varint({value} << 1 if {value} >= 0 else ({value} << 1) ^ (~0))")
        elif proto_type in _VARINT_TYPES:
            add(indent, f"if 0 <= {value} < 128:")
            add(indent + 1, f"buf.append({value})")
            add(indent, "else:")
            add(indent + 1, f"buf += _varint({value})")
        elif proto_type in _FIXED_FORMATS:
            pack = self.src.ref(struct.Struct(_FIXED_FORMATS[proto_type][0]).pack, "pack")
            add(indent, f"buf += {pack}({value})")
        elif proto_type == betterproto2.TYPE_MESSAGE:
            if unwrap is None:
                add(indent, f"b = bytes({value})")
            else:
                wrapper = unwrap()
                if wrapper is self._timestamp:
                    add(indent, f"b = {self._encoded_pair('_timestamp_fields', value)}")
                elif wrapper is self._duration:
                    add(indent, f"b = {self._encoded_pair('_duration_fields', value)}")
                else:
                    ref = self.src.ref(wrapper, "wrapper")
                    add(indent, f"b = bytes({ref}.from_wrapped({value}))")
            add(indent, "n = len(b)")
            self._encode_length(indent, "n")
            add(indent, "buf += b")
        else:
            raise NotImplementedError(f"protobuf type {proto_type!r}")

    def _encoded_pair(self, fields_function: str, value: str) -> str:
        # Timestamp and Duration are (int64 seconds = 1, int32 nanos = 2), zeros skipped.
        return f"_encode_seconds_nanos(*{fields_function}({value}))"

    def _write_encoder(self, cls: type[betterproto2.Message]) -> None:
        add = self.src.add
        meta: Any = cls._betterproto  # type: ignore[arg-type]
        add(0, f"def _encode_{self.names[cls]}(self):")
        add(1, "buf = bytearray()")
        for name, field in meta.meta_by_field_name.items():
            add(1, f"v = self.{name}")
            if field.repeated:
                if field.proto_type not in (
                    betterproto2.TYPE_STRING,
                    betterproto2.TYPE_BYTES,
                    betterproto2.TYPE_MESSAGE,
                ):
                    raise NotImplementedError(f"{cls.__name__}.{name}: packed repeated field")
                add(1, "if v:")
                add(2, "for item in v:")
                self._encode_value(3, field.number, field.proto_type, field.unwrap, "item")
            elif field.proto_type == betterproto2.TYPE_MAP:
                key_meta, value_meta = field.map_meta
                tag = self.src.ref(_tag_bytes(field.number, 2), "tag")
                add(1, "if v:")
                add(2, "outer = buf")
                add(2, "for key, item in v.items():")
                add(3, "buf = bytearray()")
                self._encode_value(3, 1, key_meta.proto_type, None, "key")
                self._encode_value(3, 2, value_meta.proto_type, value_meta.unwrap, "item")
                add(3, "entry = buf")
                add(3, "buf = outer")
                add(3, f"buf += {tag}")
                add(3, "n = len(entry)")
                self._encode_length(3, "n")
                add(3, "buf += entry")
            elif field.optional or field.group or field.proto_type == betterproto2.TYPE_MESSAGE:
                # Default None: present whenever set, even to a zero value.
                add(1, "if v is not None:")
                self._encode_value(2, field.number, field.proto_type, field.unwrap, "v")
            else:
                # Zero values are skipped; "not v" is "v == default" for every scalar type
                # (0, 0.0, -0.0, "", b"", False, enum 0) and also skips None, as betterproto2 does.
                add(1, "if v:")
                self._encode_value(2, field.number, field.proto_type, field.unwrap, "v")
        add(1, "u = self._unknown_fields")
        add(1, "if u:")
        add(2, "buf += u")
        add(1, "return bytes(buf)")

    # ..................................................................... decoding

    def _read_length(self, indent: int, where: str) -> None:
        add = self.src.add
        add(indent, "if pos < end and data[pos] < 128:")
        add(indent + 1, "n = data[pos]")
        add(indent + 1, "pos += 1")
        add(indent, "else:")
        add(indent + 1, "n, pos = _read_varint(data, pos, end)")
        add(indent, "stop = pos + n")
        add(indent, "if stop > end:")
        add(indent + 1, f"raise _truncated({where!r})")

    def _read_varint_value(self, indent: int) -> None:
        add = self.src.add
        add(indent, "if pos < end and data[pos] < 128:")
        add(indent + 1, "x = data[pos]")
        add(indent + 1, "pos += 1")
        add(indent, "else:")
        add(indent + 1, "x, pos = _read_varint(data, pos, end)")

    def _decode_value(
        self,
        indent: int,
        proto_type: str,
        unwrap: Any,
        value_cls: Any,
        where: str,
        target: str,
    ) -> None:
        """Decode one value at ``pos`` (the tag already read) into ``target = ...``."""
        add = self.src.add
        if proto_type in _VARINT_TYPES:
            self._read_varint_value(indent)
            if proto_type == betterproto2.TYPE_BOOL:
                add(indent, f"{target} x > 0")
            elif proto_type == betterproto2.TYPE_UINT32:
                add(indent, f"{target} x & _MASK32")
            elif proto_type == betterproto2.TYPE_UINT64:
                add(indent, f"{target} x & _MASK64")
            elif proto_type == betterproto2.TYPE_INT32:
                add(indent, f"{target} ((x & _MASK32) ^ 0x80000000) - 0x80000000")
            elif proto_type == betterproto2.TYPE_INT64:
                add(indent, f"{target} ((x & _MASK64) ^ 0x8000000000000000) - 0x8000000000000000")
            elif proto_type == betterproto2.TYPE_ENUM:
                enum_ref = self.src.ref(value_cls, "enum")
                add(
                    indent,
                    f"{target} {enum_ref}(((x & _MASK64) ^ 0x8000000000000000) "
                    "- 0x8000000000000000)",
                )
            else:  # sint32 / sint64: zig-zag
                mask = "_MASK32" if proto_type == betterproto2.TYPE_SINT32 else "_MASK64"
                add(indent, f"x &= {mask}")
                add(indent, f"{target} (x >> 1) ^ (-(x & 1))")
        elif proto_type in _FIXED_FORMATS:
            fmt, _, size = _FIXED_FORMATS[proto_type]
            unpack = self.src.ref(struct.Struct(fmt).unpack_from, "unpack")
            add(indent, f"if pos + {size} > end:")
            add(indent + 1, f"raise _truncated({where!r})")
            add(indent, f"{target} {unpack}(data, pos)[0]")
            add(indent, f"pos += {size}")
        else:
            self._read_length(indent, where)
            if proto_type == betterproto2.TYPE_STRING:
                # try/except costs nothing when nothing is raised (Python 3.11+).
                add(indent, "try:")
                add(indent + 1, f"{target} str(data[pos:stop], 'utf-8')")
                add(indent, "except UnicodeDecodeError:")
                add(indent + 1, f"raise _not_utf8({where!r}) from None")
            elif proto_type == betterproto2.TYPE_BYTES:
                add(indent, f"{target} data[pos:stop]")
            elif proto_type == betterproto2.TYPE_MESSAGE:
                wrapper = unwrap() if unwrap is not None else None
                pair = "*_decode_seconds_nanos(data, pos, stop)"
                if wrapper is self._timestamp or wrapper is self._duration:
                    convert, what = (
                        ("_timestamp_value", "timestamp")
                        if wrapper is self._timestamp
                        else ("_duration_value", "duration")
                    )
                    add(indent, "try:")
                    add(indent + 1, f"{target} {convert}({pair})")
                    add(indent, "except OverflowError:")
                    add(indent + 1, f"raise _out_of_range({where!r}, {what!r}) from None")
                else:
                    decoded_cls = wrapper if wrapper is not None else value_cls
                    decoder = self._decoder_name(decoded_cls)
                    suffix = ".to_wrapped()" if wrapper is not None else ""
                    add(indent, f"{target} {decoder}(data, pos, stop){suffix}")
            else:
                raise NotImplementedError(f"protobuf type {proto_type!r}")
            add(indent, "pos = stop")

    def _decoder_name(self, cls: type[Any]) -> str:
        if cls not in self.names:
            raise NotImplementedError(f"{cls.__name__} is not among the compiled classes")
        return f"_decode_{self.names[cls]}"

    def _write_decoder(self, cls: type[betterproto2.Message]) -> None:
        add = self.src.add
        meta: Any = cls._betterproto  # type: ignore[arg-type]
        fields = list(meta.meta_by_field_name.items())
        locals_ = {name: f"f_{index}" for index, (name, _) in enumerate(fields)}
        add(0, f"def _decode_{self.names[cls]}(data, pos, end):")
        for name, _field in fields:
            default = meta.default_gen[name]()
            if isinstance(default, list):
                add(1, f"{locals_[name]} = []")
            elif isinstance(default, dict):
                add(1, f"{locals_[name]} = {{}}")
            else:
                add(1, f"{locals_[name]} = {self.src.ref(default, 'default')}")
        add(1, "unknown = b''")
        add(1, "while pos < end:")
        add(2, "start = pos")
        add(2, "tag = data[pos]")
        add(2, "if tag < 128:")
        add(3, "pos += 1")
        add(2, "else:")
        add(3, "tag, pos = _read_varint(data, pos, end)")
        keyword = "if"
        for name, field in fields:
            where = f"{cls.__name__}.{name}"
            local = locals_[name]
            wire_type = _wire_type(field.proto_type)
            add(2, f"{keyword} tag == {(field.number << 3) | wire_type}:")
            keyword = "elif"
            if field.proto_type == betterproto2.TYPE_MAP:
                self._read_length(3, where)
                entry = self._write_map_entry_decoder(cls, name, field)
                add(3, f"key, item = {entry}(data, pos, stop)")
                add(3, f"{local}[key] = item")
                add(3, "pos = stop")
            elif field.repeated:
                value_cls = meta.cls_by_field[name]
                self._decode_value(3, field.proto_type, field.unwrap, value_cls, where, "x =")
                add(3, f"{local}.append(x)")
            else:
                value_cls = meta.cls_by_field.get(name)
                self._decode_value(
                    3, field.proto_type, field.unwrap, value_cls, where, f"{local} ="
                )
        if fields:
            names_ref = self.src.ref(
                {field.number: f"{cls.__name__}.{name}" for name, field in fields}, "names"
            )
            add(2, "else:")
            add(3, f"known = {names_ref}.get(tag >> 3)")
            add(3, "if known is not None:")
            add(4, "raise _wrong_wire_type(known)")
            add(3, "pos = _skip(data, pos, end, tag)")
            add(3, "unknown += data[start:pos]")
        else:
            add(2, "pos = _skip(data, pos, end, tag)")
            add(2, "unknown += data[start:pos]")
        cls_ref = self.src.ref(cls, "cls")
        add(1, f"message = _new({cls_ref})")
        entries = ", ".join(f"{name!r}: {locals_[name]}" for name, _ in fields)
        sep = ", " if entries else ""
        add(1, f"message.__dict__ = {{{entries}{sep}'_unknown_fields': unknown}}")
        add(1, "return message")

    def _write_map_entry_decoder(
        self, cls: type[betterproto2.Message], name: str, field: Any
    ) -> str:
        add = self.src.add
        meta: Any = cls._betterproto  # type: ignore[arg-type]
        key_meta, value_meta = field.map_meta
        entry_name = f"_decode_entry_{self.names[cls]}_{name}"
        value_cls = meta.cls_by_field.get(f"{name}.value")
        entry_meta: Any = meta.cls_by_field[name]._betterproto
        key_default = self.src.ref(entry_meta.default_gen["key"](), "default")
        if value_meta.proto_type == betterproto2.TYPE_MESSAGE:
            # A missing message value is the empty message (protobuf's meaning of an entry
            # whose value is the default; prost writes no value then).
            value_default = None
        else:
            value_default = self.src.ref(entry_meta.default_gen["value"](), "default")
        where = f"{cls.__name__}.{name}"
        saved = self.src.lines
        self.src.lines = []
        add(0, f"def {entry_name}(data, pos, end):")
        add(1, f"key = {key_default}")
        if value_default is None:
            add(1, "item = None")
        else:
            add(1, f"item = {value_default}")
        add(1, "while pos < end:")
        add(2, "tag = data[pos]")
        add(2, "if tag < 128:")
        add(3, "pos += 1")
        add(2, "else:")
        add(3, "tag, pos = _read_varint(data, pos, end)")
        add(2, f"if tag == {(1 << 3) | _wire_type(key_meta.proto_type)}:")
        self._decode_value(3, key_meta.proto_type, None, None, f"{where} key", "key =")
        add(2, f"elif tag == {(2 << 3) | _wire_type(value_meta.proto_type)}:")
        self._decode_value(
            3, value_meta.proto_type, value_meta.unwrap, value_cls, f"{where} value", "item ="
        )
        add(2, "elif tag >> 3 in (1, 2):")
        add(3, f"raise _wrong_wire_type({where!r})")
        add(2, "else:")
        add(3, "pos = _skip(data, pos, end, tag)")
        if value_default is None:
            add(1, "if item is None:")
            add(2, f"item = {self._decoder_name(value_cls)}(b'', 0, 0)")
        add(1, "return key, item")
        self.entry_lines.extend(self.src.lines)
        self.src.lines = saved
        return entry_name

    # ......................................................................... build

    def build(self) -> dict[type[Any], tuple[Callable[..., bytes], Callable[..., Any]]]:
        self._write_helpers()
        for cls in self.classes:
            self._write_encoder(cls)
            self._write_decoder(cls)
        source = "\n".join(self.src.lines + self.entry_lines) + "\n"
        code = compile(source, "<sepp_anyio._proto_codec generated>", "exec")
        exec(code, self.namespace)
        return {
            cls: (
                self.namespace[f"_encode_{self.names[cls]}"],
                self.namespace[f"_decode_{self.names[cls]}"],
            )
            for cls in self.classes
        }

    def _write_helpers(self) -> None:
        add = self.src.add
        add(0, "def _encode_seconds_nanos(seconds, nanos):")
        add(1, "buf = bytearray()")
        self.src.add(1, "v = seconds")
        add(1, "if v:")
        self._encode_value(2, 1, betterproto2.TYPE_INT64, None, "v")
        add(1, "v = nanos")
        add(1, "if v:")
        self._encode_value(2, 2, betterproto2.TYPE_INT32, None, "v")
        add(1, "return bytes(buf)")
        add(0, "def _decode_seconds_nanos(data, pos, end):")
        add(1, "seconds = 0")
        add(1, "nanos = 0")
        add(1, "while pos < end:")
        add(2, "tag = data[pos]")
        add(2, "if tag < 128:")
        add(3, "pos += 1")
        add(2, "else:")
        add(3, "tag, pos = _read_varint(data, pos, end)")
        add(2, "if tag == 8:")
        self._decode_value(3, betterproto2.TYPE_INT64, None, None, "seconds", "seconds =")
        add(2, "elif tag == 16:")
        self._decode_value(3, betterproto2.TYPE_INT32, None, None, "nanos", "nanos =")
        add(2, "elif tag >> 3 in (1, 2):")
        add(3, "raise _wrong_wire_type('seconds' if tag >> 3 == 1 else 'nanos')")
        add(2, "else:")
        add(3, "pos = _skip(data, pos, end, tag)")
        add(1, "return seconds, nanos")


# ------------------------------------------------------------------------ installation

_ATTRIBUTES = ("__bytes__", "SerializeToString", "parse", "FromString")
_INSTALLED: dict[type[Any], dict[str, Any]] = {}
# Compiled functions survive uninstall(), so that tests can switch back and forth cheaply.
_COMPILED: dict[type[Any], tuple[Callable[..., bytes], Callable[..., Any]]] = {}


def compile_classes(
    classes: Iterable[type[betterproto2.Message]],
) -> dict[type[Any], tuple[Callable[..., bytes], Callable[..., Any]]]:
    """Return ``{cls: (encode, decode)}``: ``encode(message) -> bytes`` and
    ``decode(data, start, end) -> message``. Raises ``NotImplementedError`` for a field
    kind this compiler does not handle (packed repeated scalars, groups)."""
    return _Compiler(classes).build()


def _make_parse(decode: Callable[[bytes, int, int], Any]) -> classmethod[Any, Any, Any]:
    def parse(cls: type[Any], data: bytes) -> Any:
        if type(data) is not bytes:
            data = bytes(data)
        return decode(data, 0, len(data))

    return classmethod(parse)


def install(classes: Iterable[type[betterproto2.Message]]) -> None:
    """Give ``classes`` compiled encoders and decoders (idempotent)."""
    pending = [cls for cls in classes if cls not in _INSTALLED]
    if not pending:
        return
    if not all(cls in _COMPILED for cls in pending):
        # Recompile together with the installed classes: decoders call each other by name.
        _COMPILED.update(compile_classes(list(dict.fromkeys([*_COMPILED, *pending]))))
    for cls in pending:
        encode, decode = _COMPILED[cls]
        _INSTALLED[cls] = {name: vars(cls).get(name) for name in _ATTRIBUTES}
        parse = _make_parse(decode)
        cls.__bytes__ = encode  # type: ignore[method-assign]
        cls.SerializeToString = encode  # type: ignore[method-assign]
        cls.parse = parse  # type: ignore[method-assign, assignment]
        cls.FromString = parse  # type: ignore[method-assign, assignment]
        cls._sepp_compiled_codec = True  # type: ignore[attr-defined]


def uninstall() -> None:
    """Give every class back betterproto2's own encoding and decoding (for tests that
    compare against it)."""
    for cls, saved in _INSTALLED.items():
        for name, value in saved.items():
            if value is None:
                if name in vars(cls):
                    delattr(cls, name)
            else:
                setattr(cls, name, value)
        if "_sepp_compiled_codec" in vars(cls):
            delattr(cls, "_sepp_compiled_codec")
    _INSTALLED.clear()


def installed_classes() -> list[type[Any]]:
    """The classes that currently have compiled codecs."""
    return list(_INSTALLED)


def is_compiled(cls: type[Any]) -> bool:
    """True if ``cls`` decodes with a compiled (wire-type-checking) decoder."""
    return bool(vars(cls).get("_sepp_compiled_codec", False))


# ------------------------------------------------------------------ element-wise replies

# What decoding an element can raise: DecodeError (OutOfRangeError included) from the
# compiled decoders; ValueError and OverflowError for anything a generated enum or
# wrapper conversion might raise beyond those.
_ELEMENT_ERRORS = (ValueError, OverflowError)


class UndecodedElement:
    """An element of a repeated message field that did not decode.

    Args:
        data: the element's bytes, as received.
        error: why it did not decode; its message names the field.
    """

    __slots__ = ("data", "error")

    def __init__(self, data: bytes, error: Exception) -> None:
        self.data = data
        self.error = error

    def __repr__(self) -> str:
        return f"<UndecodedElement of {len(self.data)} bytes: {self.error}>"


class ElementWise:
    """A reply type (for ``Channel.request``) that decodes ``cls`` strictly except for
    its repeated message fields, whose elements are decoded one by one: an element that
    does not decode is kept as an :class:`UndecodedElement` in its place in the list,
    and the rest of the message is unaffected.

    Everything else is as strict as ``cls.FromString``: a list field with the wrong wire
    type, a truncated element or any other bad field still fails the whole message with
    :class:`DecodeError`. The result is an instance of ``cls`` whose lists may hold
    :class:`UndecodedElement` items, so it is for code that expects them (the client's
    conversions), never for passing on.

    It uses the compiled decoders (:func:`install`), whether or not they are installed on
    the classes at the time, and costs what ``cls.FromString`` costs: one compiled call
    per element.
    """

    def __init__(self, cls: type[betterproto2.Message]) -> None:
        self.message_class = cls
        self.__name__ = cls.__name__
        meta: Any = cls._betterproto  # type: ignore[arg-type]
        # tag of a length-delimited element -> (field name, element class)
        self._lists: dict[int, tuple[str, type[Any]]] = {
            (field.number << 3) | 2: (name, meta.cls_by_field[name])
            for name, field in meta.meta_by_field_name.items()
            if field.repeated and field.proto_type == betterproto2.TYPE_MESSAGE
        }
        if not self._lists:
            raise NotImplementedError(f"{cls.__name__} has no repeated message field")
        self._names = tuple(name for name, _ in self._lists.values())
        self._decoders: dict[int, tuple[str, Callable[..., Any]]] | None = None
        self._decode: Callable[..., Any] | None = None

    def __repr__(self) -> str:
        return f"<ElementWise {self.__name__}>"

    def _resolve(self) -> tuple[dict[int, tuple[str, Callable[..., Any]]], Callable[..., Any]]:
        needed = [self.message_class, *(element for _, element in self._lists.values())]
        if not all(cls in _COMPILED for cls in needed):
            raise RuntimeError(f"{self.__name__}: the compiled codecs are not installed")
        decoders = {tag: (name, _COMPILED[c][1]) for tag, (name, c) in self._lists.items()}
        self._decoders = decoders
        self._decode = decode = _COMPILED[self.message_class][1]
        return decoders, decode

    def FromString(self, data: bytes) -> Any:
        """Decode ``data``; raises :class:`DecodeError` as ``cls.FromString`` would, except
        for elements of the repeated message fields (see the class docstring)."""
        if type(data) is not bytes:
            data = bytes(data)
        decoders, decode = (
            (self._decoders, self._decode)
            if self._decoders is not None and self._decode is not None
            else self._resolve()
        )
        lists: dict[str, list[Any]] = {name: [] for name in self._names}
        rest: bytearray | None = None
        pos = 0
        end = len(data)
        try:
            while pos < end:
                start = pos
                tag = data[pos]
                if tag < 128:
                    pos += 1
                else:
                    tag, pos = _read_varint(data, pos, end)
                entry = decoders.get(tag)
                if entry is None:
                    # Any other field (or a list field with the wrong wire type): the
                    # strict decoder below judges it.
                    pos = _skip(data, pos, end, tag)
                    if rest is None:
                        rest = bytearray()
                    rest += data[start:pos]
                    continue
                name, decode_element = entry
                if pos < end and data[pos] < 128:
                    length = data[pos]
                    pos += 1
                else:
                    length, pos = _read_varint(data, pos, end)
                stop = pos + length
                if stop > end:
                    raise _truncated(f"{self.__name__}.{name}")
                try:
                    item = decode_element(data, pos, stop)
                except _ELEMENT_ERRORS as exc:
                    item = UndecodedElement(data[pos:stop], exc)
                lists[name].append(item)
                pos = stop
        except DecodeError:
            # The framing of the message itself is broken, so no element can be trusted
            # to be one: the strict decoder names the field (``X.jobs has the wrong wire
            # type``), as it does for any other bad field.
            decode(data, 0, end)
            raise
        message = decode(b"", 0, 0) if rest is None else decode(bytes(rest), 0, len(rest))
        # As the compiled decoders build messages: straight into the instance dict.
        message.__dict__.update(lists)
        return message


def decodes_strictly(reply_type: Any) -> bool:
    """Whether replies decoded by ``reply_type`` (a message class or an
    :class:`ElementWise`) are already checked for wire types, so that
    :func:`sepp_anyio._decoded.check_decoded` need not walk them."""
    return isinstance(reply_type, ElementWise) or is_compiled(reply_type)


#: Kinds of field :func:`salvage_fields` reads.
STRING = "string"
UINT32 = "uint32"
MESSAGE = "message"
_KIND_WIRE_TYPES = {STRING: 2, UINT32: 0, MESSAGE: 2}


def salvage_fields(data: bytes, wanted: dict[int, str]) -> dict[int, Any]:
    """Read the top-level fields numbered in ``wanted`` out of bytes that may not decode.

    ``wanted`` maps a field number to :data:`STRING` (returned as ``str``), :data:`UINT32`
    (``int``) or :data:`MESSAGE` (the raw ``bytes``, to salvage in turn). As in protobuf
    the last value of a field wins; a field whose last value is unreadable (a string that
    is not UTF-8) or has another wire type is left out. Reading stops, keeping what it
    has, where the framing itself breaks (a truncated field), since nothing after that
    can be located. Never raises.
    """
    found: dict[int, Any] = {}
    pos = 0
    end = len(data)
    try:
        while pos < end:
            tag, pos = _read_varint(data, pos, end)
            number = tag >> 3
            kind = wanted.get(number)
            if kind is None or tag & 7 != _KIND_WIRE_TYPES[kind]:
                pos = _skip(data, pos, end, tag)
                if kind is not None:
                    found.pop(number, None)
                continue
            if kind == UINT32:
                value, pos = _read_varint(data, pos, end)
                found[number] = value & _MASK32
                continue
            length, pos = _read_varint(data, pos, end)
            stop = pos + length
            if stop > end:
                break
            raw = data[pos:stop]
            pos = stop
            if kind == STRING:
                try:
                    found[number] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    found.pop(number, None)
            else:
                found[number] = raw
    except DecodeError:
        pass
    return found
