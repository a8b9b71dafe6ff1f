"""How the shard cache cleans up after processes that died, and after itself.

A process killed mid-download leaves a temporary file and a reservation in the
index; one killed between publishing a copy and recording it leaves a copy the
index does not count. Its owner lock (see :mod:`fastio.cache._files`) is then
free: whoever notices (a cache opening the folder, or one waiting for room or
for that very shard) removes the files and gives the reserved bytes back, in
one index transaction.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fastio.cache._files import data_key, owner_alive, remove_quietly, temp_name, temp_owner

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.cache._database import CacheIndex, Entry, EvictionPolicy

__all__ = ["bury", "discard", "reap", "remove_strays", "trim"]


def reap(index: CacheIndex, owners: str, me: str) -> None:
    """Removes what dead cache objects left: downloads, pins, plans."""
    found = {owner for owner, _ in index.owners()}
    found.update(entry.owner for entry in index.downloads())
    for owner in found - {me}:
        if not owner_alive(owners, owner):
            bury(index, owners, owner)


def bury(index: CacheIndex, owners: str, owner: str) -> None:
    """Removes the dead ``owner``'s downloads and forgets it."""
    for entry in index.downloads(owner):
        discard(index, entry)
    index.unregister(owner)
    remove_quietly(os.path.join(owners, f"{owner}.lock"))


def discard(index: CacheIndex, entry: Entry) -> None:
    """Removes a download that is no longer running: its files and its reservation."""
    remove_quietly(os.path.join(os.path.dirname(entry.path), temp_name(entry.owner, entry.key)))
    remove_quietly(entry.path)  # published on disk, not yet in the index
    index.remove(entry.key)


def remove_strays(index: CacheIndex, directories: Sequence[str], owners: str, me: str) -> None:
    """Removes the files of ours the index does not account for: copies whose
    entry a crash dropped, and downloads of owners that are gone. Other files
    in the folders are left alone."""
    keys = index.keys()
    for folder in directories:
        with os.scandir(folder) as listing:
            for item in listing:
                key, owner = data_key(item.name), temp_owner(item.name)
                stray = (key is not None and key not in keys) or (
                    owner is not None and owner != me and not owner_alive(owners, owner)
                )
                if stray and item.is_file(follow_symlinks=False):
                    remove_quietly(item.path)


def trim(index: CacheIndex, max_bytes: int, policy: EvictionPolicy) -> None:
    """Evicts (unpinned shards, by ``policy``) down to ``max_bytes``."""
    totals = index.totals()
    excess = totals["bytes_used"] + totals["bytes_reserved"] - max_bytes
    if excess > 0:
        for victim in index.victims(excess, policy, None) or ():
            index.remove(victim.key)
            remove_quietly(victim.path)
