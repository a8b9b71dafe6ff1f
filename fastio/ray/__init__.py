"""fastio.ray: fastio datasets as Ray Data datasets (the ``ray`` extra,
``pip install 'fastio[ray]'``).

:class:`FastIODatasource` reads the shards of a :class:`fastio.Dataset` in Ray
read tasks: the dataset is indexed once on the driver, and each read task reads
a disjoint contiguous part of its samples (the part a rank would read), so every
sample is read exactly once, in blocks of Arrow tables (numpy formats: a tensor
column ``data``). :func:`read` is the short form::

    import fastio.ray

    ds = fastio.ray.read("data/train-{0000..0127}.tar")  # a ray.data.Dataset
    for batch in ds.iter_batches(batch_size=256):
        ...
"""

from __future__ import annotations

from fastio.ray._datasource import FastIODatasource, read

__all__ = ["FastIODatasource", "read"]
