"""HPACK glue: the ``hpack`` package's encoder and decoder, through their public API,
with the shortcuts that make a unary call cheap.

Encoding. A request's (or response's) headers are a *constant* part (pseudo-headers,
content-type, user-agent, constant metadata: the same on every call of a method) and
a *per-call* part (a grpc-timeout, trace context). The constant part is encoded by
``hpack.Encoder`` and its encoding is cached under a key the caller chooses: once every
constant header is in the dynamic table, encoding it yields references only, and those
bytes stay right for as long as the encoder's table does not change. The encoder's
table changes only by a representation that says so in the bytes it emits (a literal
with incremental indexing, RFC 7541 section 6.2.1, or a dynamic table size update,
section 6.3), so every block the encoder produces is scanned (:func:`changes_table`)
and any change empties the cache. The per-call part is written here directly as
literals never indexed with a literal name and no Huffman coding (section 6.2.3): they
never touch the table, and writing them costs a few appends instead of hpack's table
search.

Decoding. A peer's encoder does the same, so most blocks it sends are a few one-byte
references, identical call after call. A block made only of one-byte indexed fields
(RFC 7541 section 6.1) cannot change the decoder's table, so its decoded list is
cached under its bytes; any other block is scanned after decoding, and one that
changed the table empties the cache (indices shift with every insertion). The cache
also keeps what validation found for each kind of header list (see ``_headers``), so a
cached block is neither decoded nor validated twice.

Errors from ``hpack`` propagate: the connection turns them into connection errors
(COMPRESSION_ERROR, or ENHANCE_YOUR_CALM for a list over the decoder's bound).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import hpack

from ._events import Headers

__all__ = ["Decoded", "HeaderDecoder", "HeaderEncoder", "changes_table", "never_indexed"]

# Blocks up to this size are candidates for the decoder's cache, and at most this many
# are kept (a peer that sends many distinct reference blocks just cycles it).
_MAX_CACHED_BLOCK = 64
_MAX_CACHED_BLOCKS = 64
# A block whose bytes are all in 0x80..0xFE is made of one-byte indexed fields only.
_SINGLE_INDEX = bytes(range(0x80, 0xFF))


def _integer(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """The RFC 7541 section 5.1 integer at ``pos``, and the position after it."""
    mask = (1 << prefix_bits) - 1
    value = block[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def changes_table(block: bytes) -> bool:
    """Whether decoding ``block`` changes the dynamic table (or the block is malformed).

    True if it holds a literal with incremental indexing or a table size update; only
    indexed fields and literals without indexing / never indexed leave the table alone.
    """
    pos, end = 0, len(block)
    try:
        while pos < end:
            byte = block[pos]
            if byte & 0x80:
                _, pos = _integer(block, pos, 7)
            elif byte & 0x60:
                return True
            else:
                index, pos = _integer(block, pos, 4)
                if index == 0:
                    length, pos = _integer(block, pos, 7)
                    pos += length
                length, pos = _integer(block, pos, 7)
                pos += length
    except IndexError:
        return True
    return pos != end


def _append_string(out: bytearray, data: bytes) -> None:
    """An RFC 7541 section 5.2 string literal without Huffman coding."""
    length = len(data)
    if length < 0x7F:
        out.append(length)
    else:
        out.append(0x7F)
        length -= 0x7F
        while length >= 0x80:
            out.append((length & 0x7F) | 0x80)
            length >>= 7
        out.append(length)
    out += data


def never_indexed(headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """``headers`` as literals never indexed, with literal names and no Huffman coding."""
    out = bytearray()
    for name, value in headers:
        out.append(0x10)
        _append_string(out, name)
        _append_string(out, value)
    return bytes(out)


class HeaderEncoder:
    """Our side's HPACK encoder: ``hpack.Encoder`` plus a cache of constant blocks."""

    __slots__ = ("_cache", "_encoder", "_resized", "max_table_size")

    def __init__(self, max_table_size: int) -> None:
        self._encoder = hpack.Encoder()
        self._cache: dict[Hashable, bytes] = {}
        self.max_table_size = max_table_size
        self._resized = False
        if max_table_size < self._encoder.header_table_size:
            self.set_table_size(max_table_size)

    def set_table_size(self, size: int) -> None:
        """The peer's SETTINGS_HEADER_TABLE_SIZE: use ``min(size, max_table_size)``.

        The change is signalled at the start of the next block (RFC 7541 section 4.2).
        """
        size = min(size, self.max_table_size)
        if size != self._encoder.header_table_size:
            self._encoder.header_table_size = size
            self._cache.clear()
            self._resized = True

    def encode(
        self,
        headers: Sequence[tuple[bytes, bytes]],
        extra: Sequence[tuple[bytes, bytes]] = (),
        cache_key: Hashable | None = None,
    ) -> bytes:
        """One header block: ``headers`` through the table, then ``extra`` never indexed.

        With ``cache_key``, the encoding of ``headers`` is reused while the table stays
        the same; the caller promises that the same key always comes with the same
        ``headers``.
        """
        cache = self._cache
        if cache_key is not None and not self._resized:
            block = cache.get(cache_key)
            if block is None:
                block = self._encode(headers)
                if changes_table(block):
                    # Indices shifted: every cached block may be wrong now.
                    cache.clear()
                else:
                    cache[cache_key] = block
        else:
            block = self._encode(headers)
            if cache and changes_table(block):
                cache.clear()
        if extra:
            return block + never_indexed(extra)
        return block

    @property
    def dynamic_entries(self) -> tuple[tuple[bytes, bytes], ...]:
        """The encoder's dynamic table, newest entry first."""
        return tuple(self._encoder.header_table.dynamic_entries)

    def _encode(self, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
        self._resized = False
        return self._encoder.encode(headers, huffman=True)


class Decoded:
    """A decoded header block, with its RFC 9113 size and the validation verdicts."""

    __slots__ = ("checks", "headers", "size")

    def __init__(self, headers: Headers, size: int) -> None:
        self.headers = headers
        self.size = size
        # What _headers.check found per kind of list (filled in lazily).
        self.checks: dict[int, tuple[str | None, int]] = {}


def _truncated() -> hpack.HPACKDecodingError:
    return hpack.HPACKDecodingError("truncated header block")


class HeaderDecoder:
    """Our side's HPACK decoder: ``hpack.Decoder``, walked one representation at a time.

    The block is walked here (RFC 7541 section 6 gives each representation's layout):

    * a one-byte indexed field (the common case) comes from a per-index cache, filled
      by letting ``hpack`` decode that one byte as a block of its own;
    * a literal without indexing or never indexed, with plain (not Huffman-coded)
      strings and a literal or one-byte name index, is read directly: such fields never
      touch the table;
    * any other representation (Huffman strings, multi-byte indices, literals with
      incremental indexing, table size updates) is handed to ``hpack`` as a block of
      its own, in order, so the table evolves exactly as if hpack had the whole block.
      One that changes the table empties the caches.

    Whole blocks of one-byte references are also cached by their bytes (see the module
    docstring).
    """

    __slots__ = ("_decoder", "_indexed", "known", "max_decoded_bytes")

    def __init__(self, *, max_decoded_bytes: int, table_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_decoded_bytes)
        self._decoder.max_allowed_table_size = table_size
        self._decoder.header_table_size = table_size
        self.max_decoded_bytes = max_decoded_bytes
        #: Whole blocks decoded before, by their bytes: valid while the table stays the
        #: same (emptied when it changes). Read only; a reader may look a block up here
        #: before it calls :meth:`decode`, which is what decode does first.
        self.known: dict[bytes, Decoded] = {}
        # One-byte index (0x81..0xFE) -> its header, while the table stays the same.
        self._indexed: dict[int, tuple[bytes, bytes]] = {}

    def _hpack(self, representation: bytes) -> list[tuple[bytes, bytes]]:
        return self._decoder.decode(representation, raw=True)  # type: ignore[return-value]

    def decode(self, block: bytes) -> Decoded:
        """Decode one whole header block.

        Raises:
            hpack.HPACKError: the block is malformed, refers to entries that do not
                exist, resizes the table beyond what we allow, or decodes to more than
                ``max_decoded_bytes`` (:class:`hpack.OversizedHeaderListError`). The
                table is unusable afterwards.
        """
        cache = self.known
        decoded = cache.get(block)
        if decoded is not None:
            return decoded
        indexed = self._indexed
        headers: list[tuple[bytes, bytes]] = []
        limit = self.max_decoded_bytes
        size = 0
        pos = 0
        end = len(block)
        changed = False
        references_only = True
        while pos < end:
            byte = block[pos]
            if 0x80 < byte < 0xFF:
                header = indexed.get(byte)
                if header is None:
                    header = self._hpack(block[pos : pos + 1])[0]
                    indexed[byte] = header
                pos += 1
            else:
                references_only = False
                if byte & 0xE0 == 0x20:
                    # A dynamic table size update: only before the first field.
                    if headers:
                        raise hpack.HPACKDecodingError(
                            "table size update after the first header field"
                        )
                    _, after = _integer(block, pos, 5)
                    self._hpack(block[pos:after])
                    indexed.clear()
                    changed = True
                    pos = after
                    continue
                header, pos, table = self._field(block, pos, byte)
                if table:
                    indexed.clear()
                    changed = True
            size += len(header[0]) + len(header[1]) + 32
            if size > limit:
                raise hpack.OversizedHeaderListError(
                    f"A header list larger than {limit} has been received"
                )
            headers.append(header)
        if changed:
            cache.clear()
        decoded = Decoded(tuple(headers), size)
        if references_only and end <= _MAX_CACHED_BLOCK:
            if len(cache) >= _MAX_CACHED_BLOCKS:
                cache.clear()
            cache[block] = decoded
        return decoded

    def _field(self, block: bytes, pos: int, byte: int) -> tuple[tuple[bytes, bytes], int, bool]:
        """The field representation at ``pos`` (not a one-byte index, not a size update):
        the header, the position after it, and whether it changed the table."""
        end = len(block)
        try:
            if byte & 0x80:
                # A multi-byte index (or index 0, which hpack rejects).
                _, after = _integer(block, pos, 7)
                return self._hpack(block[pos:after])[0], after, False
            indexing = bool(byte & 0x40)
            index, cursor = _integer(block, pos, 6 if indexing else 4)
            name: bytes | None = None
            if index == 0:
                plain = not block[cursor] & 0x80
                length, cursor = _integer(block, cursor, 7)
                if plain:
                    name = block[cursor : cursor + length]
                cursor += length
            elif not indexing and index < 0x0F:
                name = self._indexed_name(index)
            plain = not block[cursor] & 0x80
            length, cursor = _integer(block, cursor, 7)
            after = cursor + length
        except IndexError:
            raise _truncated() from None
        if after > end:
            raise _truncated()
        if name is not None and plain and not indexing:
            return (name, block[cursor:after]), after, False
        return self._hpack(block[pos:after])[0], after, indexing

    def _indexed_name(self, index: int) -> bytes:
        byte = 0x80 | index
        header = self._indexed.get(byte)
        if header is None:
            header = self._hpack(bytes((byte,)))[0]
            self._indexed[byte] = header
        return header[0]
