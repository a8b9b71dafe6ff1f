"""A dataset named by its folder: the shards in it, of its format, in sorted
order, as a user who points a loader at ``/data/train`` expects; what else
lies there (a README, a marker, indexes other tools wrote, subfolders) is
not read."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

import fastio
from fastio.formats._shards import shard_urls
from tests.servers import raised_within
from tests.shards import FORMATS, check_sample, key_of, write


def _clutter(folder: Path) -> None:
    """What sits beside shards in real dataset folders."""
    (folder / "README.txt").write_text("what this dataset is\n")
    (folder / "_SUCCESS").write_bytes(b"")  # Spark's and Hadoop's marker
    (folder / ".hidden.tar").write_bytes(b"not a shard")
    (folder / "nested").mkdir()
    (folder / "nested" / "other-0000.tar").write_bytes(b"not read either")


@pytest.mark.parametrize("format_name", FORMATS)
def test_a_folder_is_its_shards_each_sample_once(tmp_path: Path, format_name: str) -> None:
    written = write(format_name, tmp_path / "data", shards=3, per_shard=12)
    folder = tmp_path / "data"
    if format_name == "tfrecord":  # the tfrecord package's index files beside its shards
        for url in written.urls:
            Path(url + ".index").write_text("0 10\n")
    if format_name != "lines":  # a README.txt is itself a "lines" shard by its name
        _clutter(folder)
    options = dict(written.options)
    if format_name not in ("fixed",):  # fixed shards end in .bin: the format must be given
        options.pop("format")
    for named in (str(folder), f"{folder}/", folder):
        with fastio.Dataset(named, shuffle=False, fairness=False, **options) as dataset:
            assert dataset.urls == sorted(written.urls)
            samples = list(dataset)
        assert [key_of(format_name, sample) for sample in samples] == list(
            range(len(written.samples))
        )
        for sample in samples:
            check_sample(format_name, sample, written.samples[key_of(format_name, sample)])


def test_folders_in_braces_and_a_list(tmp_path: Path) -> None:
    train = write("webdataset", tmp_path / "train", shards=2, per_shard=5)
    val = write("webdataset", tmp_path / "val", shards=2, per_shard=5, seed=1)
    assert shard_urls(f"{tmp_path}/{{train,val}}", None) == train.urls + val.urls
    assert shard_urls([str(tmp_path / "val"), train.urls[1]], None) == [*val.urls, train.urls[1]]


def test_a_glob_matching_folders_stands_for_their_shards(tmp_path: Path) -> None:
    parts = [write("webdataset", tmp_path / f"part-{name}", shards=2, per_shard=3, seed=seed)
             for seed, name in enumerate("ab")]  # fmt: skip
    expected = parts[0].urls + parts[1].urls
    assert shard_urls(f"{tmp_path}/part-*/", None) == expected
    assert shard_urls(f"{tmp_path}/part-?", None) == expected


@pytest.mark.parametrize("name", ["exp[lr=0.1]", "run?1", "all*"])
def test_names_with_glob_characters_that_are_there_are_read_as_written(
    tmp_path: Path, name: str
) -> None:
    """A folder or file whose name holds ``[``, ``?`` or ``*`` (hyperparameters
    in run folders) is the one named, not a pattern that does not match it."""
    written = write("webdataset", tmp_path / name, shards=2, per_shard=4)
    expected = sum(1 for _ in fastio.Dataset(written.pattern, index_dir=tmp_path / "i"))
    for named in (written.urls, written.urls[0], str(tmp_path / name), f"{tmp_path / name}/"):
        with fastio.Dataset(named, index_dir=tmp_path / "index") as dataset:
            count = sum(1 for _ in dataset)
        assert count == (expected if named != written.urls[0] else dataset.total)
        assert dataset.urls == ([written.urls[0]] if named == written.urls[0] else written.urls)


def test_a_named_pipe_is_an_error_naming_it_never_a_wait(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.tar"
    os.mkfifo(pipe)  # no writer: an open() that blocks would wait for ever
    error = raised_within(lambda: list(fastio.Dataset(str(pipe), index_dir=tmp_path / "i")),
                          60, "opening a FIFO waits for a writer")  # fmt: skip
    assert isinstance(error, OSError)
    assert "not a regular file" in str(error)
    assert error.filename == str(pipe)


def test_a_folder_read_by_dataloader_workers_each_sample_once(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    written = write("webdataset", tmp_path / "data", shards=4, per_shard=15)
    _clutter(tmp_path / "data")
    dataset = fastio.Dataset(tmp_path / "data", fairness=False)
    keys: collections.Counter[int] = collections.Counter()
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    for _ in range(2):
        keys.clear()
        keys.update(key_of("webdataset", sample) for sample in loader)
        assert keys == collections.Counter(range(len(written.samples)))


def test_the_format_given_picks_the_files_of_the_folder(tmp_path: Path) -> None:
    parquet = write("parquet", tmp_path, shards=2, per_shard=5)
    jsonl = write("jsonl", tmp_path, shards=3, per_shard=5)
    assert shard_urls(str(tmp_path), "parquet") == parquet.urls
    assert shard_urls(str(tmp_path), "jsonl") == jsonl.urls
    # No format given: the one most of the files are in (3 jsonl against 2 parquet).
    assert shard_urls(str(tmp_path), None) == jsonl.urls
    (tmp_path / "extra.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match=r"as many files of jsonl as of parquet.*format="):
        shard_urls(str(tmp_path), None)


def test_shards_named_without_an_extension(tmp_path: Path) -> None:
    written = write("tfrecord", tmp_path / "data", shards=2, per_shard=6)
    for url in written.urls:
        os.rename(url, url.removesuffix(".tfrecord"))
    folder = tmp_path / "data"
    (folder / "notes.txt").write_text("a lines file: not a tfrecord shard\n")
    bare = [url.removesuffix(".tfrecord") for url in written.urls]
    assert shard_urls(str(folder), "tfrecord") == bare
    # A file named without an extension is a file, not a folder.
    with fastio.Dataset(bare[0], format="tfrecord", shuffle=False, fairness=False) as dataset:
        keys = [key_of("tfrecord", sample) for sample in dataset]
    assert keys == list(range(len(keys)))  # the first shard's samples, and no more
    assert 0 < len(keys) < len(written.samples)


@pytest.mark.parametrize("layout", ["empty", "only subfolders", "only clutter"])
def test_a_folder_without_shards_is_an_error_naming_it(tmp_path: Path, layout: str) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    if layout == "only subfolders":
        write("webdataset", folder / "part-a", shards=1, per_shard=3)
    if layout == "only clutter":
        (folder / "_SUCCESS").write_bytes(b"")
        (folder / ".DS_Store").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="holds no shard files") as raised:
        fastio.Dataset(folder, format="webdataset")
    assert raised.value.filename == str(folder)
    if layout == "only subfolders":
        assert "part-a" in str(raised.value)


def test_a_long_list_of_files_is_not_looked_up_one_by_one(tmp_path: Path) -> None:
    """Names with an extension are files: no system call each (a list of
    tens of thousands of shards opens at once)."""
    names = [str(tmp_path / f"shard-{i:05d}.tar") for i in range(100)]
    for name in names:
        os.mkdir(name)  # were they looked up, they would be read as folders of no shard
    assert shard_urls(names, None) == names
    assert shard_urls(f"{tmp_path}/shard-{{00000..00099}}.tar", None) == names


def test_an_http_url_ending_in_a_slash_is_not_listed() -> None:
    """HTTP servers list folders each their own way, if at all: such a URL
    is left as given (and its read says what is wrong with it)."""
    for url in ("http://127.0.0.1:9/data/", "https://example.com/train/"):
        assert shard_urls(url, "webdataset") == [url]


def test_a_folder_whose_name_has_a_dot_is_named_with_a_trailing_slash(tmp_path: Path) -> None:
    """Such a name is taken for a file (only names without an extension are
    looked up); what goes wrong says how to name it."""
    written = write("webdataset", tmp_path / "train.v2", shards=2, per_shard=5)
    folder = str(tmp_path / "train.v2")
    with pytest.raises(IsADirectoryError, match="trailing /") as raised:
        fastio.Dataset(folder)  # no format: its "extension" names none
    assert raised.value.filename == folder
    with pytest.raises(IsADirectoryError, match="trailing /"):
        list(fastio.Dataset(folder, format="webdataset", fairness=False))
    with fastio.Dataset(folder + "/", fairness=False) as dataset:
        assert sorted(key_of("webdataset", s) for s in dataset) == list(range(len(written.samples)))


def test_a_path_that_is_not_there_is_named_as_missing(tmp_path: Path) -> None:
    # Not "cannot tell the format": the path is mistyped, not of a strange format.
    missing = tmp_path / "trian"
    with pytest.raises(FileNotFoundError, match="no such file") as raised:
        fastio.Dataset(str(missing))
    assert raised.value.filename == str(missing)
    (tmp_path / "notes").write_text("x")  # there, of no format: what it was
    with pytest.raises(ValueError, match="cannot tell the format"):
        fastio.Dataset(str(tmp_path / "notes"))


def test_an_index_into_a_missing_folder_is_an_error_naming_the_index(tmp_path: Path) -> None:
    written = write("webdataset", tmp_path / "data", shards=2, per_shard=5, index=False)
    target = tmp_path / "missing" / "x.fastio-index.npz"
    with pytest.raises(FileNotFoundError) as raised:
        fastio.Dataset(written.pattern).save_index(str(target))
    assert raised.value.filename == str(target)


def test_paths_that_start_with_a_tilde_are_in_the_home_folder(tmp_path: Path, monkeypatch) -> None:
    """``~/data`` in a config file (which no shell expands) or a keyword is the
    home folder's, for the shards and for every folder fastio writes to: not
    a folder named ``~`` in the working one."""
    home = tmp_path / "home"
    written = write("webdataset", home / "data", shards=2, per_shard=6, index=False)
    count = len(written.samples)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "fastio.yaml"
    config.write_text(
        "urls: ~/data/\nshuffle: {enabled: false}\nformat_options: {index_dir: ~/index}\n"
        "cache: {dir: ~/cache, max_bytes: 64MiB}\n"
    )
    with fastio.load_config(config).to_dataset() as dataset:
        assert dataset.urls == written.urls
        assert [key_of("webdataset", sample) for sample in dataset] == list(range(count))
    with fastio.Dataset([f"~/data/{Path(url).name}" for url in written.urls], shuffle=False,
                        index_dir="~/index") as dataset:  # fmt: skip
        assert dataset.urls == written.urls
        assert len(list(dataset)) == count
    assert not (tmp_path / "~").exists()
    assert os.listdir(home / "index")  # the first epoch's indexes, kept where asked
