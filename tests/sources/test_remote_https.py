"""Shards over HTTPS (fsspec's HTTP filesystem, aiohttp under it) from a real
TLS server on loopback with a certificate of the tests' own authority: the
samples equal the local files', and a server that cannot be reached, one
whose certificate is not trusted and one that refuses an object are errors
naming the URL (or, under ``skip``, counted shards), never aiohttp's own."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import trustme

import fastio
from tests.servers import RangeServer
from tests.shards import key_of, write

# fsspec's blockcache (2026.9) maps each object's sparse copy and drops the
# file it mapped it from unclosed (collected later): its copies are kept in
# folders named "blockcache-files", and what is left open there is its own.
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:unclosed file <_io.BufferedRandom name='[^']*/blockcache-files/:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <_io.FileIO name='[^']*/blockcache-files/"
        ":pytest.PytestUnraisableExceptionWarning"),
]  # fmt: skip


@pytest.fixture(scope="module")
def authority():
    return trustme.CA()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("served")


@pytest.fixture(scope="module")
def https(folder, authority):
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    server = RangeServer(folder, tls=context).start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def no_faults(https):
    https.faults = type(https.faults)()


@pytest.fixture(scope="module")
def tars(folder):
    return write("webdataset", folder / "tars", shards=3, per_shard=12, index=False)


@pytest.fixture
def trusting(authority):
    """Storage options that trust the tests' authority (aiohttp's ``ssl``)."""
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return {"ssl": context}


def https_dataset(https, tars, tmp_path, **options) -> fastio.Dataset:
    pattern = https.url("tars/" + tars.pattern.rsplit("/", 1)[1])
    return fastio.Dataset(pattern, shuffle=False, index_dir=tmp_path, **options)


def keys(samples) -> list[int]:
    return [key_of("webdataset", sample) for sample in samples]


def without_urls(samples) -> list[dict]:
    """The samples without the URL each came from (which differs by source)."""
    return [{k: v for k, v in sample.items() if k != "__url__"} for sample in samples]


def cached_dataset(https, tars, tmp_path, trusting, cache: str, name: str,
                   **options) -> fastio.Dataset:  # fmt: skip
    """The shards through fsspec's ``cache`` chained before HTTPS, its copies
    in a folder of ``name``."""
    url = cache + "::" + https.url("tars/" + tars.pattern.rsplit("/", 1)[1])
    storage = {"https": trusting, cache: {"cache_storage": str(tmp_path / f"{cache}-files" / name)}}
    return fastio.Dataset(url, shuffle=False, index_dir=tmp_path / f"index-{name}",
                          storage_options=storage, **options)  # fmt: skip


def test_https_shards_deliver_what_the_local_files_hold(https, tars, tmp_path, trusting):
    local = fastio.Dataset(tars.urls, shuffle=False, index_dir=tmp_path / "local")
    dataset = https_dataset(https, tars, tmp_path / "remote", storage_options=trusting)
    for _ in range(2):  # never seen, then indexed
        assert without_urls(dataset) == without_urls(local)
    assert https.faults.gets  # the samples came from the server


@pytest.mark.parametrize("indexed", [False, True], ids=["never seen", "indexed"])
def test_an_https_server_that_answers_part_of_each_range(https, tars, tmp_path, trusting, indexed):
    """A server may answer part of a range, its Content-Range saying which:
    the rest is asked for, and every sample comes whole."""
    local = fastio.Dataset(tars.urls, shuffle=False, index_dir=tmp_path / "local")
    dataset = https_dataset(https, tars, tmp_path / "remote", storage_options=trusting,
                            read_size="64KiB")  # fmt: skip
    if indexed:
        dataset.index()
    https.faults.range_cap = 3001
    assert without_urls(dataset) == without_urls(local)
    assert any(length == 3001 for _, _, length in https.faults.asked)  # answered in part


def test_an_https_server_ignoring_range_is_an_error(https, tars, tmp_path, trusting):
    """Answers of the whole object (200) to ranges past its start are
    refused, never taken for the range's bytes."""
    dataset = https_dataset(https, tars, tmp_path, storage_options=trusting, read_size="16KiB")
    dataset.index()
    https.faults.ignore_range = True
    with pytest.raises(fastio.RangeIgnoredError, match="ignores Range") as caught:
        list(dataset)
    assert caught.value.filename == dataset.urls[0]


def test_an_unreachable_https_server_is_a_connection_error_naming_the_url(tmp_path):
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"https://127.0.0.1:{port}/data/shard-{{0..1}}.tar"
    with pytest.raises(fastio.FastIOError) as caught:
        list(fastio.Dataset(url, shuffle=False, index_dir=tmp_path, retries=0))
    assert isinstance(caught.value, ConnectionError)
    assert caught.value.filename.startswith(f"https://127.0.0.1:{port}/data/")


def test_an_untrusted_certificate_is_an_error_naming_the_url(https, tars, tmp_path):
    with pytest.raises(fastio.FastIOError, match="certificate") as caught:
        list(https_dataset(https, tars, tmp_path, retries=0))  # the system's authorities
    assert caught.value.filename.startswith(https.url("tars/"))


def test_a_forbidden_https_object_is_a_permission_error_or_a_counted_shard(
    https, tars, tmp_path, trusting
):
    denied = https_dataset(https, tars, tmp_path / "a", storage_options=trusting).urls[1]
    https.faults.forbidden.add("tars/" + denied.rsplit("/", 1)[1])
    with pytest.raises(PermissionError, match="403") as caught:
        list(https_dataset(https, tars, tmp_path / "b", storage_options=trusting))
    assert caught.value.filename == denied
    skipping = https_dataset(https, tars, tmp_path / "c", storage_options=trusting,
                             on_error="skip")  # fmt: skip
    kept = fastio.Dataset([u for u in tars.urls if not denied.endswith(u.rsplit("/", 1)[1])],
                          shuffle=False, index_dir=tmp_path / "local")  # fmt: skip
    assert keys(skipping) == keys(kept)
    assert skipping.stats()["shards_skipped"] == 1


@pytest.mark.parametrize("cache", ["blockcache", "filecache", "simplecache"])
def test_fsspec_caches_over_https_read_never_seen_shards_and_name_a_refusal(
    https, tars, tmp_path, trusting, cache
):
    """A cache of fsspec's chained before HTTPS: the object's size is asked
    of the HTTPS filesystem (the cache's own asks for a folder listing an
    HTTP server need not give); a refused object is a PermissionError
    naming the chained URL, or under ``skip`` one counted shard."""
    local = fastio.Dataset(tars.urls, shuffle=False, index_dir=tmp_path / "local")
    assert keys(cached_dataset(https, tars, tmp_path, trusting, cache, "whole")) == keys(local)
    denied = tars.urls[1].rsplit("/", 1)[1]
    https.faults.forbidden.add("tars/" + denied)
    refused = cached_dataset(https, tars, tmp_path, trusting, cache, "raise")
    with pytest.raises(PermissionError, match="403") as caught:
        list(refused)
    assert caught.value.filename == f"{cache}::" + https.url("tars/" + denied)
    skipping = cached_dataset(https, tars, tmp_path, trusting, cache, "skip", on_error="skip")
    kept = [u for u in tars.urls if not u.endswith(denied)]
    assert keys(skipping) == keys(fastio.Dataset(kept, shuffle=False, index_dir=tmp_path / "k"))
    assert skipping.stats()["shards_skipped"] == 1


@pytest.mark.parametrize("cache", ["blockcache", "filecache", "simplecache"])
def test_fsspec_caches_over_https_serve_the_second_pass(https, tars, tmp_path, trusting, cache):
    """Reads go through the cache (not around it to the HTTPS filesystem it
    copies): a second pass, by a new dataset as another process makes it,
    asks the server for no data; many reads in flight while the first
    copies are made deliver every sample intact."""
    options = {"read_size": "16KiB", "outstanding_requests": 16}
    local = fastio.Dataset(tars.urls, shuffle=False, index_dir=tmp_path / "local")
    first = cached_dataset(https, tars, tmp_path, trusting, cache, "copies", **options)
    assert without_urls(first) == without_urls(local)
    https.faults = type(https.faults)()
    again = cached_dataset(https, tars, tmp_path, trusting, cache, "copies", **options)
    assert without_urls(again) == without_urls(local)
    assert sum(https.faults.served.values()) == 0, https.faults.served


def test_an_http_address_moved_to_https_is_followed(https, tars, tmp_path, authority):
    """An http:// address whose server redirects every request to https://
    (fastio's own HTTP client reads plain HTTP only): its reads go through
    fsspec, which follows, never seen, indexed and into the shard cache.
    The authority is trusted as users trust a private one (SSL_CERT_FILE),
    in a process of its own: aiohttp reads it when imported."""
    authority_file = tmp_path / "authority.pem"
    authority.cert_pem.write_to_path(str(authority_file))
    plain = RangeServer(https.root).start()
    try:
        plain.faults.moved_to = https.url("")
        url = plain.url("tars/" + tars.pattern.rsplit("/", 1)[1])
        script = f"""
import json, fastio
from tests.shards import key_of
def keys(**options):
    return [key_of("webdataset", s) for s in fastio.Dataset({url!r}, shuffle=False, **options)]
index = {str(tmp_path / "index")!r}
print(json.dumps([keys(index_dir=index), keys(index_dir=index),
                  keys(index_dir=index, cache_dir={str(tmp_path / "cache")!r},
                       cache_bytes=1 << 30)]))
"""
        env = {**os.environ, "SSL_CERT_FILE": str(authority_file)}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=300, cwd=Path(__file__).parents[2])  # fmt: skip
    finally:
        plain.stop()
    assert done.returncode == 0, done.stderr
    local = keys(fastio.Dataset(tars.urls, shuffle=False, index_dir=tmp_path / "local"))
    assert json.loads(done.stdout) == [local, local, local]
    assert https.faults.gets  # the samples came from where the redirects point


@pytest.fixture(scope="module")
def archives(folder, tars):
    """The shards in a zip archive and a tar archive (Python's own writers)."""
    with zipfile.ZipFile(folder / "shards.zip", "w") as archive:
        for url in tars.urls:
            archive.write(url, Path(url).name)
    with tarfile.open(folder / "shards.tar", "w") as archive:
        for url in tars.urls:
            archive.add(url, Path(url).name)
    return folder


@pytest.mark.parametrize("kind", ["zip", "tar"])
@pytest.mark.parametrize("where", ["file", "https"])
def test_shards_inside_an_archive_read_through_an_fsspec_chain(
    https, tars, archives, tmp_path, trusting, kind, where
):
    """``zip://train-{0..2}.tar::<archive URL>``: the format comes from the
    member's name, each member is read from the archive it is in, and the
    samples equal the files', with many reads in flight (an archive's members
    are read through one file of it)."""
    members = tars.pattern.rsplit("/", 1)[1]
    archive = (
        https.url(f"shards.{kind}") if where == "https" else f"file://{archives}/shards.{kind}"
    )
    options = {"storage_options": {"https": trusting}} if where == "https" else {}
    local = fastio.Dataset(tars.urls, shuffle=False, index_dir=tmp_path / "local")
    dataset = fastio.Dataset(f"{kind}://{members}::{archive}", shuffle=False,
                             index_dir=tmp_path / "index", read_size="16KiB",
                             outstanding_requests=16, **options)  # fmt: skip
    for _ in range(2):  # never seen, then indexed
        assert without_urls(dataset) == without_urls(local)
