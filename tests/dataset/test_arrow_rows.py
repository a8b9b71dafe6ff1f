"""Arrow rows copied into a batch as they come (fastio.dataset._arrow_rows):
the batch is what joining the parts at once makes, and each part's buffers
are let go once it is in."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastio.dataset._arrow_rows
from fastio.dataset._arrow_rows import ArrowRows
from fastio.dataset._batching import _Carry

TYPES = {
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "binary": pa.binary(),
    "string": pa.string(),
    "large_binary": pa.large_binary(),
    "large_string": pa.large_string(),
}


def _values(kind: str) -> st.SearchStrategy:
    if kind in ("binary", "large_binary"):
        return st.binary(max_size=300) | st.binary(min_size=20_000, max_size=30_000)
    if kind in ("string", "large_string"):
        return st.text(max_size=20)
    if kind == "uint8":
        return st.integers(0, 255)
    if kind == "int64":
        return st.integers(-(2**63), 2**63 - 1)
    return st.floats(width=32 if kind == "float32" else 64, allow_nan=False)


@st.composite
def parts(draw) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """Record batches of one schema, each sliced anywhere (a part is often a
    slice of what a read decoded)."""
    names = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=4, unique=True))
    schema = pa.schema([pa.field(name, TYPES[name]) for name in names],
                       metadata={b"written": b"by a test"})  # fmt: skip
    batches = []
    for _ in range(draw(st.integers(1, 5))):
        rows = draw(st.integers(0, 12))
        columns = [draw(st.lists(_values(name), min_size=rows, max_size=rows)) for name in names]
        arrays = [pa.array(c, TYPES[n]) for c, n in zip(columns, names, strict=True)]
        whole = pa.RecordBatch.from_arrays(arrays, schema=schema)
        lo = draw(st.integers(0, rows))
        batches.append(whole.slice(lo, draw(st.integers(0, rows - lo))))
    return schema, batches


@given(case=parts(), spare=st.integers(0, 3))
@settings(max_examples=150, deadline=None)
def test_rows_copied_in_part_by_part_are_the_parts_joined(case, spare) -> None:
    schema, batches = case
    rows = sum(batch.num_rows for batch in batches)
    builder = ArrowRows.building(pa, batches[0], rows + spare)
    assert builder is not None
    for batch in batches:
        assert builder.takes(batch)
        builder.add(batch)
    assert builder.num_rows == rows
    built = builder.take()
    built.validate(full=True)
    expected = pa.concat_batches(batches)
    assert built.schema.equals(schema, check_metadata=True)
    assert built.equals(expected)
    assert builder.num_rows == 0
    if rows:  # the builder starts again on the same schema
        builder.add(batches[-1])
        assert builder.take().equals(batches[-1])


def test_a_part_it_cannot_take_is_said_so(monkeypatch) -> None:
    plain = pa.record_batch({"a": pa.array([1, 2, 3])})
    builder = ArrowRows.building(pa, plain, 4)
    assert builder is not None
    assert builder.takes(plain)
    assert not builder.takes(pa.record_batch({"a": pa.array([1, None])}))  # a null
    assert not builder.takes(pa.record_batch({"b": pa.array([1])}))  # another schema
    builder.add(plain)
    assert not builder.takes(plain)  # past its rows
    assert not builder.takes(pa.Table.from_batches([plain.slice(0, 1)]))  # not a record batch
    for kind in (pa.list_(pa.int64()), pa.bool_(), pa.dictionary(pa.int8(), pa.string())):
        other = pa.record_batch({"a": pa.array([], kind)})
        assert ArrowRows.building(pa, other, 4) is None
    # Values past what 32-bit offsets reach (2 GiB; 100 bytes here) are
    # joined by pyarrow instead, which raises for them or not as it does.
    monkeypatch.setattr(fastio.dataset._arrow_rows, "_MOST_BYTES", 100)
    texts = pa.record_batch({"t": pa.array(["x" * 60, "y" * 30])})
    builder = ArrowRows.building(pa, texts, 8)
    assert builder is not None
    assert builder.takes(texts.slice(0, 1))
    builder.add(texts.slice(0, 1))
    assert builder.takes(texts.slice(1, 1))  # 90 bytes
    assert not builder.takes(texts)  # 150
    large = pa.record_batch({"t": pa.array(["x" * 60, "y" * 60], pa.large_string())})
    assert ArrowRows.building(pa, large, 8).takes(large)  # 64-bit offsets


def test_a_part_s_buffers_are_let_go_once_its_rows_are_in() -> None:
    """A record batch read zero-copy from a buffer (as fastio reads an Arrow
    IPC file) no longer holds that buffer once its rows are in the batch."""
    source = pa.record_batch({"key": pa.array(["a", "b", "c"]),
                              "data": pa.array([b"x" * 5000, b"", b"y" * 7])})  # fmt: skip
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, source.schema) as writer:
        writer.write_batch(source)
    read = bytearray(sink.getvalue().to_pybytes())
    part = pa.ipc.open_file(pa.py_buffer(read)).get_batch(0).slice(1, 2)
    builder = ArrowRows.building(pa, part, 8)
    assert builder is not None
    with pytest.raises(BufferError):  # the part's columns lie in the read
        read.append(0)
    builder.add(part)
    del part
    gc.collect()
    read.append(0)  # the builder kept none of it
    built = builder.take()
    assert built.to_pylist() == source.slice(1, 2).to_pylist()


@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=8), size=st.integers(1, 12),
       nulls=st.lists(st.booleans(), min_size=8, max_size=8))  # fmt: skip
@settings(max_examples=80, deadline=None)
def test_a_carry_of_arrow_rows_makes_the_batch_joining_them_makes(sizes, size, nulls) -> None:
    """The carry builds where it can and joins where it cannot (a part with
    a null midway): either way, the batch is the parts joined."""
    added, at = [], 0
    for number, rows in enumerate(sizes):
        values = [None if nulls[number] and row == 0 else at + row for row in range(rows)]
        payloads = [bytes([row]) * 17_000 for row in range(rows)]  # large rows: built
        part = pa.record_batch({"n": pa.array(values, pa.int64()),
                                "s": pa.array([str(v) for v in values], pa.string()),
                                "b": pa.array(payloads, pa.binary())})  # fmt: skip
        added.append(part.slice(0, min(size - sum(p.num_rows for p in added), rows)))
        at += rows
    carry = _Carry(size)
    for part in added:
        carry.add(part)
    if not carry.rows:
        return
    batch = carry.take()
    batch.validate(full=True)
    assert batch.equals(pa.concat_batches(added))
    assert carry.rows == 0


def test_a_carry_copies_large_rows_in_as_they_come_and_joins_small_ones() -> None:
    large = pa.record_batch({"b": pa.array([b"x" * 20_000, b"y" * 20_000]), "n": [1, 2]})
    small = pa.record_batch({"b": pa.array([b"x", b"y"]), "n": [1, 2]})
    carry = _Carry(8)
    carry.add(large)
    carry.add(large.slice(1))
    assert carry.arrow is not None
    assert (carry.arrow.num_rows, carry.parts) == (3, [])  # copied in: nothing kept
    assert carry.take().equals(pa.concat_batches([large, large.slice(1)]))
    carry.add(small)
    assert carry.parts == [small]  # kept, to be joined
    assert carry.take().equals(small)


@pytest.mark.parametrize("format", ["arrow", "parquet"])
def test_batches_of_large_rows_across_files_are_the_files_rows(tmp_path, format: str) -> None:
    """Through a Dataset: Arrow IPC and Parquet files written by pyarrow,
    rows of 20 KB, batches that span record batches and files (built as
    their parts come in) hold the files' rows in order."""
    import pyarrow.ipc
    import pyarrow.parquet as pq

    import fastio

    tables, paths = [], []
    for number in range(3):
        rows = range(5 * number, 5 * number + 5)
        table = pa.table({"key": [f"k{row}" for row in rows], "label": list(rows),
                          "data": [bytes([row]) * 20_000 for row in rows]})  # fmt: skip
        path = tmp_path / f"part-{number}.{format}"
        if format == "arrow":
            with pyarrow.ipc.new_file(path, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=3):
                    writer.write_batch(batch)
        else:
            pq.write_table(table, path, row_group_size=3)
        tables.append(table)
        paths.append(str(path))
    with fastio.Dataset(paths, format=format, shuffle=False, index_dir=tmp_path / "index") as ds:
        batches = list(ds.batches(4))
    assert [batch.num_rows for batch in batches] == [4, 4, 4, 3]
    for batch in batches:
        batch.validate(full=True)
    got = pa.Table.from_batches(batches)
    assert got.equals(pa.concat_tables(tables).combine_chunks())


def test_rows_of_a_part_after_built_arrow_rows_keep_their_order() -> None:
    """A shuffled batch may take a window's rows gathered as Arrow and then
    a window's tar samples not copied yet: the batch holds them in that
    order. (Gathered tar rows name their shard in a dictionary column, which
    the Arrow builder leaves to the join.)"""
    import io

    import webdataset

    from fastio._native import TarColumns
    from fastio.formats._parts import TarPart

    buffer = io.BytesIO()
    with webdataset.TarWriter(buffer) as sink:
        for number in range(4):
            sink.write({"__key__": f"s{number}", "bin": bytes([number]) * 20_000})
    collector = TarColumns()
    assert collector.scan(buffer.getvalue(), True).rows == 4
    part = TarPart.of(collector.detach(), "a.tar")
    carry = _Carry(8)
    gathered = part.slice(0, 2).batch()
    assert ArrowRows.building(pa, gathered, 8) is None  # the dictionary column
    carry.add(gathered)
    carry.add(part.slice(2, 2))
    assert carry.take().equals(part.batch())


@pytest.mark.parametrize("size", [0, 15, 16_383, 16_384, 100_001])
@pytest.mark.parametrize("at", [0, 1, 17])
def test_copy_into_copies_to_the_start_of_a_buffer_and_nothing_past_the_source(size, at) -> None:
    """The native copy a batch's values go through (non-temporal stores from
    16 KiB on, to a destination at any alignment): the source's bytes at the
    destination's start, the bytes around them as they were."""
    import numpy as np

    from fastio._native import copy_into

    source = np.random.default_rng(size).integers(0, 256, size, np.uint8)
    destination = np.full(size + 64, 0xAB, np.uint8)
    copy_into(destination[at:], source)
    assert bytes(destination[at : at + size]) == bytes(source)
    assert set(destination[:at].tolist() + destination[at + size :].tolist()) <= {0xAB}
    with pytest.raises(ValueError, match="do not fit"):
        copy_into(destination[: size - 1 if size else 0], np.zeros(size + 1, np.uint8))
    with pytest.raises(BufferError):
        copy_into(bytes(size), source)  # read-only


@pytest.mark.parametrize(("payload", "joined"), [(100, True), (40_000, False)],
                         ids=["small rows", "large rows"])  # fmt: skip
def test_a_window_is_joined_first_only_where_its_rows_are_small(payload, joined) -> None:
    """A shuffled window of many batches' rows: small rows are joined once
    (a gather per batch from many spans would cost more than their bytes);
    large ones are gathered batch by batch from where they were read, not
    copied whole beside the shuffle buffer first. The batches are the same."""
    import io

    import numpy as np
    import webdataset

    from fastio._native import TarColumns
    from fastio.dataset._batching import _gatherable, _take
    from fastio.formats._parts import TarPart

    buffer = io.BytesIO()
    with webdataset.TarWriter(buffer) as sink:
        for number in range(40):
            sink.write({"__key__": f"s{number}", "bin": bytes([number]) * payload})
    collector = TarColumns()
    assert collector.scan(buffer.getvalue(), True).rows == 40
    samples = collector.detach()
    assert samples.nbytes == 40 * payload  # the members' bytes
    part = TarPart.of(samples, "a.tar")
    rows = np.random.default_rng(1).permutation(40)
    ready = _gatherable(part, rows, 8)
    assert (ready is not part) == joined
    for start in range(0, 40, 8):
        batch = _take(ready, rows[start : start + 8])
        batch = batch.batch() if isinstance(batch, TarPart) else batch
        assert pa.record_batch(batch).equals(pa.record_batch(part.take(rows[start : start + 8])))
