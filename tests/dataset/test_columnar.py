"""Parquet and Arrow IPC files written by pyarrow, read through fastio: the
same values pyarrow's own readers give, in batches of any size across row
groups and files, with column selection and shuffle."""

from __future__ import annotations

import gc
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastio
from fastio.formats._shards import make_format
from tests.pagecache import drop_pages

# Row groups / record batches of a few rows and files of different lengths:
# every batch size below spans groups, and most span files.
GROUP_ROWS = 7
FILE_ROWS = (23, 5, 40)


def _table(first: int, rows: int, dictionary: bool) -> pa.Table:
    rng = random.Random(first)
    keys = [f"k{first + i:04d}" for i in range(rows)]
    columns = {
        "key": pa.array(keys),
        "label": pa.array([rng.randrange(1000) for _ in range(rows)], pa.int64()),
        "data": pa.array([rng.randbytes(rng.randrange(0, 3000)) for _ in range(rows)]),
    }
    if dictionary:
        columns["kind"] = pa.array(
            [("cat", "dog", "eel")[i % 3] for i in range(rows)]
        ).dictionary_encode()
    return pa.table(columns)


def _write(folder: Path, format_name: str, dictionary: bool = False) -> tuple[str, pa.Table]:
    """Files of ``format_name`` written by pyarrow; their pattern and all rows."""
    folder.mkdir(parents=True, exist_ok=True)
    tables, first = [], 0
    for number, rows in enumerate(FILE_ROWS):
        table = _table(first, rows, dictionary)
        path = folder / f"part-{number}.{format_name}"
        if format_name == "parquet":
            pq.write_table(table, path, row_group_size=GROUP_ROWS)
        else:
            with pa.ipc.new_file(path, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=GROUP_ROWS):
                    writer.write_batch(batch)
        tables.append(table)
        first += rows
    return str(folder / f"part-{{0..{len(FILE_ROWS) - 1}}}.{format_name}"), pa.concat_tables(tables)


def _write_whole(path: Path, table: pa.Table) -> None:
    """``table`` as one file of the format its suffix names, pyarrow's defaults."""
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)


def _pyarrow_reads(folder: Path, format_name: str) -> pa.Table:
    """The files as pyarrow's own readers give them."""
    tables = []
    for number in range(len(FILE_ROWS)):
        path = folder / f"part-{number}.{format_name}"
        if format_name == "parquet":
            tables.append(pq.ParquetFile(path).read())
        else:
            with pa.ipc.open_file(path) as reader:
                tables.append(reader.read_all())
    return pa.concat_tables(tables)


CASES = [("parquet", False), ("arrow", False), ("arrow", True)]


@pytest.mark.parametrize(("format_name", "dictionary"), CASES)
@pytest.mark.parametrize("batch_size", [1, 5, GROUP_ROWS, 13, 200])
def test_batches_of_any_size_are_pyarrows_rows(tmp_path, format_name, dictionary, batch_size):
    pattern, _ = _write(tmp_path, format_name, dictionary)
    expected = _pyarrow_reads(tmp_path, format_name)
    with fastio.Dataset(pattern, shuffle=False) as dataset:
        batches = list(dataset.batches(batch_size))
    assert all(isinstance(batch, pa.RecordBatch) for batch in batches)
    sizes = [batch.num_rows for batch in batches]
    total = expected.num_rows
    assert sizes == [batch_size] * (total // batch_size) + (
        [total % batch_size] if total % batch_size else []
    )
    got = pa.Table.from_batches(batches)
    assert got.equals(expected.cast(got.schema) if dictionary else expected)


@pytest.mark.parametrize("format_name", ["parquet", "arrow"])
def test_footers_and_schemas_longer_than_the_first_read_are_read_whole(tmp_path, format_name):
    """A local file's footer (and an Arrow file's schema message) is read
    from a first few KiB; one of hundreds of long column names is longer,
    and is read again whole: the rows are pyarrow's, and an Arrow file's
    layout knows its schema (its batches decode from their own bytes)."""
    names = [
        f"a_column_with_a_rather_long_name_to_make_the_schema_large_{i:04d}" for i in range(300)
    ]
    tables = [pa.table({name: pa.array([n * 10 + i for i in range(10)]) for name in names})
              for n in range(2)]  # fmt: skip
    for number, table in enumerate(tables):
        _write_whole(tmp_path / f"wide-{number}.{format_name}", table)
    assert len(tables[0].schema.serialize()) > 16 << 10  # past the first read
    with fastio.Dataset(str(tmp_path / f"wide-{{0..1}}.{format_name}"), shuffle=False) as dataset:
        batches = list(dataset.batches(10))
    assert pa.Table.from_batches(batches).equals(pa.concat_tables(tables))
    if format_name == "arrow":  # decoded from the batch's own bytes and the schema read
        with fastio.Reader() as reader:
            layout, _ = make_format("arrow").layout(reader, str(tmp_path / "wide-0.arrow"), False)
        assert layout.meta["schema"].equals(tables[0].schema)


@pytest.mark.parametrize("format_name", ["parquet", "arrow"])
@pytest.mark.parametrize("second", ["metadata", "null column"])
def test_a_batch_across_files_of_other_schemas_is_pyarrows_join(tmp_path, format_name, second):
    """A batch that takes rows of two files whose schemas differ (in their
    metadata, or a column all null in one of them) holds the rows as
    pyarrow joins the two tables (promoting the null column); batches within
    one file keep its schema."""
    first = pa.table({"key": [f"a{i}" for i in range(6)], "note": [f"n{i}" for i in range(6)]})
    if second == "metadata":
        other = pa.table({"key": [f"b{i}" for i in range(5)], "note": ["x"] * 5},
                         metadata={"writer": "another"})  # fmt: skip
    else:
        other = pa.table({"key": [f"b{i}" for i in range(5)], "note": pa.nulls(5)})
    for number, table in enumerate((first, other)):
        _write_whole(tmp_path / f"mixed-{number}.{format_name}", table)
    pattern = str(tmp_path / f"mixed-{{0..1}}.{format_name}")
    with fastio.Dataset(pattern, shuffle=False) as dataset:
        batches = list(dataset.batches(4))
    assert [batch.num_rows for batch in batches] == [4, 4, 3]
    expected = pa.concat_tables([first, other], promote_options="default")
    assert [row for batch in batches for row in batch.to_pylist()] == expected.to_pylist()
    assert batches[1].schema.field("note").type == pa.string()  # the join's, promoted


def _served_arrow(folder: Path, units: int, rows: int) -> tuple[pa.Table, list[int]]:
    """An Arrow file of ``units`` record batches of ``rows`` rows of 2 KB in
    ``folder``: its rows and each record batch's first byte."""
    table = pa.table({"data": [bytes([i % 251]) * 2000 for i in range(units * rows)]})
    sink = pa.BufferOutputStream()
    starts = []
    with pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=rows):
            starts.append(sink.tell())
            writer.write_batch(batch)
    folder.mkdir()
    (folder / "part.arrow").write_bytes(sink.getvalue().to_pybytes())
    return table, starts


@pytest.mark.parametrize(("units", "held", "batch"), [(4, 1, 20), (64, 40, 10)])
def test_a_stored_order_batch_comes_before_the_rest_of_its_read(tmp_path, units, held, batch):
    """In stored order a batch is handed out as soon as its rows are decoded,
    not once its whole read is: the batches of a remote Arrow file's first
    ``held`` record batches come while the server holds back every request
    past them, though a read goes on past them (the file's one read of its
    4 record batches; of 64, the window that starts at the 29th: windows
    double); the rest follow once it lets them go."""
    from tests.servers import RangeServer

    rows = 20 if units > 4 else 40
    table, starts = _served_arrow(tmp_path / "data", units, rows)
    server = RangeServer(tmp_path / "data").start()
    try:
        dataset = fastio.Dataset(server.url("part.arrow"), shuffle=False, read_size=16 << 10)
        batches = iter(dataset.batches(batch))
        server.faults.hold = lambda name, offset: offset >= starts[held]
        first: list[pa.RecordBatch] = []
        wanted = held * rows // batch

        def take() -> None:
            first.extend(next(batches) for _ in range(wanted))

        taker = threading.Thread(target=take)
        taker.start()
        taker.join(30)
        try:
            assert len(first) == wanted, "a batch waited for the rest of its read"
        finally:
            server.faults.hold = None
        taker.join(30)
        rest = list(batches)
        assert pa.Table.from_batches(first + rest).equals(table)
        dataset.close()
    finally:
        server.stop()


def test_an_arrow_record_batch_is_decoded_where_the_reader_read_it(tmp_path):
    """A local record batch is read whole and decoded in place: a batch of
    its rows holds no Arrow memory of its own (the one copy is the read),
    and it outlives the dataset, its bytes intact."""
    rows, size = 50, 8 << 10
    table = pa.table({"data": [bytes([i]) * size for i in range(4 * rows)]})
    path = tmp_path / "part.arrow"
    with pa.ipc.new_file(path, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=rows):
            writer.write_batch(batch)
    kept = []
    with fastio.Dataset(str(path), shuffle=False) as dataset:
        base = pa.total_allocated_bytes()  # the table written
        for batch in dataset.batches(rows):
            kept.append(batch)
            # Arrow memory allocated while the batches are kept: not their bytes.
            assert pa.total_allocated_bytes() - base < rows * size // 2
    del dataset
    gc.collect()
    assert len(kept) == 4
    assert pa.Table.from_batches(kept).equals(table)


@pytest.mark.parametrize("format_name", ["parquet", "arrow"])
def test_laying_out_many_files_waits_for_a_few_reads_not_one_per_file(
    tmp_path, monkeypatch, format_name
):
    """Footers (and an Arrow file's schema and batch headers after them) are
    read for a group of files in one stream each."""
    from fastio.reader._reader import Reader

    files = 12
    for number in range(files):
        _write_whole(tmp_path / f"part-{number:02d}.{format_name}", _table(number * 5, 5, False))
    streams = []
    stream = Reader.stream

    def counted(self, shards, *args, **kwargs):  # the real stream, counted
        streams.append(shards)
        return stream(self, shards, *args, **kwargs)

    monkeypatch.setattr(Reader, "stream", counted)
    with fastio.Dataset(str(tmp_path / f"part-{{00..{files - 1}}}.{format_name}"),
                        shuffle=False) as dataset:  # fmt: skip
        assert len(dataset) == 5 * files
        assert len(streams) <= 2
        rows = [row for batch in dataset.batches(7) for row in batch.to_pylist()]
    assert len(rows) == 5 * files


def _cold(paths: list[Path]) -> None:
    """Drop the files' pages from the page cache (skips where it keeps them)."""
    if any(drop_pages(str(path)) > 0 for path in paths):
        pytest.skip("this filesystem keeps every page cached (tmpfs)")


@pytest.mark.parametrize(("format_name", "cached"),
                         [("parquet", True), ("arrow", True), ("arrow", False)])  # fmt: skip
def test_footers_longer_than_the_first_read_are_read_again_together(
    tmp_path, monkeypatch, format_name, cached
):
    """Footers (and Arrow schemas) longer than the first bytes read of each
    file are read again for the group of files at once, not file by file;
    cached Arrow files are read and parsed natively, with no read through
    the reader, their long footers and schemas as whole."""
    from fastio.reader._reader import Reader

    files = 12
    names = [
        f"a_column_with_a_rather_long_name_to_make_the_footer_large_{i:04d}" for i in range(300)
    ]
    paths = [tmp_path / f"wide-{number:02d}.{format_name}" for number in range(files)]
    for number, path in enumerate(paths):
        table = pa.table({name: pa.array([number, number + 1]) for name in names})
        _write_whole(path, table)
    if not cached:
        _cold(paths)
    calls = []
    read_ranges = Reader.read_ranges

    def counted(self, ranges):  # the real reads, counted
        calls.append(len(ranges))
        return read_ranges(self, ranges)

    monkeypatch.setattr(Reader, "read_ranges", counted)
    with fastio.Dataset(str(tmp_path / f"wide-{{00..{files - 1}}}.{format_name}"),
                        shuffle=False) as dataset:  # fmt: skip
        assert len(dataset) == 2 * files
        # Tails, longer tails; an Arrow file's heads and headers, longer heads.
        if format_name == "parquet":
            assert calls == [files] * 2
        elif cached:
            assert calls == []
        else:  # each step for all the files not in the page cache at once, not file by file
            # (the open's own first reads may bring some in before the layout asks)
            cold = calls[0] if calls else 0
            assert calls == ([cold] * 2 + [2 * cold, cold] if cold else [])
            assert cold <= files
        rows = [row for batch in dataset.batches(5) for row in batch.to_pylist()]
    assert [row[names[-1]] for row in rows] == [n + i for n in range(files) for i in range(2)]


@pytest.mark.parametrize("format_name", ["parquet", "arrow"])
def test_a_file_without_the_footer_magic_is_not_read_again_for_a_footer(tmp_path, monkeypatch,
                                                                         format_name):  # fmt: skip
    """A file that is not of its format, whose last bytes happen to read as a
    long footer's length, is named as such from its first tail read: its
    tail is not read again for a footer it does not have."""
    from fastio.reader._reader import Reader

    _write_whole(tmp_path / f"part-0.{format_name}", _table(0, 5, False))
    other = bytearray(random.Random(3).randbytes(200_000))
    other[-8:] = (150_000).to_bytes(4, "little") + b"XXXX"
    (tmp_path / f"part-1.{format_name}").write_bytes(bytes(other))
    tails = []
    read_ranges = Reader.read_ranges

    def counted(self, ranges):  # the real reads, those of the other file's end noted
        tails.extend(r.length for r in ranges if r.path.endswith("part-1." + format_name)
                     and r.offset + r.length == len(other))  # fmt: skip
        return read_ranges(self, ranges)

    monkeypatch.setattr(Reader, "read_ranges", counted)
    with pytest.raises(fastio.DecodeError, match=f"part-1.{format_name}.*not an? "):
        fastio.Dataset(str(tmp_path / f"part-{{0..1}}.{format_name}"), shuffle=False)
    assert tails == [8 << 10]


@pytest.mark.parametrize("cached", [True, False])
def test_a_damaged_schema_length_is_not_read_again(tmp_path, monkeypatch, cached):
    """An Arrow file of 18 MB whose schema message claims 2 GiB (damaged) is
    not read again from its start for it, which would read the whole file
    twice: its rows come from the footer's schema. Cached, it is laid out
    natively, without a read through the reader."""
    from fastio.reader._reader import Reader

    path = tmp_path / "part.arrow"
    table = pa.table({"data": [bytes([i]) * (1 << 20) for i in range(18)]})
    with pa.ipc.new_file(path, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=3):
            writer.write_batch(batch)
    data = bytearray(path.read_bytes())
    assert data[8:12] == b"\xff\xff\xff\xff"  # the continuation marker, then the length
    data[12:16] = (0x7FFFFFF0).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    if not cached:
        _cold([path])
    heads = []
    read_ranges = Reader.read_ranges

    def counted(self, ranges):  # the real reads, those of the file's start noted
        heads.extend(r.length for r in ranges if r.offset == 0)
        return read_ranges(self, ranges)

    monkeypatch.setattr(Reader, "read_ranges", counted)
    with fastio.Dataset(str(path), shuffle=False) as dataset:
        got = pa.Table.from_batches(list(dataset.batches(3)))
    # The first 8 KiB, once, where the file is still cold when laid out (the
    # open's own first reads may bring it in before: then none).
    assert heads == [] if cached else heads in ([], [8 << 10])
    assert got.equals(table)


def test_cached_arrow_files_are_laid_out_natively_as_pyarrow_reads_them(tmp_path):
    """The native scan of cached Arrow IPC files gives each file's record
    batches (offsets, rows) and dictionaries as pyarrow's reader counts them,
    its footer and schema message whole; a cold file, a file of another
    format, a cut one and a missing one it leaves to the reader (None)."""
    import os

    from fastio import _native

    plain, dictionaries, wide, cut, other, cold = (
        tmp_path / name for name in ("plain.arrow", "dict.arrow", "wide.arrow", "cut.arrow",
                                     "other.parquet", "cold.arrow"))  # fmt: skip
    _write(tmp_path / "p", "arrow")
    _write(tmp_path / "d", "arrow", dictionary=True)
    (tmp_path / "p" / "part-2.arrow").rename(plain)
    (tmp_path / "d" / "part-2.arrow").rename(dictionaries)
    names = [f"a_long_column_name_{i:04d}_to_make_the_schema_and_footer_large" for i in range(400)]
    _write_whole(wide, pa.table({name: pa.array([1, 2, 3]) for name in names}))
    cut.write_bytes(plain.read_bytes()[:-100])
    _write_whole(other, _table(0, 5, False))
    cold.write_bytes(plain.read_bytes())
    keeps_pages = drop_pages(str(cold)) > 0  # tmpfs: nothing leaves the page cache
    paths = [plain, dictionaries, wide, cut, other, cold, tmp_path / "missing.arrow"]
    found = _native.arrow_scan([os.fsencode(path) for path in paths], 8 << 10, 16 << 20)
    assert found[3:5] == [None, None]
    assert found[6] is None
    assert (found[5] is None) != keeps_pages
    for path, scan in zip(paths[:3], found[:3], strict=True):
        assert scan is not None
        size, start, tail, head, batches, dicts, rows = scan
        data = path.read_bytes()
        assert size == len(data)
        assert tail == data[start:]
        assert len(tail) == int.from_bytes(tail[-10:-6], "little") + 10  # the footer on
        assert head == data[: 16 + int.from_bytes(head[12:16], "little")]  # to the schema's end
        with pa.ipc.open_file(path) as reader:
            assert rows == [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        for offset, meta, body in batches:
            assert data[offset : offset + 4] == b"\xff\xff\xff\xff"
            assert offset + meta + body <= size
        assert (len(dicts) > 0) == (path == dictionaries)
    assert len(found[2][2]) > 8 << 10  # read again, whole
    assert len(found[2][3]) > 8 << 10


@pytest.mark.parametrize("dictionary", [False, True])
def test_cached_and_cold_arrow_files_laid_out_together_give_pyarrows_rows(
    tmp_path, monkeypatch, dictionary
):
    """Of a dataset's Arrow files, the cached ones are laid out natively and
    the cold one through the reader, in the same group: the rows, batched
    and per sample, are pyarrow's, and only the cold file is read through
    the reader to lay it out."""
    from fastio.reader._reader import Reader

    pattern, _ = _write(tmp_path, "arrow", dictionary)
    expected = _pyarrow_reads(tmp_path, "arrow")
    cold = tmp_path / "part-1.arrow"
    _cold([cold])
    asked = []
    read_ranges = Reader.read_ranges

    def counted(self, ranges):  # the real reads, their files noted
        asked.extend(r.path for r in ranges)
        return read_ranges(self, ranges)

    monkeypatch.setattr(Reader, "read_ranges", counted)
    with fastio.Dataset(pattern, shuffle=False) as dataset:
        # Only the cold file, where it is still cold when laid out (the
        # open's own first reads may bring it in before).
        assert set(asked) <= {str(cold)}
        assert len(dataset) == expected.num_rows
        batches = pa.Table.from_batches(list(dataset.batches(6)))
        assert batches.to_pylist() == expected.to_pylist()
        assert list(dataset) == expected.to_pylist()


def test_a_record_batch_whose_offsets_are_damaged_is_a_decode_error(tmp_path):
    """A record batch whose offsets point outside its data decodes (pyarrow
    checks the sizes of its buffers, not what they hold), but reading its rows
    would read outside them: a DecodeError naming the file and the batch;
    under skip, the other batch's rows come and the damaged one's are counted."""
    import struct

    path = tmp_path / "part.arrow"
    schema = pa.schema([("key", pa.int64()), ("data", pa.binary())])
    with pa.ipc.new_file(path, schema) as writer:
        for first in (0, 3):
            writer.write_batch(pa.record_batch(
                [pa.array(range(first, first + 3)), pa.array([b"ab", b"cd", b"ef"])],
                schema=schema))  # fmt: skip
    data = bytearray(path.read_bytes())
    offsets = struct.pack("<4i", 0, 2, 4, 6)
    second = data.index(offsets, data.index(offsets) + 1)  # the second batch's
    data[second + 8 : second + 12] = struct.pack("<i", 1 << 30)
    path.write_bytes(bytes(data))
    for rows in (lambda d: list(d), lambda d: [r for b in d.batches(2) for r in b.to_pylist()]):
        with (fastio.Dataset(str(path), shuffle=False) as dataset,
              pytest.raises(fastio.DecodeError, match=r"part\.arrow.*record batch 1")):  # fmt: skip
            rows(dataset)
        with fastio.Dataset(str(path), shuffle=False, on_error="skip") as dataset:
            assert [row["key"] for row in rows(dataset)] == [0, 1, 2]
            assert dataset.stats()["skipped"] == 3


def _damaged_pair(tmp_path: Path, damage: Callable[[bytearray], None]) -> tuple[str, str]:
    """Two Arrow files of 3 rows each (keys 0-2, then 3-5), the first damaged
    by ``damage``; their pattern and the damaged file's path."""
    for number in range(2):
        _write_whole(tmp_path / f"part-{number}.arrow",
                     pa.table({"key": range(3 * number, 3 * number + 3)}))  # fmt: skip
    path = tmp_path / "part-0.arrow"
    data = bytearray(path.read_bytes())
    damage(data)
    path.write_bytes(bytes(data))
    return str(tmp_path / "part-{0..1}.arrow"), str(path)


def _a_damaged_file_is_named_and_skipped(pattern: str, path: str, what: str) -> None:
    """Under raise, a DecodeError naming ``path`` and ``what``; under skip, the
    other file's rows, and the damaged one counted as skipped."""
    with (pytest.raises(fastio.DecodeError, match=what) as caught,
          fastio.Dataset(pattern, shuffle=False) as dataset):  # fmt: skip
        list(dataset)  # the error comes at open (the footer) or as the rows are read
    assert path in str(caught.value)
    with fastio.Dataset(pattern, shuffle=False, on_error="skip") as dataset:
        assert [row["key"] for row in dataset] == [3, 4, 5]
        assert dataset.stats()["shards_skipped"] + dataset.stats()["skipped"] >= 1


def test_a_footer_block_of_negative_length_is_a_decode_error(tmp_path):
    """A footer whose record batch block claims a negative metadata length
    names the file (not a ValueError about a byte range)."""
    import struct

    def damage(data: bytearray) -> None:
        first = data.index(b"\xff\xff\xff\xff", 16)  # the record batch's message
        block = data.rindex(struct.pack("<q", first))  # its block in the footer
        data[block + 8 : block + 12] = struct.pack("<i", -60)

    pattern, path = _damaged_pair(tmp_path, damage)
    _a_damaged_file_is_named_and_skipped(pattern, path, "Arrow footer is damaged")


def test_a_record_batch_of_negative_rows_is_a_decode_error(tmp_path):
    """A record batch header whose row count was damaged into a negative
    number names the file, at open."""
    import struct

    def damage(data: bytearray) -> None:
        first = data.index(b"\xff\xff\xff\xff", 16)  # the record batch's message
        rows = data.index(struct.pack("<q", 3), first)  # its header's length
        data[rows : rows + 8] = struct.pack("<q", -5)

    pattern, path = _damaged_pair(tmp_path, damage)
    _a_damaged_file_is_named_and_skipped(pattern, path, "record batch header is damaged")


def test_a_dictionary_index_out_of_range_is_a_decode_error(tmp_path):
    """A dictionary-encoded column whose index was damaged past its
    dictionary: a DecodeError naming the file and the record batch (the
    rows' reader raised pyarrow's ArrowIndexError before), its rows skipped
    under skip."""
    import struct

    path = tmp_path / "part-0.arrow"
    kinds = pa.array(["cat", "dog", "eel", "cat", "dog"]).dictionary_encode()
    _write_whole(path, pa.table({"key": pa.array(range(5), pa.int64()), "kind": kinds}))
    _write_whole(tmp_path / "part-1.arrow", pa.table({
        "key": pa.array(range(5, 8), pa.int64()),
        "kind": pa.array(["eel", "cat", "dog"]).dictionary_encode()}))  # fmt: skip
    data = bytearray(path.read_bytes())
    indices = data.index(struct.pack("<5i", 0, 1, 2, 0, 1))
    data[indices + 8 : indices + 12] = struct.pack("<i", 100)
    path.write_bytes(bytes(data))
    pattern = str(tmp_path / "part-{0..1}.arrow")
    with (pytest.raises(fastio.DecodeError, match=r"record batch 0.*out of bounds") as caught,
          fastio.Dataset(pattern, shuffle=False) as dataset):  # fmt: skip
        list(dataset)
    assert str(path) in str(caught.value)
    with fastio.Dataset(pattern, shuffle=False, on_error="skip") as dataset:
        assert [row["key"] for row in dataset] == [5, 6, 7]
        assert dataset.stats()["skipped"] == 5


def test_a_schema_whose_names_are_not_utf8_is_a_decode_error(tmp_path):
    """A schema whose field name was damaged into bytes that are not UTF-8
    decodes in pyarrow, which fails on the name only when the rows are read:
    here, before any row, a DecodeError naming the file."""

    def damage(data: bytearray) -> None:
        data[:] = data.replace(b"key", b"\xebey")  # in the schema message and the footer

    pattern, path = _damaged_pair(tmp_path, damage)
    _a_damaged_file_is_named_and_skipped(pattern, path, "Arrow footer does not decode")


@pytest.mark.parametrize(("format_name", "dictionary"), CASES)
def test_samples_and_selected_columns_are_pyarrows(tmp_path, format_name, dictionary):
    pattern, _ = _write(tmp_path, format_name, dictionary)
    expected = _pyarrow_reads(tmp_path, format_name)
    with fastio.Dataset(pattern, shuffle=False) as dataset:
        assert list(dataset) == expected.to_pylist()
    with fastio.Dataset(pattern, shuffle=False, columns=["data", "key"]) as dataset:
        batches = list(dataset.batches(9))
    got = pa.Table.from_batches(batches)
    assert sorted(got.schema.names) == ["data", "key"]  # in the file's order or the asked one
    assert got.select(["key", "data"]).to_pylist() == expected.select(["key", "data"]).to_pylist()


@pytest.mark.parametrize("format_name", ["parquet", "arrow"])
def test_shuffled_batches_hold_every_row_once(tmp_path, format_name):
    pattern, _ = _write(tmp_path, format_name)
    expected = _pyarrow_reads(tmp_path, format_name).to_pylist()
    # A buffer of a few row groups: several windows, each in its own order.
    with fastio.Dataset(pattern, shuffle=True, shuffle_buffer=20_000, seed=3) as dataset:
        rows = [row for batch in dataset.batches(11) for row in batch.to_pylist()]
    assert len(rows) == len(expected)
    assert rows != expected
    assert sorted(rows, key=lambda row: row["key"]) == expected


@pytest.mark.parametrize("format_name", ["parquet", "arrow"])
def test_many_files_one_damaged_footer(tmp_path, format_name):
    """More files than one read-ahead of footers holds: each laid out from
    its own footer, and one whose footer is cut off (in a later group) is
    left out under warn, naming it, with every other file's rows delivered."""
    files, rows_each = 70, 3
    expected = []
    for number in range(files):
        table = _table(number * rows_each, rows_each, dictionary=False)
        path = tmp_path / f"part-{number:02d}.{format_name}"
        _write_whole(path, table)
        if number == 66:
            path.write_bytes(path.read_bytes()[:-3])  # the footer's magic cut off
        else:
            expected.extend(table.to_pylist())
    pattern = str(tmp_path / f"part-{{00..{files - 1}}}.{format_name}")
    with pytest.raises(fastio.DecodeError, match="part-66"):
        fastio.Dataset(pattern, shuffle=False)
    with (
        pytest.warns(fastio.SkippedSamplesWarning, match="part-66"),
        fastio.Dataset(pattern, shuffle=False, on_error="warn") as dataset,
    ):
        rows = [row for batch in dataset.batches(8) for row in batch.to_pylist()]
    assert rows == expected
