"""``.npy`` arrays and fixed-size records: decoded and written."""

from __future__ import annotations

import io
import random
import warnings

import numpy as np
import pytest

import fastio
from fastio.formats import FixedWriter, NpyWriter, decode_fixed, decode_npy
from tests.formats.chunks import stream


@pytest.mark.parametrize("read_size", [4096, 65_536])
@pytest.mark.parametrize(
    "array",
    [
        np.arange(10_000, dtype=np.int64),
        np.random.default_rng(0).random((300, 17, 3)).astype(np.float32),
        np.arange(4000, dtype=">i4").reshape(1000, 4),  # big-endian stays big-endian
        np.zeros(50, dtype=[("x", "<f8"), ("label", "u1")]),  # structured rows
        np.zeros((0, 5)),
        # numpy writes header version 3.0 (UTF-8) for a field name outside Latin-1
        np.zeros(20, dtype=[("名前", "<f4"), ("x", "<i4")]),
    ],
    ids=["int64", "float32-3d", "big-endian", "structured", "empty", "utf-8 header"],
)
def test_npy_rows_round_trip(tmp_path, read_size: int, array: np.ndarray) -> None:
    path = tmp_path / "array.npy"
    with warnings.catch_warnings():  # numpy's own note that 3.0 needs numpy 1.17
        warnings.filterwarnings("ignore", "Stored array in format 3.0", UserWarning)
        np.save(path, array)
    rows = list(decode_npy(stream(str(path), read_size), str(path)))
    assert len(rows) == len(array)
    if len(array):
        np.testing.assert_array_equal(np.stack(rows), array)
        assert rows[0].dtype == array.dtype


@pytest.mark.parametrize("rows", [2, 4, 7])
def test_npy_batches_keep_the_file_s_dtype(tmp_path, rows: int) -> None:
    """Each batch in the file's dtype, byte order too, whether it is cut from
    one read or joined from two."""
    array = np.arange(24, dtype=">f8").reshape(24, 1)
    for shard in range(3):
        np.save(tmp_path / f"a-{shard}.npy", array[shard * 8 : shard * 8 + 8])
    dataset = fastio.Dataset(str(tmp_path / "a-{0..2}.npy"), shuffle=False, read_size=4096)
    batches = list(dataset.batches(rows))
    assert {batch.dtype for batch in batches} == {np.dtype(">f8")}
    np.testing.assert_array_equal(np.concatenate(batches), array)


def test_npy_batches_across_shards_of_other_dtypes_keep_every_value(tmp_path) -> None:
    """A batch across an int8 shard and an int64 one holds every value (in
    int64: never the first shard's int8, which would wrap 1000 to -24); rows
    no one array holds (other row shapes, other fields) are refused with
    MixedTypesError, and their samples still come one by one."""
    np.save(tmp_path / "a.npy", np.arange(10, dtype=np.int8))
    np.save(tmp_path / "b.npy", np.full(10, 1000, dtype=">i8"))
    np.save(tmp_path / "c.npy", np.full(10, 0.5, dtype=np.float32))
    np.save(tmp_path / "s.npy", np.full(10, -7, dtype=np.int16))
    dataset = fastio.Dataset(str(tmp_path / "{a,b,s,c}.npy"), shuffle=False)
    expected = [*range(10), *[1000] * 10, *[-7] * 10, *[0.5] * 10]
    batches = list(dataset.batches(8))
    assert [value.item() for batch in batches for value in batch] == expected
    assert batches[1].dtype == np.int64  # int8 and int64 rows
    assert batches[3].dtype == np.float32  # int16 and float32 rows: float32 holds both
    # Integers that a float's mantissa does not hold (int64 or uint64 beside
    # floats, int64 beside uint64: numpy's float64) would come changed.
    np.save(tmp_path / "u.npy", np.full(10, 2**63 + 5, dtype=np.uint64))
    np.save(tmp_path / "d.npy", np.ones((10, 3), np.float32))
    np.save(tmp_path / "e.npy", np.zeros(10, dtype=[("x", "<f8")]))
    for other in ("b,c", "b,u", "u,c", "c,d", "c,e"):
        mixed = fastio.Dataset(str(tmp_path / f"{{{other}}}.npy"), shuffle=False)
        with pytest.raises(fastio.MixedTypesError, match="iterate samples"):
            list(mixed.batches(8))
        assert len(list(mixed)) == 20


def test_npy_fortran_order_and_object_arrays_are_refused(tmp_path) -> None:
    fortran = tmp_path / "f.npy"
    np.save(fortran, np.asfortranarray(np.ones((4, 3))))
    with pytest.raises(fastio.DecodeError, match="Fortran"):
        list(decode_npy(stream(str(fortran), 4096), str(fortran)))
    objects = tmp_path / "o.npy"
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(fastio.DecodeError, match="object"):
        list(decode_npy(stream(str(objects), 4096), str(objects)))


def test_npy_truncated(tmp_path) -> None:
    path = tmp_path / "cut.npy"
    np.save(path, np.arange(1000, dtype=np.int32))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_npy(stream(str(path), 4096), str(path)))
    assert caught.value.url == str(path)


@pytest.mark.parametrize(("descr", "shape"), [("<f4", (3, -7)), ("3<f4", (7,))],
                         ids=["negative dimension", "subarray dtype"])  # fmt: skip
def test_npy_headers_no_array_follows_are_damage(tmp_path, descr, shape) -> None:
    """Headers numpy's header reader takes but no array of fixed-size rows
    follows (numpy itself cannot read these arrays): a DecodeError naming the
    file at byte 0, not a bare ValueError."""
    path = tmp_path / "x.npy"
    with open(path, "wb") as handle:
        header = {"descr": descr, "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(bytes(84))
    with pytest.raises(fastio.DecodeError, match=r"bad \.npy header") as caught:
        list(decode_npy(stream(str(path), 4096), str(path)))
    assert (caught.value.url, caught.value.offset) == (str(path), 0)


def test_fixed_records(tmp_path) -> None:
    path = tmp_path / "records.bin"
    data = random.Random(9).randbytes(1000 * 37)
    path.write_bytes(data)
    records = [bytes(r) for r in decode_fixed(stream(str(path), 4096), str(path), 37)]
    assert records == [data[i : i + 37] for i in range(0, len(data), 37)]
    path.write_bytes(data + b"xx")
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_fixed(stream(str(path), 4096), str(path), 37))
    assert caught.value.offset == len(data)


# ---- writing -----------------------------------------------------------------------


def test_npy_writer_writes_what_numpy_and_the_decoder_read(tmp_path) -> None:
    array = np.arange(600, dtype=">i4").reshape(50, 3, 4)
    path = tmp_path / "written.npy"
    with open(path, "wb") as file, NpyWriter(file, array.dtype, array.shape[1:], len(array)) as w:
        for row in array:
            w.write(row.tobytes())
    np.testing.assert_array_equal(np.load(path), array)
    rows = list(decode_npy(stream(str(path), 4096), str(path)))
    np.testing.assert_array_equal(np.stack(rows), array)


def test_array_writers_check_sizes_and_counts() -> None:
    file = io.BytesIO()
    with FixedWriter(file, 4) as writer:
        writer.write(b"abcd")
        with pytest.raises(ValueError, match="a record of 3 bytes"):
            writer.write(b"abc")
    assert file.getvalue() == b"abcd"
    writer = NpyWriter(io.BytesIO(), np.dtype(np.uint8), (4,), 2)
    writer.write(b"abcd")
    with pytest.raises(ValueError, match="says 2 rows"):
        writer.close()
