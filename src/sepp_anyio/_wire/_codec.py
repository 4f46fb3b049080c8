"""The compiled protobuf codecs, as the transport and the server use them.

The generated message classes (``sepp_anyio._proto``) are used as betterproto2 wrote
them and never modified. Encoding and decoding go through :data:`CODECS` instead, a table
from message class to the straight-line ``(encode, decode)`` functions that
``proto/codecgen.py`` generates from the same classes at code-generation time
(``_codecs_generated``, checked in): :func:`encode` and :func:`decode` look a message's
class up in it. They produce betterproto2's bytes and messages, decode strictly (a wrong
wire type, truncation, a group, a long varint raise :class:`DecodeError` naming the
field), and cost a few bytecode instructions per field; proto/codecgen.py says exactly
what they keep and where they are stricter.

A whole message is decoded strictly: one bad field anywhere makes all of it undecodable.
A reply that carries a list of independent items (the jobs of a reserve, the records of a
drain, the results of a batch) is better read item by item, so that one bad item costs
only itself: :class:`ElementWise` is such a reply type, and :func:`salvage_fields` reads
what it can of an item that did not decode (a job's id and attempt, to dead-letter it).
"""

from __future__ import annotations

from typing import Any

import betterproto2

from ._codecs_generated import CODECS, REPEATED_MESSAGES
from ._wireformat import MASK32, DecodeError, OutOfRangeError, read_varint, skip, truncated

__all__ = [
    "CODECS",
    "MESSAGE",
    "STRING",
    "UINT32",
    "DecodeError",
    "ElementWise",
    "OutOfRangeError",
    "UndecodedElement",
    "decode",
    "encode",
    "salvage_fields",
]


def encode(message: Any) -> bytes:
    """The protobuf encoding of ``message``: its class's compiled encoder, or, for a class
    without one (a message type of another library), its ``SerializeToString()`` or else
    ``bytes(message)``.

    Raises:
        ValueError: a value the wire cannot carry (a naive ``datetime``, an integer beyond
            64 bits), as betterproto2 raises.
    """
    codec = CODECS.get(type(message))
    if codec is None:
        serialize = getattr(message, "SerializeToString", None)
        data: bytes = bytes(message) if serialize is None else serialize()
        return data
    return codec[0](message)


def decode(message_type: Any, data: bytes | bytearray) -> Any:
    """Decode ``data`` as ``message_type``: a generated class, strictly through its
    compiled decoder; otherwise anything with a ``FromString`` (an :class:`ElementWise`,
    a message type of another library).

    Raises:
        DecodeError: ``data`` is not a valid encoding of a generated class; the message
            names the field (:class:`OutOfRangeError` for a time beyond ``datetime``).
    """
    codec = CODECS.get(message_type)
    if codec is None:
        return message_type.FromString(data)
    if type(data) is not bytes:
        data = bytes(data)
    return codec[1](data, 0, len(data))


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

    Everything else is as strict as :func:`decode`: a list field with the wrong wire
    type, a truncated element or any other bad field still fails the whole message with
    :class:`DecodeError`. The result is an instance of ``cls`` whose lists may hold
    :class:`UndecodedElement` items, so it is for code that expects them (the client's
    conversions), never for passing on.

    It costs what :func:`decode` costs: one compiled call per element.
    """

    def __init__(self, cls: type[betterproto2.Message]) -> None:
        self.message_class = cls
        self.__name__ = cls.__name__
        # What codegen read of the class when it compiled the codecs (nothing of
        # betterproto2's own metadata is read at run time).
        lists = REPEATED_MESSAGES.get(cls)
        if lists is None:
            raise NotImplementedError(f"{cls.__name__} has no repeated message field")
        self._names = tuple(name for _, name, _ in lists)
        # tag of a length-delimited element -> (field name, the element class's decoder)
        self._decoders = {tag: (name, CODECS[element][1]) for tag, name, element in lists}
        self._decode = CODECS[cls][1]

    def __repr__(self) -> str:
        return f"<ElementWise {self.__name__}>"

    def FromString(self, data: bytes) -> Any:
        """Decode ``data``; raises :class:`DecodeError` as :func:`decode` would, except
        for elements of the repeated message fields (see the class docstring)."""
        if type(data) is not bytes:
            data = bytes(data)
        decoders, decode = self._decoders, self._decode
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
                    tag, pos = read_varint(data, pos, end)
                entry = decoders.get(tag)
                if entry is None:
                    # Any other field (or a list field with the wrong wire type): the
                    # strict decoder below judges it.
                    pos = skip(data, pos, end, tag)
                    if rest is None:
                        rest = bytearray()
                    rest += data[start:pos]
                    continue
                name, decode_element = entry
                if pos < end and data[pos] < 128:
                    length = data[pos]
                    pos += 1
                else:
                    length, pos = read_varint(data, pos, end)
                stop = pos + length
                if stop > end:
                    raise truncated(f"{self.__name__}.{name}")
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
            tag, pos = read_varint(data, pos, end)
            number = tag >> 3
            kind = wanted.get(number)
            if kind is None or tag & 7 != _KIND_WIRE_TYPES[kind]:
                pos = skip(data, pos, end, tag)
                if kind is not None:
                    found.pop(number, None)
                continue
            if kind == UINT32:
                value, pos = read_varint(data, pos, end)
                found[number] = value & MASK32
                continue
            length, pos = read_varint(data, pos, end)
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
