"""Shard formats: a shard's chunks in, samples out. Formats never open files.

Each decoder takes the chunks of one shard (as :meth:`fastio.Reader.stream`
yields them) and yields that shard's samples. Records are views of the reader's
buffers; only a record that straddles two chunks is copied, once. The
``columns_*`` decoders yield the same records as ``pyarrow.RecordBatch`` objects
gathered in native code, one Python object per batch rather than per sample.
"""

from __future__ import annotations

from fastio.formats._arrays import decode_fixed, decode_npy
from fastio.formats._columnar import columns_lines, columns_tfrecord, columns_webdataset
from fastio.formats._compression import codec_for, decompress
from fastio.formats._lines import decode_jsonl, decode_lines
from fastio.formats._tfrecord import decode_tfrecord, parse_example
from fastio.formats._webdataset import decode_webdataset, sample_key

__all__ = [
    "codec_for",
    "columns_lines",
    "columns_tfrecord",
    "columns_webdataset",
    "decode_fixed",
    "decode_jsonl",
    "decode_lines",
    "decode_npy",
    "decode_tfrecord",
    "decode_webdataset",
    "decompress",
    "parse_example",
    "sample_key",
]
