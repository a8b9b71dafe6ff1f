"""What the page cache holds, taken without waiting for the device: ranges of
files mapped (``fastio._native.map_resident``) and small ranges read
(``fastio._native.read_resident``)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from fastio._native import MappedRange, map_resident, read_resident
from tests.conftest import FILE_SIZES
from tests.pagecache import drop_pages, mapped


@pytest.mark.parametrize("size", [size for size in FILE_SIZES if size])
def test_a_cached_range_maps_the_bytes_a_read_returns(make_file, size) -> None:
    path, data = make_file(size)
    Path(path).read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, length in [(0, size), (size // 3, size // 2 + 1), (size - 1, 1),
                               (size // 2, 10 * size)]:  # fmt: skip
            mapping = map_resident(fd, offset, length)
            assert isinstance(mapping, MappedRange)
            # Cut where the file ends.
            assert bytes(memoryview(mapping)) == data[offset : offset + length]
            assert len(mapping) == len(data[offset : offset + length])
        assert map_resident(fd, size, 1) is None  # nothing there to map
        assert map_resident(fd, size + 4096, 4096) is None
    finally:
        os.close(fd)


def test_a_mapping_is_read_only_outlives_its_descriptor_and_is_unmapped_once_dropped(
    make_file,
) -> None:
    path, data = make_file(100_000)
    Path(path).read_bytes()
    fd = os.open(path, os.O_RDONLY)
    mapping = map_resident(fd, 5, 90_000)
    os.close(fd)
    assert mapping is not None
    view = memoryview(mapping)
    assert view.readonly
    assert mapping.exports == 1
    with pytest.raises(TypeError):
        view[0] = 0
    array = np.frombuffer(mapping, np.uint8)
    assert not array.flags.writeable
    assert bytes(array[:10]) == data[5:15]
    assert mapped([path])
    del view, array
    gc.collect()
    assert mapping.exports == 0
    del mapping
    assert not mapped([path])


def test_a_range_the_page_cache_lacks_is_not_mapped(make_file) -> None:
    path, _ = make_file(1 << 20)
    if drop_pages(path) > 0:
        pytest.skip("this filesystem keeps files in the page cache (tmpfs)")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert map_resident(fd, 0, 1 << 20) is None
        os.pread(fd, 4096, 8192)  # one page (and what read-ahead brings) back
        assert map_resident(fd, 8192, 4096) is not None
        assert map_resident(fd, 0, 1 << 20) is None  # not all of it
    finally:
        os.close(fd)


def test_a_mapped_range_is_made_only_by_mapping() -> None:
    with pytest.raises(TypeError, match="map_resident"):
        MappedRange()


def test_a_descriptor_that_is_not_open_is_an_os_error() -> None:
    with pytest.raises(OSError, match="Bad file descriptor"):
        map_resident(1_000_000, 0, 4096)


def test_cached_ranges_are_read_whole_in_one_call_and_no_others(make_file, tmp_path) -> None:
    (one, first), (two, second) = make_file(100_000), make_file(30_000)
    cold, _ = make_file(1 << 20)
    for path in (one, two):
        Path(path).read_bytes()
    keeps_pages = drop_pages(cold) > 0  # tmpfs: nothing leaves the page cache
    ranges = [
        (one, 0, 10),
        (two, 29_990, 10),
        (one, 99_000, 1_000),  # files in turn: each reopened
        (one, 50_000, 0),  # nothing to read: read whole
        (one, 99_990, 100),  # past the end: not whole
        (str(tmp_path / "missing.bin"), 0, 10),  # cannot be opened
        (cold, 4096, 8192),  # not in the page cache
        (two, 0, 30_000),
    ]
    got = read_resident([os.fsencode(p) for p, _, _ in ranges], [o for _, o, _ in ranges],
                        [n for _, _, n in ranges], 0.5)  # fmt: skip
    data = {one: first, two: second}
    assert got[:4] == [data[p][o : o + n] for p, o, n in ranges[:4]]
    assert got[4] is None
    assert got[5] is None
    assert got[6] is None or keeps_pages
    assert got[7] == second
    # What a range needs of the page cache is the share of its pages held
    # that the caller asks for: with none, a cold range is read from the device.
    colder = read_resident([os.fsencode(cold)], [4096], [8192], 0.0)
    assert colder == [Path(cold).read_bytes()[4096 : 4096 + 8192]]
    with pytest.raises(ValueError, match="as many"):
        read_resident([os.fsencode(one)], [0, 1], [1])
