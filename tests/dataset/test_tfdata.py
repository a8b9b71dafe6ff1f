"""The tf.data fast path as users write it: ``Dataset.batches(n)`` into
``tf.data.Dataset.from_generator`` as numpy arrays. It delivers what tf.data's
own TFRecord reader parses from the same files, batch for batch.

TensorFlow runs in a child process (its threads and import must not meet the
suite's forked DataLoader workers); the test is skipped without it
(``pip install tensorflow-cpu``: about 1.4 GB, so not in the test extra)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.shards import write

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="tensorflow is not installed")  # fmt: skip

SCRIPT = """
import json, sys
import tensorflow as tf
import fastio

urls, batch_size = json.loads(sys.argv[1]), 16

# The fast path (the README's): Arrow columns of parsed Examples, as numpy.
dataset = fastio.Dataset(urls, shuffle=False)

def batches():
    for columns in dataset.batches(batch_size):
        yield {"key": columns.column("key").flatten().to_numpy(),
               "data": columns.column("data").flatten().to_numpy(zero_copy_only=False)}

signature = {"key": tf.TensorSpec((None,), tf.int64), "data": tf.TensorSpec((None,), tf.string)}
fast = tf.data.Dataset.from_generator(batches, output_signature=signature)
fast = fast.prefetch(tf.data.AUTOTUNE)

# tf.data's own reader of the same files.
features = {"key": tf.io.FixedLenFeature([], tf.int64),
            "data": tf.io.FixedLenFeature([], tf.string)}
own = tf.data.TFRecordDataset(urls).batch(batch_size).map(
    lambda records: tf.io.parse_example(records, features))

def listed(source):
    return [{"key": b["key"].numpy().tolist(), "data": [d.hex() for d in b["data"].numpy()]}
            for b in source]

print(json.dumps({"fast": listed(fast), "own": listed(own)}))
"""


def test_batches_feed_tf_data_as_its_own_reader_does(tmp_path) -> None:
    written = write("tfrecord", tmp_path, shards=3, per_shard=20)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), json.dumps(written.urls)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["fast"] == result["own"]
    keys = [key for batch in result["fast"] for key in batch["key"]]
    assert keys == [row["key"] for row in written.samples]
    data = [bytes.fromhex(d) for batch in result["fast"] for d in batch["data"]]
    assert data == [row["data"] for row in written.samples]
    assert {len(batch["key"]) for batch in result["fast"][:-1]} == {16}
