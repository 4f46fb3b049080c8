"""Our HPACK glue decodes and encodes exactly as the ``hpack`` package does."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sepp_anyio._http2._hpack import HeaderDecoder, HeaderEncoder, changes_table, never_indexed

names = st.sampled_from(
    [b":status", b"content-type", b"grpc-status", b"grpc-message", b"x-a", b"x-b", b"accept"]
)
values = st.one_of(
    st.sampled_from([b"0", b"200", b"application/grpc", b"", b"ok", b"a" * 200]),
    st.binary(max_size=20),
)
header = st.tuples(names, values)
# (headers, never indexed?, huffman?) blocks, and table size changes between them.
blocks = st.lists(
    st.tuples(
        st.lists(header, max_size=5),
        st.booleans(),
        st.booleans(),
        st.sampled_from([None, None, None, 0, 100, 4096]),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(blocks)
def test_decoder_matches_hpack(
    script: list[tuple[list[tuple[bytes, bytes]], bool, bool, int | None]],
) -> None:
    encoder = hpack.Encoder()
    reference = hpack.Decoder()
    ours = HeaderDecoder(max_decoded_bytes=1 << 20, table_size=4096)
    for headers, sensitive, huffman, size in script:
        if size is not None:
            encoder.header_table_size = size
        fields = [hpack.NeverIndexedHeaderTuple(*h) if sensitive else h for h in headers]
        # Each list twice: the second block is often references only (the cached path).
        for _ in range(2):
            block = encoder.encode(fields, huffman=huffman)
            expected = reference.decode(block, raw=True)
            decoded = ours.decode(block)
            assert list(decoded.headers) == expected == headers
            assert decoded.size == sum(len(n) + len(v) + 32 for n, v in headers)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=6))
def test_decoder_agrees_with_hpack_on_arbitrary_bytes(chunks: list[bytes]) -> None:
    reference = hpack.Decoder()
    ours = HeaderDecoder(max_decoded_bytes=65536, table_size=4096)
    for block in chunks:
        try:
            expected = reference.decode(block, raw=True)
        except Exception:
            try:
                ours.decode(block)
            except (hpack.HPACKError, IndexError, ValueError, TypeError):
                return  # both refused it; the tables may differ from here on
            raise AssertionError(f"we accepted {block!r}, hpack did not") from None
        assert list(ours.decode(block).headers) == expected


def test_decoder_caches_reference_blocks_until_the_table_changes() -> None:
    encoder = hpack.Encoder()
    reference = hpack.Decoder()
    ours = HeaderDecoder(max_decoded_bytes=65536, table_size=4096)
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    setup = encoder.encode(headers)
    reference.decode(setup)
    ours.decode(setup)
    block = encoder.encode(headers)
    first = ours.decode(block)
    assert ours.decode(block) is first
    # A new entry shifts the indices: the same bytes now mean something else.
    insert = encoder.encode([(b"x-new", b"1")])
    reference.decode(insert)
    ours.decode(insert)
    again = ours.decode(block)
    assert again is not first
    assert list(again.headers) == reference.decode(block, raw=True) != headers


def test_oversized_list_is_refused_by_the_decoder() -> None:
    ours = HeaderDecoder(max_decoded_bytes=1000, table_size=4096)
    block = hpack.Encoder().encode([(b"x-a", b"v" * 400)] * 3)
    with pytest.raises(hpack.OversizedHeaderListError):
        ours.decode(block)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b"c"]),
            st.lists(st.tuples(names, values), max_size=3),
            st.sampled_from([None, None, None, 0, 64, 4096]),
        ),
        max_size=20,
    )
)
def test_encoder_blocks_decode_to_what_was_sent(
    script: list[tuple[bytes, list[tuple[bytes, bytes]], int | None]],
) -> None:
    """The constant part is cached per key; the blocks stay right through table changes."""
    constant = {
        b"a": [(b":method", b"POST"), (b":path", b"/a"), (b"x-const", b"1")],
        b"b": [(b":method", b"POST"), (b":path", b"/b"), (b"content-type", b"application/grpc")],
        b"c": [(b":status", b"200")],
    }
    ours = HeaderEncoder(4096)
    decoder = hpack.Decoder()
    for key, extra, size in script:
        if size is not None:
            ours.set_table_size(size)
        block = ours.encode(constant[key], extra, key)
        assert decoder.decode(block, raw=True) == [*constant[key], *extra]


def test_encoder_cache_serves_references() -> None:
    ours = HeaderEncoder(4096)
    headers = [(b":method", b"POST"), (b"x-const", b"1")]
    first = ours.encode(headers, (), b"k")
    second = ours.encode(headers, (), b"k")
    assert changes_table(first) and not changes_table(second)
    assert ours.encode(headers, (), b"k") is second


def test_never_indexed_literals() -> None:
    block = never_indexed([(b"grpc-timeout", b"5S"), (b"x-long", b"v" * 300)])
    decoded = hpack.Decoder().decode(block, raw=True)
    assert decoded == [(b"grpc-timeout", b"5S"), (b"x-long", b"v" * 300)]
    assert all(isinstance(field, hpack.NeverIndexedHeaderTuple) for field in decoded)
    assert not changes_table(block)


def test_changes_table() -> None:
    assert not changes_table(b"\x82\x86")
    assert changes_table(b"\x40\x01a\x01b")  # literal with incremental indexing
    assert changes_table(b"\x3f\xe1\x1f")  # table size update
    assert not changes_table(b"\x00\x01a\x01b\x10\x01a\x01b")
    assert changes_table(b"\x00\x05a")  # truncated: treated as a change
