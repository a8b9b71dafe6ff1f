"""fastio-bench gen: every format read back by a reader that is not fastio's."""

from __future__ import annotations

import contextlib
import gzip
import json
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fastio
from fastio.cli import main
from fastio.cli._gen import FORMATS, DatasetPlan, GenResult, write_dataset
from fastio.formats._webdataset import tar_header

SAMPLES, SIZE, SHARDS, SEED, CLASSES = 47, 700, 3, 5, 10
JITTER = 0.2
FIXED_ROWS = ("npy", "fixed")

Samples = dict[str, tuple[int, bytes]]  # key -> (label, payload)


def generate(folder: Path, format: str, **options: object) -> GenResult:
    arguments: dict[str, object] = {
        "samples": SAMPLES,
        "sample_size": SIZE,
        "shards": SHARDS,
        "seed": SEED,
        "classes": CLASSES,
        "size_jitter": 0.0 if format in FIXED_ROWS else JITTER,
    }
    arguments.update(options)
    return write_dataset(folder, format, **arguments)


def read_webdataset(url: str) -> Samples:
    """Samples as the webdataset package's pipeline reads them: its URL
    expansion, tar iterator and grouping by key. The files are opened here, as
    ``WebDataset`` leaves them for the garbage collector to close (a
    ResourceWarning, so an error under pytest's filterwarnings)."""
    from webdataset.shardlists import expand_urls
    from webdataset.tariterators import group_by_keys, tar_file_expander

    with contextlib.ExitStack() as stack:
        sources = [
            {"url": path, "stream": stack.enter_context(open(path, "rb"))}
            for path in expand_urls(url)
        ]
        return {
            sample["__key__"]: (int(sample["cls"]), sample["bin"])
            for sample in group_by_keys(tar_file_expander(sources))
        }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Samples:
    """The samples as the webdataset package reads them: what every other
    format must hold too (same seed, same samples)."""
    return read_webdataset(generate(tmp_path_factory.mktemp("reference"), "webdataset").url)


def check_requested(samples: Samples, size_jitter: float = JITTER) -> None:
    assert len(samples) == SAMPLES
    per_shard = [0] * SHARDS
    for key, (label, payload) in samples.items():
        shard, index = int(key[:6]), int(key[6:])
        assert len(key) == 14
        assert index == per_shard[shard]  # in order, numbered from 0 in each shard
        per_shard[shard] += 1
        assert 0 <= label < CLASSES
        low, high = SIZE * (1 - size_jitter), SIZE * (1 + size_jitter)
        assert low - 1 <= len(payload) <= high + 1
    assert per_shard == [15, 16, 16]  # samples split evenly, the remainder at the end
    payloads = [payload for _, payload in samples.values()]
    assert len(set(payloads)) == SAMPLES, "payloads repeat"
    assert len({label for label, _ in samples.values()}) > 1
    if size_jitter:
        assert len({len(p) for p in payloads}) > 1, "sizes do not vary"


def test_webdataset_as_the_webdataset_package_reads_it(reference: Samples) -> None:
    check_requested(reference)


def test_webdataset_as_tarfile_reads_it(tmp_path: Path, reference: Samples) -> None:
    result = generate(tmp_path, "webdataset")
    assert result.paths == tuple(str(tmp_path / f"webdataset-{i:05d}.tar") for i in range(3))
    assert result.url == f"{tmp_path}/webdataset-{{00000..00002}}.tar"
    names = []
    for path in result.paths:
        assert Path(path).stat().st_size % tarfile.RECORDSIZE == 0
        with tarfile.open(path) as archive:  # checks every header's checksum
            for member in archive:
                assert member.isfile()
                assert member.mode == 0o644
                assert member.mtime == 0
                names.append(member.name)
                data = archive.extractfile(member).read()
                key, extension = member.name.split(".")
                label, payload = reference[key]
                assert data == (payload if extension == "bin" else str(label).encode())
    assert names == [f"{key}.{ext}" for key in reference for ext in ("bin", "cls")]
    assert result.samples == SAMPLES
    assert result.payload_bytes == sum(len(p) for _, p in reference.values())
    assert result.bytes == sum(Path(p).stat().st_size for p in result.paths)


@pytest.mark.parametrize(
    ("name", "size"), [("000001.bin", 0), ("a.cls", 3), ("k" * 100, 8**11 - 1), ("x.b", 110_000)]
)
def test_tar_headers_are_tarfiles(name: str, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uname, info.gname = size, 0o644, 0, "", ""
    assert tar_header(name, size) == info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")


def test_long_names_and_huge_sizes_fall_back_to_pax() -> None:
    header = tar_header("n" * 150, 10)
    assert len(header) % 512 == 0
    assert len(header) > 512


def tfrecord_payloads(path: str, gzipped: bool = False) -> list[bytes]:
    """The records of a TFRecord file, both masked CRC-32Cs checked with
    google_crc32c (the tfrecord package does not check them)."""
    import google_crc32c

    def masked(data: bytes) -> int:
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    data = Path(path).read_bytes()
    if gzipped:
        data = gzip.decompress(data)
    records, offset = [], 0
    while offset < len(data):
        length_bytes = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        record = data[offset + 12 : offset + 12 + length]
        (data_crc,) = struct.unpack("<I", data[offset + 12 + length : offset + 16 + length])
        assert length_crc == masked(length_bytes)
        assert data_crc == masked(record)
        records.append(record)
        offset += 16 + length
    assert offset == len(data)
    return records


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_tfrecord_as_the_tfrecord_package_reads_it(
    tmp_path: Path, reference: Samples, compression: str
) -> None:
    from tfrecord.reader import tfrecord_loader

    result = generate(tmp_path, "tfrecord", compression=compression)
    gzipped = compression == "gzip"
    suffix = ".tfrecord.gz" if gzipped else ".tfrecord"
    assert result.url == f"{tmp_path}/tfrecord-{{00000..00002}}{suffix}"
    samples: Samples = {}
    description = {"key": "byte", "label": "int", "data": "byte"}
    for path in result.paths:
        records = tfrecord_payloads(path, gzipped)
        if gzipped:  # the tfrecord package leaves gzipped files open (a ResourceWarning)
            path = str(tmp_path / Path(path).stem)
            Path(path).write_bytes(gzip.decompress(Path(f"{path}.gz").read_bytes()))
        loaded = list(tfrecord_loader(path, None, description))
        assert len(loaded) == len(records)
        for example in loaded:
            assert example["label"].shape == (1,)
            key = bytes(example["key"]).decode()
            samples[key] = (int(example["label"][0]), bytes(example["data"]))
    assert samples == reference
    assert list(samples) == list(reference)


def test_tfrecord_examples_parse_with_protobuf(tmp_path: Path, reference: Samples) -> None:
    """The tfrecord package's own Example message, field by field."""
    from tfrecord import example_pb2

    result = generate(tmp_path, "tfrecord")
    record = tfrecord_payloads(result.paths[1])[0]
    example = example_pb2.Example()
    example.ParseFromString(record)
    features = example.features.feature
    assert set(features) == {"key", "label", "data"}
    key = features["key"].bytes_list.value[0].decode()
    assert key == "00000100000000"
    assert list(features["label"].int64_list.value) == [reference[key][0]]
    assert features["data"].bytes_list.value == [reference[key][1]]
    assert example.ByteSize() == len(record)  # nothing else in it


@pytest.mark.parametrize("format", ["parquet", "arrow"])
def test_columnar_as_pyarrow_reads_it(tmp_path: Path, reference: Samples, format: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    result = generate(tmp_path, format, row_group_size=4)
    assert result.url == f"{tmp_path}/{format}-{{00000..00002}}.{format}"
    tables = []
    for path in result.paths:
        if format == "parquet":
            metadata = pq.ParquetFile(path).metadata
            rows = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
            tables.append(pq.read_table(path))
        else:
            with pa.ipc.open_file(path) as reader:
                rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
                tables.append(reader.read_all())
        assert rows == [4] * (sum(rows) // 4) + ([sum(rows) % 4] if sum(rows) % 4 else [])
    table = pa.concat_tables(tables)
    assert table.schema == pa.schema(
        [("key", pa.string()), ("label", pa.int64()), ("data", pa.binary())]
    )
    columns = table.to_pydict()
    pairs = zip(columns["label"], columns["data"], strict=True)
    samples = dict(zip(columns["key"], pairs, strict=True))
    assert samples == reference


def test_default_row_groups_hold_about_32_mib(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    result = write_dataset(tmp_path, "parquet", samples=100, sample_size=1 << 20, shards=1)
    metadata = pq.ParquetFile(result.paths[0]).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [
        32,
        32,
        32,
        4,
    ]


@pytest.mark.parametrize(("format", "compression"), [("parquet", "gzip"), ("parquet", "zstd"),
                                                     ("arrow", "zstd")])  # fmt: skip
def test_columnar_compression_is_inside_the_file(
    tmp_path: Path, reference: Samples, format: str, compression: str
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    result = generate(tmp_path, format, compression=compression)
    assert all(path.endswith(f".{format}") for path in result.paths)
    keys = []
    for path in result.paths:
        if format == "parquet":
            codec = pq.ParquetFile(path).metadata.row_group(0).column(2).compression
            assert codec == compression.upper()
            table = pq.read_table(path)
        else:
            with pa.ipc.open_file(path) as reader:
                table = reader.read_all()
        keys += table.column("key").to_pylist()
        assert table.column("data").to_pylist() == [
            reference[k][1] for k in table["key"].to_pylist()
        ]
    assert keys == list(reference)


def planned() -> Samples:
    """The fixed-size samples the generator plans (every format writes these)."""
    plan = DatasetPlan(SAMPLES, SIZE, SHARDS, SEED, 0.0, CLASSES)
    return {
        key: (label, bytes(payload))
        for shard in range(SHARDS)
        for block in plan.blocks(shard, 1_000)
        for key, label, payload in zip(block.keys, block.labels, block.payloads, strict=True)
    }


def test_fixed_size_samples_are_what_was_requested(tmp_path: Path) -> None:
    samples = read_webdataset(generate(tmp_path, "webdataset", size_jitter=0.0).url)
    check_requested(samples, size_jitter=0.0)
    assert all(len(payload) == SIZE for _, payload in samples.values())
    assert samples == planned()


def test_npy_as_numpy_loads_it(tmp_path: Path) -> None:
    result = generate(tmp_path, "npy")
    expected = [payload for _, payload in planned().values()]
    rows = []
    for path in result.paths:
        array = np.load(path)
        assert array.dtype == np.uint8
        assert array.ndim == 2
        assert array.shape[1] == SIZE
        rows += [row.tobytes() for row in array]
    assert rows == expected
    assert [np.load(p).shape[0] for p in result.paths] == [15, 16, 16]


def test_fixed_records_are_the_rows(tmp_path: Path) -> None:
    result = generate(tmp_path, "fixed")
    assert result.url.endswith(".bin")
    data = b"".join(Path(path).read_bytes() for path in result.paths)
    expected = [payload for _, payload in planned().values()]
    assert data == b"".join(expected)
    assert [Path(p).stat().st_size for p in result.paths] == [15 * SIZE, 16 * SIZE, 16 * SIZE]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("format", FIXED_ROWS)
def test_compressed_fixed_rows_read_back_exactly(tmp_path: Path, format: str, codec: str) -> None:
    import fastio

    code, output = run_cli(
        str(tmp_path), "--format", format, "--samples", str(SAMPLES), "--sample-size", str(SIZE),
        "--shards", str(SHARDS), "--seed", str(SEED), "--classes", str(CLASSES),
        "--compression", codec, "--json",
    )  # fmt: skip
    assert code == 0, output
    url = json.loads(output)["url"]
    suffix = {"npy": ".npy", "fixed": ".bin"}[format] + {"gzip": ".gz", "zstd": ".zst"}[codec]
    assert url.endswith(suffix)
    expected = [payload for _, payload in planned().values()]
    options = {"record_size": SIZE} if format == "fixed" else {}
    with fastio.Dataset(url, format, shuffle=False, fairness=False, **options) as dataset:
        assert [bytes(row) for row in dataset] == expected
        assert [row.tobytes() for batch in dataset.batches(10) for row in batch] == expected
        assert dataset.counts == [15, 16, 16]
        assert bytes(dataset[20]) == expected[20]
    with fastio.Dataset(url, format, seed=4, fairness=False, **options) as dataset:
        assert sorted(bytes(row) for row in dataset) == sorted(expected)


def test_jsonl_as_json_reads_it(tmp_path: Path, reference: Samples) -> None:
    result = generate(tmp_path, "jsonl")
    samples = {}
    for path in result.paths:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            assert set(record) == {"key", "label", "text"}
            text = record["text"]
            assert set(text) <= set("abcdefghijklmnopqrstuvwxyz ")
            samples[record["key"]] = (record["label"], text.encode())
    check_requested(samples)
    # The text is the payload, each byte mapped to a letter or a space.
    for key, (label, text) in samples.items():
        assert label == reference[key][0]
        assert len(text) == len(reference[key][1])


@pytest.mark.parametrize("format", list(FORMATS))
def test_a_seed_gives_the_same_bytes(tmp_path: Path, format: str) -> None:
    first = generate(tmp_path / "first", format)
    again = generate(tmp_path / "again", format)
    other = generate(tmp_path / "other", format, seed=SEED + 1)
    for one, two, three in zip(first.paths, again.paths, other.paths, strict=True):
        assert Path(one).read_bytes() == Path(two).read_bytes()
        assert Path(one).read_bytes() != Path(three).read_bytes()


def test_block_size_does_not_change_the_samples() -> None:
    plan = DatasetPlan(SAMPLES, SIZE, SHARDS, SEED, JITTER, CLASSES)

    def flat(block_samples: int) -> list[tuple[str, int, bytes]]:
        return [
            (key, label, bytes(payload))
            for block in plan.blocks(2, block_samples)
            for key, label, payload in zip(block.keys, block.labels, block.payloads, strict=True)
        ]

    assert flat(1) == flat(3) == flat(1_000)


@pytest.mark.parametrize("format", ["webdataset", "tfrecord", "npy", "fixed", "jsonl"])
@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_compressed_files_decompress_to_the_plain_ones(
    tmp_path: Path, format: str, compression: str
) -> None:
    import zstandard

    plain = generate(tmp_path / "plain", format)
    packed = generate(tmp_path / "packed", format, compression=compression)
    suffix = {"gzip": ".gz", "zstd": ".zst"}[compression]
    assert Path(packed.url).name == Path(plain.url).name + suffix
    for one, two in zip(plain.paths, packed.paths, strict=True):
        assert two == str(tmp_path / "packed" / Path(one).name) + suffix
        data = Path(two).read_bytes()
        if compression == "gzip":
            unpacked = gzip.decompress(data)
        else:
            unpacked = zstandard.ZstdDecompressor().stream_reader(data).read()
        assert unpacked == Path(one).read_bytes()


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_webdataset_reads_compressed_tars(
    tmp_path: Path, reference: Samples, compression: str
) -> None:
    result = generate(tmp_path, "webdataset", compression=compression)
    if compression == "zstd":  # tarfile reads gzip itself, zstd (before Python 3.14) not
        import zstandard

        for path in result.paths:
            packed = Path(path).read_bytes()
            Path(path).write_bytes(zstandard.ZstdDecompressor().stream_reader(packed).read())
    assert read_webdataset(result.url) == reference


def test_no_partial_files_are_left(tmp_path: Path) -> None:
    generate(tmp_path, "webdataset")
    generate(tmp_path, "webdataset")  # replaces the files
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"webdataset-{i:05d}.tar" for i in range(SHARDS)
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"format": "npy", "size_jitter": 0.1}, "size_jitter must be 0"),
        ({"format": "arrow", "compression": "gzip"}, "not gzip"),
        ({"format": "tar"}, "unknown format"),
        ({"compression": "bz2"}, "unknown compression"),
        ({"shards": 100}, "cannot fill"),
        ({"size_jitter": 1.0}, "size_jitter"),
        ({"sample_size": 0}, "sample_size"),
        ({"row_group_size": 0}, "row_group_size"),
    ],
)
def test_bad_arguments_raise_value_error(tmp_path: Path, options: dict, message: str) -> None:
    format = options.pop("format", "webdataset")
    with pytest.raises(ValueError, match=message):
        generate(tmp_path, format, **options)


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["gen", *args])
    return result.exit_code, result.output


def test_cli_prints_one_json_object(tmp_path: Path) -> None:
    code, output = run_cli(
        str(tmp_path), "--format", "tfrecord", "--samples", "20", "--sample-size", "1KiB",
        "--shards", "4", "--seed", "3", "--size-jitter", "0.2", "--compression", "gzip", "--json",
    )  # fmt: skip
    assert code == 0, output
    report = json.loads(output)
    assert report["format"] == "tfrecord"
    assert report["compression"] == "gzip"
    assert report["files"] == 4
    assert report["samples"] == 20
    assert report["seconds"] > 0
    assert report["url"] == f"{tmp_path}/tfrecord-{{00000..00003}}.tfrecord.gz"
    files = fastio.expand_urls(report["url"])
    assert report["index"] == str(tmp_path / "dataset.fastio-index.npz")
    assert sorted(str(p) for p in tmp_path.iterdir()) == sorted([*files, report["index"]])
    assert report["bytes"] == sum(Path(f).stat().st_size for f in files)
    assert sum(len(tfrecord_payloads(f, gzipped=True)) for f in files) == 20
    same = write_dataset(
        tmp_path / "python", "tfrecord", 20, 1024, 4, seed=3, compression="gzip", size_jitter=0.2
    )
    assert report["payload_bytes"] == same.payload_bytes
    for one, two in zip(files, same.paths, strict=True):
        assert Path(one).read_bytes() == Path(two).read_bytes()


def test_cli_summary_names_the_shards(tmp_path: Path) -> None:
    code, output = run_cli(str(tmp_path), "--samples", "5", "--sample-size", "100", "--shards", "2")
    assert code == 0, output
    assert "wrote 2 webdataset shards: 5 samples" in output
    assert f"{tmp_path}/webdataset-{{00000..00001}}.tar" in output


def test_cli_rejects_bad_combinations(tmp_path: Path) -> None:
    code, output = run_cli(str(tmp_path), "--format", "fixed", "--size-jitter", "0.5")
    assert code == 2
    assert "size_jitter must be 0" in output
    code, output = run_cli(str(tmp_path), "--format", "csv")
    assert code == 2
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("format", ["webdataset", "tfrecord", "jsonl"])
def test_the_writers_index_serves_a_dataset_without_a_scan(tmp_path: Path, format: str,
                                                           compression: str) -> None:  # fmt: skip
    result = write_dataset(tmp_path / "data", format, samples=60, sample_size=300, shards=3,
                           compression=compression, index=True)  # fmt: skip
    assert result.index == str(tmp_path / "data" / "dataset.fastio-index.npz")
    scanned = tmp_path / "scanned"
    with fastio.Dataset(result.url, format=format, index_dir=scanned, shuffle=False) as dataset:
        assert len(dataset) == 60  # known at once: no TypeError, no first epoch needed
        delivered = list(dataset)
    assert not scanned.exists()  # no shard was scanned and indexed on its own
    # The same shards scanned by the dataset itself: the same samples.
    Path(result.index).rename(tmp_path / "moved.npz")
    with fastio.Dataset(result.url, format=format, index_dir=scanned, shuffle=False) as fresh:
        scanned_samples = list(fresh.index())
    assert len(scanned_samples) == 60
    assert [repr(a) for a in delivered] == [repr(b) for b in scanned_samples]


def test_the_cli_writes_the_index_unless_told_not_to(tmp_path: Path) -> None:
    for flag, expected in (("--index", True), ("--no-index", False)):
        out = tmp_path / flag.strip("-")
        run = CliRunner().invoke(main, ["gen", str(out), "--format", "webdataset", "--samples",
                                        "20", "--sample-size", "100", "--shards", "2", flag,
                                        "--json"])  # fmt: skip
        assert run.exit_code == 0, run.output
        data = json.loads(run.stdout)
        assert (data["index"] is not None) is expected
        assert (out / "dataset.fastio-index.npz").exists() is expected
