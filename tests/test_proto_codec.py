"""The compiled protobuf codecs (``sepp_anyio._wire._codec``) against betterproto2's own code.

* every generated class: random messages (built from betterproto2's field metadata) encode to
  exactly betterproto2's bytes and decode to the same message, ``_unknown_fields`` included,
  also with unknown fields appended, interleaved, and known fields reordered or repeated;
* arbitrary and mutated bytes: whatever the compiled decoder accepts, betterproto2 accepts too
  and decodes to the same message (which passes the type walk of ``tests/support/decoded.py``);
  whatever it refuses, it refuses with ``DecodeError`` or ``UnicodeDecodeError``;
* the strict cases one by one (wrong wire type, truncation, long varints, groups, field 0,
  a map entry without value, unknown enum values, negative seconds/nanos);
* the type walk catches what betterproto2's own decoder lets through;
* the Timestamp/Duration arithmetic written out in the codec is the generated classes' own.

The compiled side is ``encode`` / ``decode`` (the table the transport and the server use);
betterproto2's reference results are the generated classes' own ``bytes()`` / ``FromString``,
which ``sepp_anyio`` leaves exactly as generated (tests/test_no_patching.py).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import betterproto2
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from sepp_anyio._proto.google import protobuf as wkt
from sepp_anyio._proto.sepp import v1 as pb
from sepp_anyio._wire import _codec as _proto_codec
from sepp_anyio._wire import _wireformat
from sepp_anyio._wire._codec import CODECS, decode, encode
from sepp_anyio._wire._wireformat import DecodeError
from tests.support.decoded import _check_message, check_decoded

ALL_CLASSES: list[type[Any]] = list(CODECS)
CAUSES: list[Any] = [*pb.DeadLetterCause]
HOT_CLASSES: list[type[Any]] = [
    pb.ReserveResponse,
    pb.Job,
    pb.AckRequest,
    pb.NackRequest,
    pb.ReserveRequest,
    pb.EnqueueBatchRequest,
    pb.GetServerInfoResponse,
    pb.DeadLetterRecord,
]

PER_CLASS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SOUNDNESS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
WIRE = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HELPERS = settings(max_examples=300, deadline=None)


def _class_id(cls: type[Any]) -> str:
    return cls.__name__


# ---------------------------------------------------------------------- reference codec


def reference_bytes(message: Any) -> bytes:
    """betterproto2's own encoding."""
    return bytes(message)


def reference_parse(cls: type[Any], data: bytes) -> Any:
    """betterproto2's own decoding."""
    return cls.FromString(data)


def test_every_generated_class_is_compiled() -> None:
    generated = {
        value
        for module in (pb, wkt)
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, betterproto2.Message)
        and value.__module__ == module.__name__
    }
    assert len(generated) > 40  # the sepp.v1 messages and the well-known types used
    assert set(ALL_CLASSES) == generated


def test_reference_codec_is_betterproto2() -> None:
    """The reference really is betterproto2's code: the classes are as generated."""
    assert pb.Job in CODECS and wkt.Timestamp in CODECS and wkt.Empty in CODECS
    for cls in CODECS:
        assert cls.__bytes__ is betterproto2.Message.__bytes__
        assert cls.SerializeToString is betterproto2.Message.SerializeToString
        assert "parse" not in vars(cls) and "FromString" not in vars(cls)
        encode_, decode_ = CODECS[cls]
        assert encode_ is not cls.__bytes__ and decode_ is not cls.FromString


# ------------------------------------------------------------------------ comparisons


def metadata(message_or_class: Any) -> Any:
    """betterproto2's field metadata (typed loosely: its annotations are for generated code)."""
    return message_or_class._betterproto


def assert_same(compiled: Any, reference: Any, path: str = "message") -> None:
    """Equal values of identical types, float bits, dict order and ``_unknown_fields``
    included, all the way down."""
    assert type(compiled) is type(reference), (
        f"{path}: {type(compiled).__name__} != {type(reference).__name__} "
        f"({compiled!r} vs {reference!r})"
    )
    if isinstance(compiled, betterproto2.Message):
        for name in metadata(compiled).meta_by_field_name:
            assert_same(getattr(compiled, name), getattr(reference, name), f"{path}.{name}")
        assert compiled._unknown_fields == reference._unknown_fields, (
            f"{path}._unknown_fields: {compiled._unknown_fields!r} != {reference._unknown_fields!r}"
        )
    elif isinstance(compiled, list):
        assert len(compiled) == len(reference), f"{path}: {compiled!r} vs {reference!r}"
        for index, (left, right) in enumerate(zip(compiled, reference, strict=True)):
            assert_same(left, right, f"{path}[{index}]")
    elif isinstance(compiled, dict):
        assert list(compiled) == list(reference), f"{path}: keys {list(compiled)!r}"
        for key in compiled:
            assert_same(key, next(k for k in reference if k == key), f"{path} key {key!r}")
            assert_same(compiled[key], reference[key], f"{path}[{key!r}]")
    elif isinstance(compiled, float):
        assert struct.pack("<d", compiled) == struct.pack("<d", reference), (
            f"{path}: {compiled!r} vs {reference!r}"
        )
    elif isinstance(compiled, datetime):
        assert compiled == reference, f"{path}: {compiled!r} vs {reference!r}"
        assert compiled.utcoffset() == reference.utcoffset(), path
    else:
        assert compiled == reference, f"{path}: {compiled!r} vs {reference!r}"


def fill_missing_map_values(message: Any) -> Any:
    """betterproto2 decodes a map entry without its message value to ``None``; the compiled
    codec (documented) to the empty message. Replace the former by the latter, in place."""
    meta = metadata(message)
    for name, field in meta.meta_by_field_name.items():
        value = getattr(message, name)
        if field.proto_type == betterproto2.TYPE_MAP:
            if field.map_meta[1].proto_type != betterproto2.TYPE_MESSAGE:
                continue
            value_cls = meta.cls_by_field[f"{name}.value"]
            for key, item in value.items():
                if item is None:
                    value[key] = value_cls()
                else:
                    fill_missing_map_values(item)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, betterproto2.Message):
                    fill_missing_map_values(item)
        elif isinstance(value, betterproto2.Message):
            fill_missing_map_values(value)
    return message


# --------------------------------------------------------------- wire-format utilities
# Written here independently of the code under test.


def varint(value: int) -> bytes:
    assert value >= 0
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def length_delimited(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def split_fields(data: bytes) -> list[bytes]:
    """The top-level fields of a valid encoding, each as its raw bytes."""
    chunks = []
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = read_varint(data, pos)
        wire_type = key & 7
        if wire_type == 0:
            pos = read_varint(data, pos)[1]
        elif wire_type == 1:
            pos += 8
        elif wire_type == 2:
            length, pos = read_varint(data, pos)
            pos += length
        elif wire_type == 5:
            pos += 4
        else:
            raise AssertionError(f"wire type {wire_type} in a valid encoding")
        chunks.append(data[start:pos])
    assert pos == len(data)
    return chunks


def declared_numbers(cls: type[Any]) -> set[int]:
    meta = metadata(cls)
    return {field.number for field in meta.meta_by_field_name.values()}


@st.composite
def unknown_field(draw: st.DrawFn) -> bytes:
    """One valid field with a number no generated class declares (all are below 100)."""
    number = draw(st.integers(100, 200) | st.integers(1000, 2**29 - 1), label="number")
    wire_type = draw(st.sampled_from([0, 1, 2, 5]), label="wire type")
    key = tag(number, wire_type)
    if draw(st.integers(0, 9)) == 0 and len(key) < 10:
        # A non-minimal key (padded with a continuation byte): still valid, kept raw.
        key = key[:-1] + bytes([key[-1] | 0x80, 0x00])
    if wire_type == 0:
        payload = varint(draw(st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 127, 128])))
    elif wire_type == 1:
        payload = draw(st.binary(min_size=8, max_size=8))
    elif wire_type == 5:
        payload = draw(st.binary(min_size=4, max_size=4))
    else:
        body = draw(st.binary(max_size=12))
        payload = varint(len(body)) + body
    return key + payload


unknown_fields = st.lists(unknown_field(), max_size=4).map(b"".join)


# ---------------------------------------------------------- messages from the metadata

INT_RANGES: dict[str, tuple[int, int]] = {
    betterproto2.TYPE_INT32: (-(2**31), 2**31 - 1),
    betterproto2.TYPE_SINT32: (-(2**31), 2**31 - 1),
    betterproto2.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    betterproto2.TYPE_INT64: (-(2**63), 2**63 - 1),
    betterproto2.TYPE_SINT64: (-(2**63), 2**63 - 1),
    betterproto2.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    betterproto2.TYPE_UINT32: (0, 2**32 - 1),
    betterproto2.TYPE_FIXED32: (0, 2**32 - 1),
    betterproto2.TYPE_UINT64: (0, 2**64 - 1),
    betterproto2.TYPE_FIXED64: (0, 2**64 - 1),
}
# Where varint lengths change, plus the sign boundaries of the narrower widths.
INTERESTING_INTS = [0, 1, 127, 128, 16383, 16384, 2**31 - 1, 2**31, 2**32 - 1, 2**32]
INTERESTING_INTS += [2**63 - 1, 2**63, 2**64 - 1]
INTERESTING_INTS += [-value for value in INTERESTING_INTS] + [-(2**31) - 1, -(2**63)]

texts = st.text(max_size=10) | st.sampled_from(["", "é", "日本語", "\x00", "🙂", "a\u0301"])
tz_offsets = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
)
instants = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=tz_offsets
) | st.sampled_from(
    [
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    ]
)
spans = st.timedeltas(
    min_value=-timedelta(days=3_000_000), max_value=timedelta(days=3_000_000)
) | st.sampled_from(
    [
        timedelta(0),
        timedelta(microseconds=1),
        timedelta(microseconds=-1),
        timedelta(seconds=-1, microseconds=500_000),
        timedelta(seconds=-1, microseconds=-500_000),
        timedelta(days=-1),
        timedelta(seconds=30),
    ]
)
doubles = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324]) | st.floats()


def integers(proto_type: str) -> st.SearchStrategy[int]:
    low, high = INT_RANGES[proto_type]
    edges = [value for value in INTERESTING_INTS if low <= value <= high] + [low, high]
    return st.integers(low, high) | st.sampled_from(edges)


def enums(enum_cls: Any) -> st.SearchStrategy[Any]:
    return (
        st.sampled_from(list(enum_cls))
        | st.sampled_from([99, -1, 2**31 - 1, -(2**31)]).map(enum_cls)
        | st.integers(-(2**31), 2**31 - 1).map(enum_cls)
    )


def values(proto_type: str, value_cls: Any, unwrap: Any, depth: int) -> st.SearchStrategy[Any]:
    """A value of one (non-repeated, non-map) field of the given type."""
    if proto_type == betterproto2.TYPE_STRING:
        return texts
    if proto_type == betterproto2.TYPE_BYTES:
        return st.binary(max_size=12)
    if proto_type == betterproto2.TYPE_BOOL:
        return st.booleans()
    if proto_type in INT_RANGES:
        return integers(proto_type)
    if proto_type == betterproto2.TYPE_DOUBLE:
        return doubles
    if proto_type == betterproto2.TYPE_FLOAT:
        return st.floats(width=32) | st.sampled_from([math.nan, -0.0, math.inf])
    if proto_type == betterproto2.TYPE_ENUM:
        return enums(value_cls)
    if proto_type == betterproto2.TYPE_MESSAGE:
        if unwrap is not None:
            wrapper = unwrap()
            if wrapper is wkt.Timestamp:
                return instants
            if wrapper is wkt.Duration:
                return spans
            raise NotImplementedError(f"wrapped {wrapper.__name__}")
        return messages(value_cls, depth - 1)
    raise NotImplementedError(proto_type)


@st.composite
def messages(draw: st.DrawFn, cls: type[Any], depth: int = 3, unknown: bool = True) -> Any:
    """A random instance of any generated message class, from betterproto2's metadata.

    Oneof groups get at most one member set; optional fields are ``None`` or set (zero
    values included); below ``depth`` nested messages are empty. With ``unknown``, some
    messages carry unknown fields (encoded after the known ones)."""
    meta = metadata(cls)
    if depth < 0:
        return cls()
    kwargs: dict[str, Any] = {}
    groups: dict[str, list[str]] = {}
    for name, field in meta.meta_by_field_name.items():
        if field.group is not None:
            groups.setdefault(field.group, []).append(name)
    chosen = {
        group: draw(st.sampled_from([None, *members]), label=f"{cls.__name__}.{group}")
        for group, members in groups.items()
    }
    for name, field in meta.meta_by_field_name.items():
        label = f"{cls.__name__}.{name}"
        if field.proto_type == betterproto2.TYPE_MAP:
            key_meta, value_meta = field.map_meta
            entry: Any = meta.cls_by_field[name]
            keys = values(key_meta.proto_type, entry._betterproto.cls_by_field["key"], None, 0)
            items = values(
                value_meta.proto_type,
                meta.cls_by_field.get(f"{name}.value"),
                value_meta.unwrap,
                depth,
            )
            kwargs[name] = draw(st.dictionaries(keys, items, max_size=3), label=label)
            continue
        item_cls = meta.cls_by_field.get(name)
        value = values(field.proto_type, item_cls, field.unwrap, depth)
        if field.repeated:
            if field.proto_type == betterproto2.TYPE_MESSAGE and field.unwrap is None:
                value = value | st.builds(item_cls)
            kwargs[name] = draw(st.lists(value, max_size=3), label=label)
        elif field.group is not None:
            if chosen[field.group] == name:
                kwargs[name] = draw(value, label=label)
            else:
                kwargs[name] = None
        elif field.optional or field.proto_type == betterproto2.TYPE_MESSAGE:
            kwargs[name] = draw(st.none() | value, label=label)
        else:
            kwargs[name] = draw(value, label=label)
    message = cls(**kwargs)
    if unknown and draw(st.integers(0, 4), label="with unknown fields") == 0:
        message._unknown_fields = draw(unknown_fields, label=f"{cls.__name__} unknown")
    return message


def nested_messages(message: Any) -> Iterator[Any]:
    """``message`` and every message in it."""
    yield message
    for name in metadata(message).meta_by_field_name:
        value = getattr(message, name)
        if isinstance(value, dict):
            items = list(value.values())
        elif isinstance(value, list):
            items = value
        else:
            items = [value]
        for item in items:
            if isinstance(item, betterproto2.Message):
                yield from nested_messages(item)


def features(message: Any) -> Iterator[str]:
    """What kinds of values ``message`` (not the ones in it) holds."""
    if message._unknown_fields:
        yield "unknown fields"
    if isinstance(message, pb.Job):
        if any(ord(c) > 127 for c in message.id):
            yield "non-ascii string"
        if message.enqueued_at is not None and message.enqueued_at.year < 1970:
            yield "pre-epoch timestamp"
        if message.priority == 2**32 - 1:
            yield "max uint32"
        if pb.PrimitiveValue() in message.custom.values():
            yield "empty map value"
    elif isinstance(message, pb.DeadLetterRecord):
        if message.cause not in CAUSES:
            yield "unknown enum"
        if message.last_reason == "":
            yield "optional set to zero"
    elif isinstance(message, pb.NackRetry):
        if message.delay is not None and message.delay < timedelta(0):
            yield "negative duration"
        members = [message.default, message.delay, message.dead_letter]
        assert sum(member is not None for member in members) <= 1
        if members == [None, None, None]:
            yield "empty oneof"
    elif isinstance(message, pb.PrimitiveValue):
        value = message.double_value
        if value is not None and math.isnan(value):
            yield "nan"
        if value is not None and value == 0.0 and math.copysign(1.0, value) < 0:
            yield "-0.0"
        if message.int_value is not None and message.int_value < -(2**31):
            yield "negative int64"
    elif isinstance(message, pb.GetServerInfoResponse):
        if "" in message.supported_protocol_versions:
            yield "empty string in list"
    elif isinstance(message, pb.ReserveResponse) and pb.Job() in message.jobs:
        yield "empty message in list"


FEATURE_SOURCES: dict[str, type[Any]] = {
    "unknown fields": pb.ReserveResponse,
    "non-ascii string": pb.Job,
    "pre-epoch timestamp": pb.Job,
    "max uint32": pb.Job,
    "empty map value": pb.Job,
    "unknown enum": pb.DeadLetterRecord,
    "optional set to zero": pb.DeadLetterRecord,
    "negative duration": pb.NackRetry,
    "empty oneof": pb.NackRetry,
    "nan": pb.PrimitiveValue,
    "-0.0": pb.PrimitiveValue,
    "negative int64": pb.PrimitiveValue,
    "empty string in list": pb.GetServerInfoResponse,
    "empty message in list": pb.ReserveResponse,
}


@pytest.mark.parametrize(("feature", "cls"), sorted(FEATURE_SOURCES.items()))
def test_strategy_reaches(feature: str, cls: type[Any]) -> None:
    """The strategy produces what the properties rely on (so they cannot pass vacuously)."""
    find(
        messages(cls),
        lambda message: any(feature in features(inner) for inner in nested_messages(message)),
        settings=settings(
            max_examples=2000, database=None, derandomize=True, phases=[Phase.generate]
        ),
    )


# --------------------------------------------------- 2. every class against betterproto2


def check_decodes_like_betterproto2(cls: type[Any], data: bytes) -> Any:
    """Decode ``data`` with both codecs, compare, and compare their re-encodings."""
    decoded = decode(cls, data)
    assert type(decoded) is cls
    reference = reference_parse(cls, data)
    assert decoded == reference
    assert_same(decoded, reference)
    assert_same(decode(cls, bytearray(data)), reference)
    reencoded = encode(decoded)
    assert reencoded == reference_bytes(decoded) == reference_bytes(reference)
    assert decoded.SerializeToString() == reencoded
    return decoded


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=_class_id)
@PER_CLASS
@given(data=st.data())
def test_codec_matches_betterproto2(cls: type[Any], data: st.DataObject) -> None:
    message = data.draw(messages(cls), label="message")
    encoded = encode(message)
    assert encoded == reference_bytes(message), message
    assert message.SerializeToString() == encoded
    decoded = check_decodes_like_betterproto2(cls, encoded)
    _check_message(decoded, "")

    # Unknown fields appended: kept (after any of the message's own) and written back last.
    extra = data.draw(unknown_fields, label="appended unknown fields")
    decoded = check_decodes_like_betterproto2(cls, encoded + extra)
    assert decoded._unknown_fields == message._unknown_fields + extra
    assert encode(decoded).endswith(extra)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=_class_id)
@PER_CLASS
@given(data=st.data())
def test_rearranged_fields_decode_like_betterproto2(cls: type[Any], data: st.DataObject) -> None:
    """Known fields reordered and repeated (last one wins, lists append, maps overwrite),
    unknown fields interleaved between them."""
    message = data.draw(messages(cls, unknown=False), label="message")
    chunks = split_fields(encode(message))
    repeated = data.draw(st.lists(st.sampled_from(chunks), max_size=3) if chunks else st.just([]))
    inserted = data.draw(st.lists(unknown_field(), max_size=3), label="interleaved unknown")
    chunks = data.draw(st.permutations([*chunks, *repeated, *inserted]), label="field order")
    decoded = check_decodes_like_betterproto2(cls, b"".join(chunks))
    assert decoded._unknown_fields == b"".join(c for c in chunks if c in inserted)
    assert not any(read_varint(chunk, 0)[0] >> 3 in declared_numbers(cls) for chunk in inserted)


# ------------------------------------------------------- 3. soundness on arbitrary bytes


def check_sound(cls: type[Any], data: bytes) -> bool:
    """The compiled decoder accepts only what betterproto2 decodes to the same (well-typed)
    message, and refuses with ValueError. Returns whether it accepted."""
    try:
        decoded = decode(cls, data)
    except (DecodeError, UnicodeDecodeError):
        return False
    except OverflowError:
        # A well-formed Timestamp/Duration outside datetime's range: betterproto2's
        # to_datetime()/to_timedelta() overflow the same way.
        with pytest.raises(OverflowError):
            reference_parse(cls, data)
        return False
    _check_message(decoded, "")
    reference = fill_missing_map_values(reference_parse(cls, data))
    assert_same(decoded, reference)
    assert encode(decoded) == reference_bytes(decoded)
    return True


@pytest.mark.parametrize("cls", HOT_CLASSES, ids=_class_id)
@settings(SOUNDNESS, max_examples=150)
@given(data=st.binary(max_size=80))
def test_arbitrary_bytes_are_decoded_soundly(cls: type[Any], data: bytes) -> None:
    check_sound(cls, data)


Mutation = tuple[str, int, int]
mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete", "truncate"]),
        st.integers(0, 10_000),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=3,
)


def mutate(data: bytes, steps: list[Mutation]) -> bytes:
    buf = bytearray(data)
    for kind, where, value in steps:
        if kind == "insert":
            buf.insert(where % (len(buf) + 1), value)
        elif not buf:
            continue
        elif kind == "flip":
            buf[where % len(buf)] ^= 1 << (value % 8)
        elif kind == "delete":
            del buf[where % len(buf)]
        else:
            del buf[where % len(buf) :]
    return bytes(buf)


@pytest.mark.parametrize("cls", HOT_CLASSES, ids=_class_id)
@SOUNDNESS
@given(data=st.data())
def test_mutated_encodings_are_decoded_soundly(cls: type[Any], data: st.DataObject) -> None:
    message = data.draw(messages(cls, depth=2), label="message")
    steps = data.draw(mutations, label="mutations")
    check_sound(cls, mutate(encode(message), steps))


def test_soundness_check_sees_both_outcomes() -> None:
    """``check_sound`` is not vacuous: it sees accepted and refused inputs."""
    job = pb.Job(id="j", custom={"k": pb.PrimitiveValue(int_value=-1)}, attempt=3)
    encoded = encode(job)
    assert check_sound(pb.Job, encoded)
    assert check_sound(pb.Job, encoded[:-1]) is False
    assert check_sound(pb.Job, b"\x08\x01") is False
    # Map entry without its value: accepted, and equal once betterproto2's None is filled.
    assert check_sound(pb.Job, b"\x52\x03\x0a\x01k")
    # A timestamp out of datetime's range overflows in both codecs.
    overflow = length_delimited(6, tag(1, 0) + varint(2**62))
    assert check_sound(pb.Job, overflow) is False
    # The schema-shaped fuzzer produces both, too.
    quick = settings(max_examples=500, database=None, derandomize=True, phases=[Phase.generate])
    for cls in (pb.Job, pb.ReserveResponse, pb.GetServerInfoResponse):
        find(wire_message(cls), lambda data: check_sound(cls, data), settings=quick)  # noqa: B023
        find(wire_message(cls), lambda data: not check_sound(cls, data), settings=quick)  # noqa: B023


@st.composite
def wire_value(draw: st.DrawFn, proto_type: str, value_cls: Any, unwrap: Any, depth: int) -> bytes:
    """The payload (after the key) of one field of ``proto_type``, with the right wire type
    but an arbitrary value: varints of up to ten bytes whatever the declared width, strings
    that need not be UTF-8, nested messages that are themselves arbitrary."""
    if (proto_type in INT_RANGES and proto_type not in _FIXED_SIZES) or proto_type in (
        betterproto2.TYPE_BOOL,
        betterproto2.TYPE_ENUM,
    ):
        value = draw(
            st.sampled_from([0, 1, 2, 255, 2**31, 2**32 - 1, 2**32 + 5, 2**64 - 1, 2**70 - 1])
            | st.integers(0, 2**70 - 1)
        )
        return varint(value)
    if proto_type in _FIXED_SIZES:
        size = _FIXED_SIZES[proto_type]
        return draw(st.binary(min_size=size, max_size=size))
    if proto_type == betterproto2.TYPE_MESSAGE:
        if unwrap is not None:
            body = draw(
                st.builds(
                    lambda seconds, nanos: (
                        (tag(1, 0) + varint(seconds % 2**64) if seconds is not None else b"")
                        + (tag(2, 0) + varint(nanos % 2**64) if nanos is not None else b"")
                    ),
                    st.none() | st.integers(-(10**10), 10**10),
                    st.none() | st.integers(-(2**31), 2**31 - 1),
                )
                | wire_message(unwrap(), 0)
            )
        elif depth < 0:
            body = b""
        else:
            body = draw(wire_message(value_cls, depth - 1))
    elif proto_type == betterproto2.TYPE_STRING:
        body = draw(texts.map(str.encode) | st.binary(max_size=6))
    else:
        body = draw(st.binary(max_size=12))
    return varint(len(body)) + body


_FIXED_SIZES = {
    betterproto2.TYPE_DOUBLE: 8,
    betterproto2.TYPE_FIXED64: 8,
    betterproto2.TYPE_SFIXED64: 8,
    betterproto2.TYPE_FLOAT: 4,
    betterproto2.TYPE_FIXED32: 4,
    betterproto2.TYPE_SFIXED32: 4,
}


def _wire_type_of(proto_type: str) -> int:
    if proto_type in _FIXED_SIZES:
        return 1 if _FIXED_SIZES[proto_type] == 8 else 5
    if proto_type in INT_RANGES or proto_type in (betterproto2.TYPE_BOOL, betterproto2.TYPE_ENUM):
        return 0
    return 2


@st.composite
def wire_message(draw: st.DrawFn, cls: type[Any], depth: int = 2) -> bytes:
    """A well-formed encoding shaped like ``cls`` (declared numbers with their wire types, in
    any order and number, unknown fields between them) holding arbitrary values."""
    meta = metadata(cls)
    fields = list(meta.meta_by_field_name.items())
    chunks: list[bytes] = []
    for _ in range(draw(st.integers(0, 6))):
        if not fields or draw(st.integers(0, 5)) == 0:
            chunks.append(draw(unknown_field()))
            continue
        name, field = draw(st.sampled_from(fields))
        if field.proto_type == betterproto2.TYPE_MAP:
            key_meta, value_meta = field.map_meta
            entry: list[bytes] = []
            for part in draw(st.lists(st.sampled_from(["key", "value", "unknown"]), max_size=3)):
                if part == "key":
                    # Mostly colliding keys, so that later entries replace earlier ones.
                    colliding = st.sampled_from([b"\x00", b"\x01k", b"\x01\xff"])
                    entry.append(
                        tag(1, _wire_type_of(key_meta.proto_type))
                        + draw(colliding | wire_value(key_meta.proto_type, None, None, depth))
                    )
                elif part == "value":
                    entry.append(
                        tag(2, _wire_type_of(value_meta.proto_type))
                        + draw(
                            wire_value(
                                value_meta.proto_type,
                                meta.cls_by_field.get(f"{name}.value"),
                                value_meta.unwrap,
                                depth,
                            )
                        )
                    )
                else:
                    entry.append(draw(unknown_field()))
            chunks.append(length_delimited(field.number, b"".join(entry)))
            continue
        payload = draw(
            wire_value(field.proto_type, meta.cls_by_field.get(name), field.unwrap, depth)
        )
        chunks.append(tag(field.number, _wire_type_of(field.proto_type)) + payload)
    return b"".join(chunks)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=_class_id)
@WIRE
@given(data=st.data())
def test_schema_shaped_bytes_are_decoded_soundly(cls: type[Any], data: st.DataObject) -> None:
    """Right wire types, arbitrary values: integers wider than declared (masked), booleans
    other than 0/1, unknown enum values, invalid UTF-8, out-of-range timestamps."""
    check_sound(cls, data.draw(wire_message(cls), label="encoding"))


# ------------------------------------------------------------------ 4. the strict cases


def test_wrong_wire_type_names_the_field() -> None:
    with pytest.raises(DecodeError, match=r"Job\.id has the wrong wire type"):
        decode(pb.Job, tag(1, 0) + varint(5))
    with pytest.raises(DecodeError, match=r"Job\.priority has the wrong wire type"):
        decode(pb.Job, length_delimited(4, b"\x01"))
    with pytest.raises(DecodeError, match=r"Job\.payload has the wrong wire type"):
        decode(pb.Job, tag(3, 5) + b"\x00" * 4)
    with pytest.raises(DecodeError, match=r"PrimitiveValue\.double_value has the wrong wire"):
        decode(pb.PrimitiveValue, tag(2, 5) + b"\x00" * 4)
    # Nested: the innermost field is named.
    job = length_delimited(1, tag(2, 0) + varint(1))
    with pytest.raises(DecodeError, match=r"Job\.job_type has the wrong wire type"):
        decode(pb.ReserveResponse, job)
    # Map entries and wrapped well-known types.
    with pytest.raises(DecodeError, match=r"Job\.custom has the wrong wire type"):
        decode(pb.Job, length_delimited(10, tag(1, 0) + varint(1)))
    with pytest.raises(DecodeError, match=r"Job\.custom has the wrong wire type"):
        decode(pb.Job, length_delimited(10, tag(2, 0) + varint(1)))
    with pytest.raises(DecodeError, match=r"seconds has the wrong wire type"):
        decode(pb.Job, length_delimited(6, length_delimited(1, b"")))
    with pytest.raises(DecodeError, match=r"nanos has the wrong wire type"):
        decode(pb.ExtendRequest, length_delimited(3, tag(2, 5) + b"\x00" * 4))
    with pytest.raises(DecodeError, match="wrong wire type"):
        decode(pb.DeadLetterRecord, length_delimited(2, b""))
    # betterproto2 alone accepts the first of these, with an int job id.
    assert pb.Job.FromString(tag(1, 0) + varint(5)).id == 5


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(length_delimited(1, b"abcde")[:-2], id="string"),
        pytest.param(tag(1, 2), id="length-missing"),
        pytest.param(tag(3, 2) + varint(2**40) + b"\x00", id="huge-length"),
        pytest.param(length_delimited(3, length_delimited(1, b"xyz")[:-1]), id="nested"),
        pytest.param(tag(4, 0) + b"\x80", id="varint"),
        pytest.param(b"\x80", id="tag"),
        pytest.param(tag(150, 1) + b"\x00" * 7, id="unknown-fixed64"),
        pytest.param(tag(150, 5) + b"\x00" * 3, id="unknown-fixed32"),
        pytest.param(length_delimited(150, b"abc")[:-1], id="unknown-length-delimited"),
        pytest.param(tag(150, 0), id="unknown-varint"),
        pytest.param(length_delimited(10, tag(2, 2) + varint(5) + b"ab"), id="map-entry-value"),
    ],
)
def test_truncated_input_is_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(pb.Job, data)


def test_truncated_double_is_refused() -> None:
    with pytest.raises(DecodeError, match="truncated"):
        decode(pb.PrimitiveValue, tag(2, 1) + b"\x00" * 7)
    assert decode(pb.PrimitiveValue, tag(2, 1) + struct.pack("<d", 1.5)).double_value == 1.5


def test_varints_have_at_most_ten_bytes() -> None:
    ten = b"\xff" * 9 + b"\x01"  # -1 as int64: the longest valid varint
    assert decode(pb.PrimitiveValue, tag(3, 0) + ten).int_value == -1
    assert (
        decode(pb.PrimitiveValue, tag(3, 0) + ten).int_value
        == reference_parse(pb.PrimitiveValue, tag(3, 0) + ten).int_value
    )
    eleven = b"\x80" * 10 + b"\x01"
    with pytest.raises(DecodeError, match="longer than 10 bytes"):
        decode(pb.PrimitiveValue, tag(3, 0) + eleven)
    with pytest.raises(DecodeError, match="longer than 10 bytes"):
        decode(pb.Job, tag(150, 0) + eleven)  # unknown field
    with pytest.raises(DecodeError, match="longer than 10 bytes"):
        decode(pb.Job, eleven + b"\x00")  # tag
    with pytest.raises(DecodeError, match="longer than 10 bytes"):
        decode(pb.Job, tag(1, 2) + eleven)  # length
    # A non-minimal but ten-byte varint is fine.
    padded = b"\x85" + b"\x80" * 8 + b"\x00"
    assert decode(pb.Job, tag(4, 0) + padded).priority == 5


@pytest.mark.parametrize(
    ("cls", "number", "value", "expected"),
    [
        (pb.EnqueueResponse, 2, 2, True),  # bool
        (pb.EnqueueResponse, 2, 256, True),
        (pb.EnqueueResponse, 2, 2**64, True),
        (pb.EnqueueResponse, 2, 2**63, True),
        (pb.AckRequest, 2, 2**32 + 5, 5),  # uint32
        (pb.AckRequest, 2, 2**64 - 1, 2**32 - 1),
        (pb.AckRequest, 2, 2**70 - 1, 2**32 - 1),
        (pb.PayloadTooLarge, 1, 2**64 + 7, 7),  # uint64
        (pb.PrimitiveValue, 3, 2**64 - 1, -1),  # int64
        (pb.PrimitiveValue, 3, 2**63, -(2**63)),
        (pb.PrimitiveValue, 3, 2**70 - 1, -1),
        (wkt.Timestamp, 2, 2**32 - 1, -1),  # int32
        (wkt.Timestamp, 2, 2**31, -(2**31)),
        (wkt.Timestamp, 2, 2**40 + 3, 3),
        (pb.DeadLetterRecord, 2, 2**64 - 2, -2),  # enum
        (pb.DeadLetterRecord, 2, 2**32 - 1, 2**32 - 1),
    ],
)
def test_varints_are_masked_like_betterproto2(
    cls: type[Any], number: int, value: int, expected: int
) -> None:
    data = tag(number, 0) + varint(value)
    decoded = decode(cls, data)
    field = metadata(cls).field_name_by_number[number]
    assert getattr(decoded, field) == expected
    assert_same(decoded, reference_parse(cls, data))
    assert encode(decoded) == reference_bytes(decoded)


@pytest.mark.parametrize("wire_type", [3, 4, 6, 7])
@pytest.mark.parametrize("number", [1, 4, 150])
def test_groups_and_reserved_wire_types_are_refused(number: int, wire_type: int) -> None:
    with pytest.raises(DecodeError):
        decode(pb.Job, tag(number, wire_type) + tag(number, 4))
    with pytest.raises(DecodeError):
        decode(wkt.Empty, tag(number, wire_type))


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x00", id="varint"),
        pytest.param(b"\x01" + b"\x00" * 8, id="fixed64"),
        pytest.param(b"\x02\x00", id="length-delimited"),
        pytest.param(b"\x05" + b"\x00" * 4, id="fixed32"),
        pytest.param(b"\x80\x00\x00", id="non-minimal"),
    ],
)
def test_field_number_zero_is_refused(data: bytes) -> None:
    for cls in (pb.Job, pb.PrimitiveValue, wkt.Empty, pb.GetServerInfoRequest):
        with pytest.raises(DecodeError, match="field number 0"):
            decode(cls, data)
    with pytest.raises(DecodeError, match="field number 0"):
        decode(pb.ReserveResponse, length_delimited(1, data))
    with pytest.raises(DecodeError, match="field number 0"):
        decode(pb.Job, length_delimited(10, data))  # inside a map entry


def test_map_entry_without_value_is_the_empty_message() -> None:
    only_key = length_delimited(10, length_delimited(1, b"k"))
    job = decode(pb.Job, only_key)
    assert list(job.custom) == ["k"]
    assert_same(job.custom["k"], pb.PrimitiveValue())
    _check_message(job, "")
    assert bytes(job) == length_delimited(10, length_delimited(1, b"k") + tag(2, 2) + b"\x00")
    # betterproto2 gives None there (which its own encoder cannot write back).
    assert reference_parse(pb.Job, only_key).custom == {"k": None}

    # An entry with only a value has the empty key; an empty entry is ("", empty message).
    only_value = length_delimited(10, length_delimited(2, tag(4, 0) + b"\x01"))
    assert decode(pb.Job, only_value).custom == {"": pb.PrimitiveValue(bool_value=True)}
    empty = decode(pb.EnqueueRequest, length_delimited(8, b""))
    assert_same(empty.custom, {"": pb.PrimitiveValue()})
    # Unknown fields inside the entry are dropped, as betterproto2 drops them; the last
    # value wins.
    entry = length_delimited(1, b"k") + tag(150, 0) + b"\x01"
    entry += length_delimited(2, tag(3, 0) + b"\x07") + length_delimited(2, tag(1, 2) + b"\x00")
    job = decode(pb.Job, length_delimited(10, entry))
    assert_same(job, reference_parse(pb.Job, length_delimited(10, entry)))
    assert job.custom == {"k": pb.PrimitiveValue(string_value="")}


def test_last_value_wins_like_betterproto2() -> None:
    """Singular fields: the last one wins, embedded messages replaced (not merged); lists
    append; a repeated map key takes the last value but keeps its first position."""
    custom = [
        length_delimited(10, length_delimited(1, key) + length_delimited(2, value))
        for key, value in [
            (b"a", tag(3, 0) + b"\x01"),
            (b"b", tag(4, 0) + b"\x01"),
            (b"a", length_delimited(1, b"x")),
        ]
    ]
    data = b"".join(
        [
            length_delimited(3, length_delimited(1, b"data")),
            length_delimited(1, b"first"),
            *custom,
            length_delimited(3, length_delimited(2, b"enc")),
            length_delimited(1, b"second"),
            tag(4, 0) + b"\x07",
            tag(4, 0) + b"\x00",
        ]
    )
    job = decode(pb.Job, data)
    assert job.id == "second"
    assert_same(job.payload, pb.Payload(encoding="enc"))
    assert job.priority == 0
    assert list(job.custom.items()) == [
        ("a", pb.PrimitiveValue(string_value="x")),
        ("b", pb.PrimitiveValue(bool_value=True)),
    ]
    assert_same(job, reference_parse(pb.Job, data))
    chunks = [length_delimited(1, name) for name in (b"q2", b"", b"q1")]
    request = decode(pb.ReserveRequest, b"".join(chunks))
    assert request.queues == ["q2", "", "q1"]
    assert_same(request, reference_parse(pb.ReserveRequest, b"".join(chunks)))


@pytest.mark.parametrize("value", [99, 5, -1, 2**31 - 1, -(2**31)])
def test_unknown_enum_values_are_kept(value: int) -> None:
    record = pb.DeadLetterRecord(cause=pb.DeadLetterCause(value), final_attempt=2)
    encoded = encode(record)
    assert encoded == reference_bytes(record)
    decoded = decode(pb.DeadLetterRecord, encoded)
    assert type(decoded.cause) is pb.DeadLetterCause
    assert decoded.cause == value
    assert decoded.cause not in CAUSES
    assert_same(decoded, reference_parse(pb.DeadLetterRecord, encoded))
    assert encode(decoded) == encoded
    # Sent as a 32-bit value (as some encoders write int32 enums), sign-extended the same.
    short = tag(2, 0) + varint(value & 0xFFFFFFFF)
    assert_same(decode(pb.DeadLetterRecord, short), reference_parse(pb.DeadLetterRecord, short))


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (-1, -1000),
        (-5, 999_999_999),
        (0, -1),
        (-62_135_596_800, 0),
        (253_402_300_799, 999_999_999),
        (2**31, -(2**31)),
        (-(2**31), 2**31 - 1),
        (1, 2**31 - 1),
    ],
)
def test_negative_seconds_and_nanos_match_betterproto2(seconds: int, nanos: int) -> None:
    for wkt_cls in (wkt.Timestamp, wkt.Duration):
        message = wkt_cls(seconds=seconds, nanos=nanos)
        encoded = encode(message)
        assert encoded == reference_bytes(message)
        assert_same(decode(wkt_cls, encoded), reference_parse(wkt_cls, encoded))
        assert decode(wkt_cls, encoded) == message
    inner = encode(wkt.Timestamp(seconds=seconds, nanos=nanos))
    # The same pair, nanos as a 32-bit (not sign-extended) varint, and int64 seconds padded.
    variants = [
        inner,
        tag(1, 0) + varint(seconds % 2**64) + tag(2, 0) + varint(nanos % 2**32),
        tag(2, 0) + varint(nanos % 2**64) + tag(1, 0) + varint(seconds % 2**64),
    ]
    for payload in variants:
        for cls, number in ((pb.DeadLetterRecord, 3), (pb.ExtendRequest, 3)):
            data = length_delimited(number, payload)
            try:
                reference = reference_parse(cls, data)
            except OverflowError:
                with pytest.raises(OverflowError):
                    decode(cls, data)
                continue
            decoded = decode(cls, data)
            assert_same(decoded, reference)
            assert encode(decoded) == reference_bytes(reference)


def test_naive_datetimes_are_refused_like_betterproto2() -> None:
    record = pb.DeadLetterRecord(failed_at=datetime(2020, 1, 1))
    with pytest.raises(ValueError, match="timezone aware"):
        encode(record)
    with pytest.raises(ValueError, match="timezone aware"):
        reference_bytes(record)


# --------------------------------------------------------------- 5. the type walk


def test_the_type_walk_catches_what_betterproto2_lets_through() -> None:
    """The oracle of the soundness tests above: it refuses the wrongly typed messages that
    betterproto2's own decoder produces, and the compiled decoder refuses their bytes."""
    wrong = pb.Job(id=5)  # what betterproto2 decodes a varint job id to
    with pytest.raises(ValueError, match=r"id has the wrong wire type"):
        _check_message(wrong, "")

    data = length_delimited(1, tag(1, 0) + varint(5))  # ReserveResponse with a bad Job
    with pytest.raises(DecodeError, match=r"Job\.id has the wrong wire type"):
        decode(pb.ReserveResponse, data)
    lax = pb.ReserveResponse.FromString(data)
    assert lax.jobs[0].id == 5
    with pytest.raises(ValueError, match=r"jobs\[0\]\.id has the wrong wire type"):
        check_decoded(lax)
    check_decoded(pb.ReserveResponse.FromString(bytes(pb.ReserveResponse(jobs=[pb.Job()]))))

    # Map entries too.
    entry: Any = pb.Job._betterproto.cls_by_field["custom"]
    with pytest.raises(ValueError, match="wrong wire type"):
        check_decoded(entry(key=1, value=pb.PrimitiveValue()))
    check_decoded(entry(key="k", value=pb.PrimitiveValue()))


# ------------------------------------------------------ 6. Timestamp/Duration arithmetic


@HELPERS
@given(
    st.datetimes(timezones=st.just(UTC))
    | st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=tz_offsets
    )
)
def test_timestamp_fields_match_from_datetime(value: datetime) -> None:
    expected = wkt.Timestamp.from_datetime(value)
    assert _wireformat.timestamp_fields(value) == (expected.seconds, expected.nanos)


@HELPERS
@given(
    st.integers(-62_135_596_800, 253_402_300_799) | st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 999_999_999) | st.integers(-(2**31), 2**31 - 1),
)
def test_timestamp_value_matches_to_datetime(seconds: int, nanos: int) -> None:
    try:
        expected = wkt.Timestamp(seconds=seconds, nanos=nanos).to_datetime()
    except OverflowError:
        with pytest.raises(OverflowError):
            _wireformat.timestamp_value(seconds, nanos)
        return
    actual = _wireformat.timestamp_value(seconds, nanos)
    assert actual == expected and actual.tzinfo == expected.tzinfo


@HELPERS
@given(st.timedeltas() | spans)
def test_duration_fields_match_from_timedelta(value: timedelta) -> None:
    expected = wkt.Duration.from_timedelta(value)
    assert _wireformat.duration_fields(value) == (expected.seconds, expected.nanos)


@HELPERS
@given(
    st.integers(-315_576_000_000, 315_576_000_000) | st.integers(-(2**63), 2**63 - 1),
    st.integers(-999_999_999, 999_999_999) | st.integers(-(2**31), 2**31 - 1),
)
def test_duration_value_matches_to_timedelta(seconds: int, nanos: int) -> None:
    try:
        expected = wkt.Duration(seconds=seconds, nanos=nanos).to_timedelta()
    except OverflowError:
        with pytest.raises(OverflowError):
            _wireformat.duration_value(seconds, nanos)
        return
    assert _wireformat.duration_value(seconds, nanos) == expected


# ------------------------------------------------------ 7. errors name the field


def test_a_time_out_of_range_names_the_field() -> None:
    year_10000 = length_delimited(11, bytes(wkt.Timestamp(seconds=253_402_300_800)))
    with pytest.raises(_wireformat.OutOfRangeError, match=r"^Job\.scheduled_at: timestamp out"):
        decode(pb.Job, year_10000)
    # Still an OverflowError, as betterproto2's is, and a DecodeError.
    with pytest.raises(OverflowError):
        decode(pb.Job, year_10000)
    with pytest.raises(DecodeError):
        decode(pb.Job, year_10000)
    huge = length_delimited(17, bytes(wkt.Duration(seconds=2**62)))
    with pytest.raises(
        DecodeError, match=r"GetServerInfoResponse\.max_wait_timeout: duration out of range"
    ):
        decode(pb.GetServerInfoResponse, huge)


def test_a_string_that_is_not_utf8_names_the_field() -> None:
    with pytest.raises(DecodeError, match=r"^Job\.queue: invalid UTF-8$"):
        decode(pb.Job, length_delimited(12, b"\xff\xfe"))
    entry = length_delimited(1, b"\xc3")  # a truncated two-byte sequence as the key
    with pytest.raises(DecodeError, match=r"Job\.custom key: invalid UTF-8"):
        decode(pb.Job, length_delimited(10, entry))


# ------------------------------------------------------ 8. element-wise replies

LIST_REPLIES = [pb.ReserveResponse, pb.DrainDeadLettersResponse, pb.EnqueueBatchResponse]


@pytest.mark.parametrize("cls", LIST_REPLIES, ids=_class_id)
@settings(SOUNDNESS)
@given(data=st.data())
def test_element_wise_decodes_what_decodes_exactly_as_strict(
    cls: type[Any], data: st.DataObject
) -> None:
    message = data.draw(messages(cls, depth=2), label="message")
    encoded = encode(message)
    assert_same(_proto_codec.ElementWise(cls).FromString(encoded), decode(cls, encoded))


@pytest.mark.parametrize("cls", LIST_REPLIES, ids=_class_id)
@settings(SOUNDNESS)
@given(data=st.data())
def test_element_wise_keeps_the_good_elements_of_mutated_replies(
    cls: type[Any], data: st.DataObject
) -> None:
    """Whatever the bytes: element-wise decoding raises DecodeError exactly when the
    framing of the reply itself (or a field other than a list) is bad; otherwise each
    element is what the strict decoder makes of it alone, or an UndecodedElement whose
    bytes the strict decoder refuses."""
    message = data.draw(messages(cls, depth=2), label="message")
    encoded = mutate(encode(message), data.draw(mutations, label="mutations"))
    element_wise = _proto_codec.ElementWise(cls)
    name = next(iter(element_wise._names))
    element_cls = metadata(cls).cls_by_field[name]
    refused: str | None = None
    try:
        decoded = decode(element_wise, encoded)
    except DecodeError as exc:
        refused = str(exc)
    if refused is not None:
        with pytest.raises(DecodeError) as strict:
            decode(cls, encoded)
        # The strict decoder stops at the first fault in the bytes; the element-wise one
        # keeps a bad element and goes on to the reply's own fault. Either the two name the
        # same fault, or the strict one stopped earlier, inside an element.
        assert refused == str(strict.value) or not str(strict.value).startswith(
            f"{cls.__name__}."
        ), (refused, str(strict.value))
        return
    for item in getattr(decoded, name):
        if isinstance(item, _proto_codec.UndecodedElement):
            assert isinstance(item.error, DecodeError)
            with pytest.raises(DecodeError):
                decode(element_cls, item.data)
        else:
            assert_same(item, decode(element_cls, encode(item)))
    if not any(isinstance(i, _proto_codec.UndecodedElement) for i in getattr(decoded, name)):
        assert_same(decoded, decode(cls, encoded))


def test_element_wise_keeps_an_undecodable_job_in_its_place() -> None:
    good = encode(pb.Job(id="a", attempt=1))
    bad = bytes(pb.Job(id="b", attempt=3)) + length_delimited(
        9, encode(wkt.Timestamp(seconds=-(2**62)))
    )
    data = b"".join(length_delimited(1, job) for job in (good, bad, good))
    with pytest.raises(OverflowError):
        decode(pb.ReserveResponse, data)  # strict: the whole reply is lost
    reply = _proto_codec.ElementWise(pb.ReserveResponse).FromString(data)
    first, middle, last = reply.jobs
    assert first.id == last.id == "a"
    assert isinstance(middle, _proto_codec.UndecodedElement) and middle.data == bad
    assert str(middle.error) == "Job.lease_expires_at: timestamp out of range"


def test_element_wise_is_strict_about_the_reply_itself() -> None:
    element_wise = _proto_codec.ElementWise(pb.ReserveResponse)
    with pytest.raises(DecodeError, match=r"ReserveResponse\.jobs has the wrong wire type"):
        decode(element_wise, tag(1, 0) + varint(1))
    with pytest.raises(DecodeError, match=r"ReserveResponse\.jobs is truncated"):
        decode(element_wise, tag(1, 2) + varint(10) + b"x")
    with pytest.raises(DecodeError, match="field number 0"):
        decode(element_wise, tag(0, 0) + varint(1))
    unknown = tag(15, 0) + varint(7)
    reply = decode(element_wise, unknown + length_delimited(1, bytes(pb.Job(id="a"))))
    assert reply._unknown_fields == unknown and reply.jobs[0].id == "a"
    with pytest.raises(NotImplementedError):
        _proto_codec.ElementWise(pb.Job)


# ------------------------------------------------------ 9. salvage


JOB_IDENTITY = {1: _proto_codec.STRING, 7: _proto_codec.UINT32}


def test_salvage_reads_a_jobs_id_and_attempt_past_a_bad_field() -> None:
    bad = bytes(pb.Job(id="j-1", attempt=4)) + length_delimited(
        11, encode(wkt.Timestamp(seconds=2**40))
    )
    assert _proto_codec.salvage_fields(bad, JOB_IDENTITY) == {1: "j-1", 7: 4}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # The last value wins, as in protobuf.
        (length_delimited(1, b"a") + length_delimited(1, b"b"), {1: "b"}),
        # A last value that is not UTF-8 hides the earlier one.
        (length_delimited(1, b"a") + length_delimited(1, b"\xff"), {}),
        # So does a last value of another wire type.
        (length_delimited(1, b"a") + tag(1, 0) + varint(5), {}),
        # The framing breaks after the id: what was read before is kept.
        (length_delimited(1, b"a") + tag(7, 0) + b"\x80", {1: "a"}),
        (length_delimited(1, b"a") + tag(3, 2) + varint(50) + b"x", {1: "a"}),
        (tag(7, 0) + varint(2**33 + 3), {7: 3}),
        (b"", {}),
        (b"\xff" * 20, {}),
    ],
)
def test_salvage_never_raises(data: bytes, expected: dict[int, Any]) -> None:
    assert _proto_codec.salvage_fields(data, JOB_IDENTITY) == expected


@HELPERS
@given(st.binary(max_size=60))
def test_salvage_of_arbitrary_bytes_never_raises(data: bytes) -> None:
    found = _proto_codec.salvage_fields(data, {**JOB_IDENTITY, 3: _proto_codec.MESSAGE})
    assert set(found) <= {1, 3, 7}
    assert all(isinstance(v, str | int | bytes) for v in found.values())
