"""Shard formats: a shard's chunks in, samples out; samples in, a shard out.
Formats never open files.

One module per format (``_webdataset``, ``_tfrecord``, ``_lines`` for JSONL and
text lines, ``_arrays`` for ``.npy`` and fixed-size records, ``_tables`` for
Parquet and Arrow IPC), each holding how that format is located, decoded,
gathered into columns, laid out for the dataset and written. Shared: the
chunk-boundary drivers (``_reassemble``), compression, the dataset's interface
(``_layout``), the record formats' base and writer (``_records``), per-shard
indexes (``_index``) and the registry by name (``_shards``).

Each decoder takes the chunks of one shard (as :meth:`fastio.Reader.stream`
yields them) and yields that shard's samples. Records are views of the reader's
buffers; only a record that straddles two chunks is copied, once. The
``columns_*`` decoders yield the same records as ``pyarrow.RecordBatch`` objects
gathered in native code, one Python object per batch rather than per sample.
Each writer writes one shard's samples to a binary file (or a compressor in
front of one, see :func:`compressing`); the record formats' writers also give
the shard's index without a scan, and :class:`DatasetIndexWriter` gathers them
into a dataset index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastio.sources._imports import lazy_attributes

if TYPE_CHECKING:
    from fastio.formats._arrays import FixedWriter, NpyWriter, decode_fixed, decode_npy
    from fastio.formats._compression import codec_for, compressing, decompress
    from fastio.formats._lines import (
        JsonLinesWriter,
        LinesWriter,
        columns_lines,
        decode_jsonl,
        decode_lines,
    )
    from fastio.formats._records import DatasetIndexWriter
    from fastio.formats._tables import TableWriter
    from fastio.formats._tfrecord import (
        TFRecordWriter,
        columns_tfrecord,
        decode_tfrecord,
        example_parts,
        parse_example,
    )
    from fastio.formats._webdataset import (
        WebDatasetWriter,
        columns_webdataset,
        decode_webdataset,
        sample_key,
    )

# Each format is imported where it is used: a dataset reads one.
__getattr__, __dir__ = lazy_attributes(__name__, {
    "_arrays": ["FixedWriter", "NpyWriter", "decode_fixed", "decode_npy"],
    "_compression": ["codec_for", "compressing", "decompress"],
    "_lines": ["JsonLinesWriter", "LinesWriter", "columns_lines", "decode_jsonl", "decode_lines"],
    "_records": ["DatasetIndexWriter"],
    "_tables": ["TableWriter"],
    "_tfrecord": ["TFRecordWriter", "columns_tfrecord", "decode_tfrecord", "example_parts",
                  "parse_example"],
    "_webdataset": ["WebDatasetWriter", "columns_webdataset", "decode_webdataset", "sample_key"],
})  # fmt: skip

__all__ = [
    "DatasetIndexWriter",
    "FixedWriter",
    "JsonLinesWriter",
    "LinesWriter",
    "NpyWriter",
    "TFRecordWriter",
    "TableWriter",
    "WebDatasetWriter",
    "codec_for",
    "columns_lines",
    "columns_tfrecord",
    "columns_webdataset",
    "compressing",
    "decode_fixed",
    "decode_jsonl",
    "decode_lines",
    "decode_npy",
    "decode_tfrecord",
    "decode_webdataset",
    "decompress",
    "example_parts",
    "parse_example",
    "sample_key",
]
