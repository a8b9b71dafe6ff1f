"""The planner's file references: each piece holds one, and a range split
into many pieces never lets its file's count reach zero between them, however
soon each piece is read and released (a file at zero is idle, may be closed,
and a shard-cache download read as it arrives is let go)."""

from __future__ import annotations

import os

import pytest

from fastio.reader._files import FileTable
from fastio.reader._ranges import ByteRange
from fastio.reader._requests import plan_requests


@pytest.mark.parametrize("close_early", [False, True])
def test_pieces_of_one_range_each_hold_the_file_open(tmp_path, close_early) -> None:
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(10 * 4096 + 5))
    files = FileTable(max_idle=0)  # a file at zero references is closed at once
    pieces = plan_requests(None, [ByteRange(str(path), 0)], files, False, lambda: 4096, 0)
    seen = 0
    for piece in pieces:
        assert piece.file is not None
        assert piece.file.fd >= 0, f"piece {seen} was planned on a closed file"
        assert os.pread(piece.file.fd, 1, piece.offset) == path.read_bytes()[piece.offset :][:1]
        files.release(piece.file)  # read and released before the next is planned
        seen += 1
        if close_early and seen == 3:
            break
    pieces.close()
    assert seen == (3 if close_early else 11)
    assert not files._files, "a reference was left behind"
