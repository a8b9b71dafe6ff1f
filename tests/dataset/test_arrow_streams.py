"""Arrow IPC streams (no footer: what pyarrow's stream writer and Hugging Face
``datasets`` write as ``.arrow`` files) read through fastio: cached (laid out
natively), cold and over HTTP (walked message by message through the reader),
giving pyarrow's own stream reader's rows; cut and damaged streams named,
and under skip every intact row delivered and the lost ones counted."""

from __future__ import annotations

import io
import itertools
import struct
from pathlib import Path

import pyarrow as pa
import pytest

import fastio
from fastio import _native
from fastio.formats._tables import _walk_streams
from fastio.reader._reader import Reader
from tests.dataset.test_columnar import FILE_ROWS, GROUP_ROWS, _cold, _table
from tests.servers import RangeServer


def _write_streams(folder: Path, dictionary: bool = False, legacy: bool = False,
                   compression: str | None = None) -> tuple[str, list[Path]]:  # fmt: skip
    """Files of ``FILE_ROWS`` rows, record batches of ``GROUP_ROWS``, written
    by pyarrow's stream writer (``legacy``: the format before 1.0, a length
    without the continuation marker; ``compression`` of the batches' buffers);
    their pattern and paths."""
    folder.mkdir(parents=True, exist_ok=True)
    options = pa.ipc.IpcWriteOptions(use_legacy_format=legacy, compression=compression)
    paths, first = [], 0
    for number, rows in enumerate(FILE_ROWS):
        table = _table(first, rows, dictionary)
        path = folder / f"part-{number}.arrow"
        with pa.ipc.new_stream(path, table.schema, options=options) as writer:
            writer.write_table(table, max_chunksize=GROUP_ROWS)
        paths.append(path)
        first += rows
    return str(folder / f"part-{{0..{len(FILE_ROWS) - 1}}}.arrow"), paths


def _stream_rows(paths: list[Path]) -> pa.Table:
    """The files as pyarrow's own stream reader gives them (from copies of
    their bytes: a table of a file pyarrow maps would keep its pages cached)."""
    tables = []
    for path in paths:
        with pa.ipc.open_stream(pa.py_buffer(path.read_bytes())) as reader:
            tables.append(reader.read_all())
    return pa.concat_tables(tables)


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files of every range read through the reader from now on."""
    asked: list[str] = []
    read_ranges = Reader.read_ranges

    def counted(self, ranges):  # the real reads, their files noted
        asked.extend(r.path for r in ranges)
        return read_ranges(self, ranges)

    monkeypatch.setattr(Reader, "read_ranges", counted)
    return asked


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize(("dictionary", "legacy", "compression"),
                         [(False, False, None), (True, False, None), (False, True, None),
                          (False, False, "zstd")])  # fmt: skip
def test_arrow_streams_give_pyarrows_rows(tmp_path, monkeypatch, cached, dictionary, legacy,
                                          compression):  # fmt: skip
    """Streams give the rows pyarrow's stream reader gives, per sample and in
    batches of sizes that span record batches and files, dictionaries and
    compressed buffers included. Cached, they are laid out natively (nothing
    goes through the reader to lay them out); cold, by walking their
    messages through it."""
    pattern, paths = _write_streams(tmp_path, dictionary, legacy, compression)
    expected = _stream_rows(paths)
    if not cached:
        _cold(paths)
    asked = _counting_reads(monkeypatch)
    with fastio.Dataset(pattern, shuffle=False) as dataset:
        assert len(dataset) == expected.num_rows
        if cached:
            assert asked == []
        # Cold, a file is walked through the reader unless its pages came in
        # meanwhile (the open's own first reads may bring them in before the
        # layout asks): which comes first is the scheduler's, so only the
        # rows are checked.
        for size in (5, 13):
            batches = list(dataset.batches(size))
            assert [b.num_rows for b in batches[:-1]] == [size] * (len(batches) - 1)
            assert pa.Table.from_batches(batches).to_pylist() == expected.to_pylist()
        assert list(dataset) == expected.to_pylist()


@pytest.mark.parametrize(("dictionary", "legacy"), [(False, False), (True, False), (False, True)])
def test_the_native_walk_and_the_readers_agree(tmp_path, dictionary, legacy):
    """Laid out natively (cached) and through the reader, a stream has the
    same schema message and the same blocks: every message's offset and
    lengths, the record batches' rows pyarrow's reader counts."""
    _, paths = _write_streams(tmp_path, dictionary, legacy)
    scanned = _native.arrow_scan([bytes(p) for p in paths], 8 << 10, 16 << 20)
    with Reader() as reader:
        for path, scan in zip(paths, scanned, strict=True):
            assert scan is not None
            walked = _walk_streams(reader, [str(path)])[str(path)]
            assert walked is not None
            ((size, start, tail, batches, dictionaries), head, rows), problems = walked
            assert problems == []
            assert scan == (size, start, tail, head, batches, dictionaries, rows)
            assert (size, start, tail) == (path.stat().st_size, size, b"")
            with pa.ipc.open_stream(path) as reader_of_pyarrow:
                assert rows == [b.num_rows for b in reader_of_pyarrow]
            assert bool(dictionaries) == dictionary
            data = path.read_bytes()
            assert data.startswith(head)
            for offset, meta, body in batches + dictionaries:
                message = pa.ipc.read_message(pa.py_buffer(data[offset : offset + meta + body]))
                assert message.type == ("record batch" if (offset, meta, body) in batches
                                        else "dictionary")  # fmt: skip


def test_arrow_streams_over_http_give_pyarrows_rows(tmp_path, monkeypatch):
    """Streams served over HTTP, with latency on every answer, are walked
    through the reader's ranged reads and give pyarrow's rows."""
    _, paths = _write_streams(tmp_path / "served", dictionary=True)
    expected = _stream_rows(paths)
    server = RangeServer(tmp_path / "served").start()
    try:
        server.faults.latency = 0.005
        urls = [server.url(path.name) for path in paths]
        with fastio.Dataset(urls, format="arrow", shuffle=False,
                            index_dir=str(tmp_path / "index")) as dataset:  # fmt: skip
            assert len(dataset) == expected.num_rows
            batches = list(dataset.batches(6))
            assert pa.Table.from_batches(batches).to_pylist() == expected.to_pylist()
        assert server.faults.requests > 0
    finally:
        server.stop()


def test_hugging_face_datasets_arrow_files_are_read(tmp_path):
    """What ``datasets`` saves (its ``.arrow`` files are IPC streams, with
    its own schema metadata), an image dataset's struct column included,
    reads as ``datasets`` reads its Arrow rows back, per sample and in
    batches; a folder of it reads as its list of files."""
    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is a test extra")
    image = pytest.importorskip("PIL.Image", reason="pillow comes with the plot extra")
    rows = []
    for i in range(300):
        png = io.BytesIO()
        image.new("RGB", (4 + i % 7, 4), (i % 256, 7, 9)).save(png, format="PNG")
        rows.append({"text": f"sample {i} " * (i % 5), "label": i % 3, "score": i / 7,
                     "image": {"bytes": png.getvalue(), "path": None}})  # fmt: skip
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["a", "b", "c"]),
                                  "score": datasets.Value("float64"),
                                  "image": datasets.Image()})  # fmt: skip
    saved = datasets.Dataset.from_list(rows, features=features)
    saved.save_to_disk(str(tmp_path / "saved"), max_shard_size="8KB")
    files = sorted((tmp_path / "saved").glob("*.arrow"))
    assert len(files) > 1
    assert not files[0].read_bytes().startswith(b"ARROW1")  # a stream, not an IPC file
    loaded = datasets.load_from_disk(str(tmp_path / "saved")).with_format("arrow")
    expected = loaded[:].to_pylist()
    assert [row["label"] for row in expected] == [row["label"] for row in rows]
    with fastio.Dataset([str(f) for f in files], shuffle=False) as dataset:
        assert list(dataset) == expected
        assert [row for b in dataset.batches(64) for row in b.to_pylist()] == expected
    with fastio.Dataset(str(tmp_path / "saved"), format="arrow", shuffle=False) as dataset:
        assert list(dataset) == expected


def _two_streams(tmp_path: Path) -> tuple[str, Path, bytes]:
    """Two streams of 3 record batches of 3 rows (keys 0-8, then 9-17); their
    pattern, the first's path and bytes."""
    for number in range(2):
        table = pa.table({"key": range(9 * number, 9 * number + 9)})
        with pa.ipc.new_stream(tmp_path / f"part-{number}.arrow", table.schema) as writer:
            writer.write_table(table, max_chunksize=3)
    path = tmp_path / "part-0.arrow"
    return str(tmp_path / "part-{0..1}.arrow"), path, path.read_bytes()


def _message_offsets(data: bytes) -> list[int]:
    """Where each message of a stream begins (the schema's first)."""
    offsets, at = [], 0
    while at < len(data):
        length = struct.unpack_from("<i", data, at + 4)[0]
        if not length:
            break
        offsets.append(at)
        message = pa.ipc.read_message(pa.py_buffer(data[at:]))
        at += 8 + length + message.body.size
    return offsets


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("cut", ["body", "metadata"])
def test_a_cut_stream_keeps_its_intact_rows(tmp_path, cached, cut):
    """A stream cut short inside its last record batch (its body, or its
    metadata) is a TruncatedShardError naming the file and offset under
    raise. Under skip, its intact batches' rows and the other file's come,
    and the rows lost are counted: exactly, where the cut batch's header
    says how many."""
    pattern, path, data = _two_streams(tmp_path)
    last = _message_offsets(data)[-1]
    metadata = 8 + struct.unpack_from("<i", data, last + 4)[0]
    path.write_bytes(data[: last + (metadata + 4 if cut == "body" else metadata // 2)])
    if not cached:
        _cold([path])
    with (pytest.raises(fastio.TruncatedShardError, match=rf"part-0\.arrow at byte {last}"),
          fastio.Dataset(pattern, shuffle=False) as dataset):  # fmt: skip
        list(dataset)
    with fastio.Dataset(pattern, shuffle=False, on_error="skip") as dataset:
        assert [row["key"] for row in dataset] == [*range(6), *range(9, 18)]
        assert dataset.stats()["skipped"] == (3 if cut == "body" else 1)


@pytest.mark.parametrize("cached", [True, False])
def test_a_dictionary_replaced_after_a_record_batch_is_named(tmp_path, cached):
    """A stream whose dictionary is replaced after its first record batch
    (which pyarrow's stream writer does when a batch's dictionary differs)
    is a DecodeError saying so; under skip, the batches before it come."""
    schema = pa.schema([("kind", pa.dictionary(pa.int32(), pa.string()))])
    path = tmp_path / "part-0.arrow"
    with pa.ipc.new_stream(path, schema) as writer:
        for words in (["cat", "dog"], ["eel", "fox", "gnu"]):
            kinds = pa.DictionaryArray.from_arrays(pa.array(range(len(words)), pa.int32()), words)
            writer.write_batch(pa.record_batch([kinds], schema=schema))
    if not cached:
        _cold([path])
    with (pytest.raises(fastio.DecodeError, match="replaces or extends a dictionary"),
          fastio.Dataset(str(path), shuffle=False) as dataset):  # fmt: skip
        list(dataset)
    with fastio.Dataset(str(path), shuffle=False, on_error="skip") as dataset:
        assert [row["kind"] for row in dataset] == ["cat", "dog"]
        assert dataset.stats()["skipped"] == 1


def test_a_file_neither_arrow_file_nor_stream_is_named(tmp_path):
    """A file that neither ends with the Arrow file footer nor begins with a
    schema message is a DecodeError naming it; under skip, it is left out."""
    pattern, path, _ = _two_streams(tmp_path)
    path.write_bytes(b"\x00\x01 not arrow at all" * 10)
    with (pytest.raises(fastio.DecodeError, match=r"part-0\.arrow.*not an Arrow IPC file"),
          fastio.Dataset(pattern, shuffle=False) as dataset):  # fmt: skip
        list(dataset)
    with fastio.Dataset(pattern, shuffle=False, on_error="skip") as dataset:
        assert [row["key"] for row in dataset] == list(range(9, 18))
        assert dataset.stats()["shards_skipped"] == 1


@pytest.mark.parametrize("stream", [True, False])
def test_a_schema_with_two_fields_of_one_name_is_a_decode_error(tmp_path, stream):
    """Two columns of one name (which Arrow allows) would leave a row, a
    dict, with one of them: a DecodeError naming the file; under skip, its
    rows are counted and the other file's come."""
    for number in range(2):
        names = ["key", "key"] if number == 0 else ["key", "other"]
        table = pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=names)
        path = tmp_path / f"part-{number}.arrow"
        with (pa.ipc.new_stream if stream else pa.ipc.new_file)(path, table.schema) as writer:
            writer.write_table(table)
    pattern = str(tmp_path / "part-{0..1}.arrow")
    with (pytest.raises(fastio.DecodeError, match=r"part-0\.arrow.*two fields named 'key'"),
          fastio.Dataset(pattern, shuffle=False) as dataset):  # fmt: skip
        list(dataset)
    for read in (list, lambda d: [row for b in d.batches(3) for row in b.to_pylist()]):
        with fastio.Dataset(pattern, shuffle=False, on_error="skip") as dataset:
            assert read(dataset) == [{"key": 1, "other": 3}, {"key": 2, "other": 4}]
            assert dataset.stats()["skipped"] == 2


def test_small_record_batches_are_read_in_runs_of_a_megabyte(tmp_path):
    """A file's small record batches (100 rows of 1 KB, as ``datasets``
    writes binary rows) are read and handed over in runs of about 1 MiB,
    each closed by the batch that takes it past 1 MiB: the same runs local
    and over HTTP (a seed gives one order wherever the files are), read as
    one range locally and as a range per record batch over HTTP (each
    decoded as soon as it is in). Either way the rows are pyarrow's."""
    from fastio.formats._shards import make_format

    table = pa.table({"data": [bytes([i % 251]) * 1000 for i in range(4000)]})
    for name in ("part-0.arrow", "part-1.arrow"):
        with pa.ipc.new_stream(tmp_path / name, table.schema) as writer:
            writer.write_table(table, max_chunksize=100)
    server = RangeServer(tmp_path).start()
    try:
        with Reader() as reader:
            local = make_format("arrow").layout(reader, str(tmp_path / "part-0.arrow"), False)[0]
            remote = make_format("arrow").layout(reader, server.url("part-1.arrow"), False)[0]
        sizes = local.meta["batch_sizes"]
        assert len(sizes) == 40
        starts = local.meta["unit_batches"]
        assert 1 < len(starts) - 1 < 40
        assert remote.meta["unit_batches"] == starts
        assert list(remote.bounds) == list(local.bounds)
        assert len(local.meta["unit_ranges"](0)) == 1
        assert len(remote.meta["unit_ranges"](0)) == starts[1] - starts[0]
        for a, b in itertools.pairwise(starts):
            held = sum(sizes[a:b])
            assert held - sizes[b - 1] < 1 << 20 <= held or b == len(sizes)
        urls = [str(tmp_path / "part-0.arrow"), server.url("part-1.arrow")]
        with fastio.Dataset(urls, format="arrow", shuffle=False) as dataset:
            rows = [row for batch in dataset.batches(256) for row in batch.to_pylist()]
        assert rows == table.to_pylist() * 2
    finally:
        server.stop()


def test_remote_streams_are_walked_together(tmp_path, monkeypatch):
    """The streams of a group of remote files are walked together: a step
    of reads for all of them per message (each message's place follows from
    the last one's), not a read per message of each file, and their rows
    are pyarrow's."""
    files, batches = 6, 5
    table = pa.table({"data": [bytes([i % 251]) * 1000 for i in range(100 * batches)]})
    for number in range(files):
        with pa.ipc.new_stream(tmp_path / f"part-{number}.arrow", table.schema) as writer:
            writer.write_table(table, max_chunksize=100)  # bodies past a first read's 64 KiB
    asked: list[int] = []
    read_ranges = Reader.read_ranges

    def counted(self, ranges):  # the real reads, each call's ranges counted
        asked.append(len(ranges))
        return read_ranges(self, ranges)

    server = RangeServer(tmp_path).start()
    try:
        monkeypatch.setattr(Reader, "read_ranges", counted)
        urls = [server.url(f"part-{number}.arrow") for number in range(files)]
        with fastio.Dataset(urls, format="arrow", shuffle=False,
                            index_dir=str(tmp_path / "index")) as dataset:  # fmt: skip
            assert len(dataset) == files * table.num_rows
            # The tails, then a step per message (schema, batches, end marker).
            assert len(asked) <= 1 + batches + 2
            assert max(asked) == files
            rows = [row for batch in dataset.batches(64) for row in batch.to_pylist()]
        assert rows == table.to_pylist() * files
    finally:
        server.stop()
