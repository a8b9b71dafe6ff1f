"""Ranges of files mapped from the page cache (``fastio._native.map_resident``)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from fastio._native import MappedRange, map_resident
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
