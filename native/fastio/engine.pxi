# The engine: reads into caller buffers, which stay exported while the kernel
# or a worker thread writes into them; errno becomes OSError.
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uintptr_t
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memchr, memcmp, memcpy, memset

import os


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    int PyUnicode_KIND(object text)
    const void *PyUnicode_DATA(object text)
    Py_UCS4 PyUnicode_READ(int kind, const void *data, Py_ssize_t index)
    enum: PyUnicode_1BYTE_KIND
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    Py_ssize_t PyUnicode_Tailmatch(object text, object part, Py_ssize_t start, Py_ssize_t end,
                                   int direction) except -1
    Py_ssize_t PyUnicode_FindChar(object text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end,
                                  int direction) except -2

_KINDS = {"auto": FIO_ENGINE_AUTO, "io_uring": FIO_ENGINE_URING, "threads": FIO_ENGINE_THREADS}
_NAMES = {FIO_ENGINE_URING: "io_uring", FIO_ENGINE_THREADS: "threads"}


cdef inline int _raise_errno(int negative_errno, str what) except -1:
    raise OSError(-negative_errno, f"{what}: {os.strerror(-negative_errno)}")


cdef class Engine:
    """Positional reads into caller buffers, completed asynchronously.

    ``kind`` is ``"io_uring"``, ``"threads"`` (a pread thread pool) or ``"auto"``
    (io_uring, else threads; ``fallback_errno`` then says why io_uring was not
    used). Completions make :meth:`fileno` (an eventfd) readable; call
    :meth:`reap` then. One thread at a time may use an engine.
    """

    def __cinit__(self, str kind="auto", unsigned capacity=256, unsigned max_threads=0):
        cdef int uring_errno = 0
        cdef int rc
        if kind not in _KINDS:
            raise ValueError(f"engine kind must be one of {sorted(_KINDS)}, not {kind!r}")
        if capacity == 0 or capacity > 65536:
            raise ValueError(f"capacity must be in 1..65536, not {capacity}")
        self._views = <Py_buffer *>calloc(capacity, sizeof(Py_buffer))
        self._completions = <fio_completion *>calloc(capacity, sizeof(fio_completion))
        if self._views == NULL or self._completions == NULL:
            raise MemoryError()
        rc = fio_engine_open(&self._engine, _KINDS[kind], capacity,
                             max_threads or capacity, &uring_errno)
        if rc < 0:
            _raise_errno(rc, f"cannot start the {kind} I/O engine")
        self.kind = _NAMES[fio_engine_kind(self._engine)]
        self.capacity = capacity
        self.fallback_errno = uring_errno
        self._owner_pid = os.getpid()

    def __dealloc__(self):
        cdef unsigned i
        if self._engine != NULL:
            if not self._closed and os.getpid() == self._owner_pid:
                fio_engine_shutdown(self._engine)
                while fio_engine_inflight(self._engine):
                    fio_engine_wait(self._engine, 100)
                    fio_engine_reap(self._engine, self._completions, self.capacity)
            fio_engine_destroy(self._engine)
            self._engine = NULL
        if self._views != NULL:
            for i in range(self.capacity):
                PyBuffer_Release(&self._views[i])
            free(self._views)
        free(self._completions)

    cdef fio_engine *_live(self) except NULL:
        if self._closed:
            raise ValueError("I/O operation on a closed engine")
        if os.getpid() != self._owner_pid:
            raise RuntimeError(
                f"this engine was created in process {self._owner_pid} and cannot be used "
                f"after fork; create a new one in process {os.getpid()}")
        return self._engine

    @property
    def closed(self):
        return self._closed

    @property
    def inflight(self):
        """Reads submitted and not yet reaped."""
        return 0 if self._closed else fio_engine_inflight(self._engine)

    @property
    def threads(self):
        """Worker threads running (thread pool only; io_uring uses none of ours)."""
        return 0 if self._closed else fio_engine_threads(self._engine)

    def fileno(self):
        """The eventfd that becomes readable when completions may be waiting."""
        return fio_engine_eventfd(self._live())

    def submit(self, int fd, object buffer, unsigned long long offset,
               unsigned long long tag, bint direct=False):
        """Queue a read filling ``buffer`` (writable, contiguous) from ``offset``.

        The engine keeps the buffer exported until the read is reaped. Nothing
        starts before :meth:`flush`. Raises BlockingIOError when ``capacity``
        reads are already in flight, ValueError for a buffer that O_DIRECT
        cannot use.
        """
        cdef fio_engine *engine = self._live()
        cdef Py_buffer view
        cdef int slot
        PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
        if direct and ((<uintptr_t>view.buf) % FIO_DIRECT_SECTOR
                       or view.len % FIO_DIRECT_SECTOR or offset % FIO_DIRECT_SECTOR):
            PyBuffer_Release(&view)
            raise ValueError("O_DIRECT reads need buffer address, length and offset "
                             f"aligned to {FIO_DIRECT_SECTOR} bytes")
        slot = fio_engine_prep_read(engine, fd, view.buf, <size_t>view.len, offset, tag,
                                    FIO_READ_DIRECT if direct else 0)
        if slot < 0:
            PyBuffer_Release(&view)
            if slot == -11:  # EAGAIN
                raise BlockingIOError(11, f"all {self.capacity} engine slots are in flight")
            _raise_errno(slot, "cannot queue read")
        self._views[slot] = view

    def flush(self):
        """Start every queued read. Returns how many started."""
        cdef fio_engine *engine = self._live()
        cdef int rc
        with nogil:
            rc = fio_engine_flush(engine)
        if rc < 0:
            _raise_errno(rc, "cannot submit reads")
        return rc

    cdef int _reap_into(self, list results) except -1:
        cdef int count, i
        cdef fio_completion *done
        while True:
            # Releasing a view or appending a result may run the garbage
            # collector, whose finalizers may close this engine (an abandoned
            # reader's): its completions were reaped then, and it is gone.
            if self._engine == NULL:
                return 0
            with nogil:
                count = fio_engine_reap(self._engine, self._completions, self.capacity)
            for i in range(count):
                done = &self._completions[i]
                PyBuffer_Release(&self._views[done.slot])
                if results is not None:
                    results.append((done.tag, done.result))
            if <unsigned>count < self.capacity:
                return 0

    def reap(self):
        """Finished reads as ``[(tag, result), ...]`` without blocking; ``result``
        is the byte count, or ``-errno`` for a failed read."""
        self._live()
        cdef list results = []
        self._reap_into(results)
        return results

    def wait(self, timeout=None):
        """Block (without the GIL) until a completion may be ready, or
        ``timeout`` seconds pass. Returns True if one may be ready."""
        cdef fio_engine *engine = self._live()
        cdef int timeout_ms = -1 if timeout is None else max(0, int(timeout * 1000))
        cdef int rc
        with nogil:
            rc = fio_engine_wait(engine, timeout_ms)
        if rc < 0:
            _raise_errno(rc, "cannot wait for completions")
        return rc > 0

    def close(self):
        """Cancel reads not yet started, wait for the running ones and free
        everything: fds, threads, buffers. Idempotent."""
        cdef unsigned i
        if self._closed:
            return
        self._closed = True
        if os.getpid() == self._owner_pid:
            fio_engine_shutdown(self._engine)
            while fio_engine_inflight(self._engine):
                with nogil:
                    fio_engine_wait(self._engine, 100)
                self._reap_into(None)
        fio_engine_destroy(self._engine)
        self._engine = NULL
        for i in range(self.capacity):
            PyBuffer_Release(&self._views[i])

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else f"inflight={self.inflight}"
        return f"<Engine {self.kind} capacity={self.capacity} {state}>"


def resident_fraction(int fd, uint64_t offset, uint64_t length, unsigned probes=16,
                      uint64_t window=1 << 20, bint mapped=False):
    """The share (0.0..1.0) of the sampled pages of bytes ``offset`` to
    ``offset + length`` of ``fd`` that the page cache holds: ``probes`` windows
    of ``window`` bytes spread over the span (all of it when smaller), asked
    of cachestat(2), else (before Linux 6.5, or with ``mapped``) of mincore(2)
    over a mapping of the file. Raises OSError where the file has no page
    cache to ask about (a pipe, some special files)."""
    cdef uint64_t resident = 0, probed = 0
    cdef int rc
    cdef int flags = FIO_RESIDENT_MAPPED if mapped else 0
    with nogil:
        rc = fio_resident_pages(fd, offset, length, probes, window, flags, &resident, &probed)
    if rc < 0:
        _raise_errno(rc, "cannot tell what the page cache holds")
    return resident / probed if probed else 1.0


def read_resident(list paths, list offsets, list lengths, double least=1.0):
    """The bytes of each range (``offsets[i]``, ``lengths[i]`` of the local
    path ``paths[i]``, ``bytes`` as ``os.fsencode`` makes them), read in one
    call without the GIL where the page cache holds at least ``least`` of the
    range's pages; None for a range not read whole here (colder, past the
    file's end, or failing: a read through the reader reports why). Ranges of
    one file that follow each other open it once."""
    cdef Py_ssize_t count = len(paths), i
    if len(offsets) != count or len(lengths) != count:
        raise ValueError("need as many offsets and lengths as paths")
    cdef const char **names = <const char **>calloc(count + 1, sizeof(char *))
    cdef uint64_t *starts = <uint64_t *>calloc(count + 1, sizeof(uint64_t))
    cdef uint64_t *sizes = <uint64_t *>calloc(count + 1, sizeof(uint64_t))
    cdef uint64_t *got = <uint64_t *>calloc(count + 1, sizeof(uint64_t))
    cdef char **dests = <char **>calloc(count + 1, sizeof(char *))
    cdef list found = []
    try:
        if names == NULL or starts == NULL or sizes == NULL or got == NULL or dests == NULL:
            raise MemoryError()
        for i in range(count):
            names[i] = <bytes?>paths[i]  # each kept alive by the list
            starts[i] = offsets[i]
            sizes[i] = lengths[i]
            data = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>sizes[i])
            dests[i] = PyBytes_AS_STRING(data)
            found.append(data)  # filled below, before anything else sees it
        with nogil:
            fio_read_resident(names, starts, sizes, dests, <size_t>count, least, got)
        for i in range(count):
            if got[i] != sizes[i]:
                found[i] = None
        return found
    finally:
        free(names)
        free(starts)
        free(sizes)
        free(got)
        free(dests)


cdef list _arrow_blocks(const fio_arrow_block *blocks, size_t count):
    return [(blocks[i].offset, blocks[i].meta, blocks[i].body) for i in range(count)]


def arrow_footer(const unsigned char[::1] footer):
    """The record batch blocks and the dictionary blocks ``(offset, metadata
    bytes, body bytes)`` of an Arrow IPC file's footer (its flatbuffer, without
    the length and magic after it); None for a footer that points outside
    itself."""
    cdef fio_arrow_block *blocks = NULL
    cdef size_t batches = 0, dictionaries = 0
    cdef int rc
    with nogil:
        rc = fio_arrow_footer(&footer[0] if footer.shape[0] else NULL, footer.shape[0],
                              &blocks, &batches, &dictionaries)
    if rc:
        return None
    try:
        return _arrow_blocks(blocks, batches), _arrow_blocks(blocks + batches, dictionaries)
    finally:
        free(blocks)


def arrow_message_rows(const unsigned char[::1] message):
    """The rows of an Arrow IPC record batch message (its metadata, from its
    continuation marker or length on), or -1 for a damaged one."""
    if not message.shape[0]:
        return -1
    return fio_arrow_message_rows(&message[0], message.shape[0])


def arrow_message(const unsigned char[::1] message):
    """What an Arrow IPC message's metadata (from its continuation marker or
    length on) says: ``(type, body bytes, rows)``, its header's type (1
    schema, 2 dictionary batch, 3 record batch), its body's length and, for a
    record batch, its rows; None for a damaged one."""
    cdef fio_arrow_message_info info
    if not message.shape[0] or fio_arrow_message(&message[0], message.shape[0], &info):
        return None
    return info.type, info.body, info.rows


def arrow_scan(list paths, uint64_t first_bytes, uint64_t schema_max):
    """What laying out each local Arrow IPC file of ``paths`` (``bytes``, as
    ``os.fsencode`` makes them) needs, read in one call without the GIL where
    the page cache holds every byte of each read: ``(size,
    tail start, tail, head, record batch blocks, dictionary blocks, rows of
    each record batch)``, the tail its bytes from its footer on (read as its
    last ``first_bytes``, or as much more as its footer takes), the head its
    first to its schema message's end (read as ``first_bytes``, or more up to
    ``schema_max``), a block ``(offset, metadata bytes, body bytes)``. An
    Arrow IPC stream (no footer) is walked message by message: its tail is
    empty, its head its schema message. None for a file to read the other
    way: colder, damaged or laid out unusually (that reading reports what is
    wrong)."""
    cdef Py_ssize_t count = len(paths), i
    cdef const char **names = <const char **>calloc(count + 1, sizeof(char *))
    cdef fio_arrow_file *files = <fio_arrow_file *>calloc(count + 1, sizeof(fio_arrow_file))
    cdef int *found = <int *>calloc(count + 1, sizeof(int))
    cdef fio_arrow_file *file
    cdef list scanned = []
    try:
        if names == NULL or files == NULL or found == NULL:
            raise MemoryError()
        for i in range(count):
            names[i] = <bytes?>paths[i]  # each kept alive by the list
        with nogil:
            for i in range(count):
                found[i] = fio_arrow_scan(names[i], first_bytes, schema_max, &files[i])
        for i in range(count):
            if not found[i]:
                scanned.append(None)
                continue
            file = &files[i]
            scanned.append((
                file.size, file.tail_start,
                PyBytes_FromStringAndSize(<char *>file.tail, <Py_ssize_t>file.tail_length),
                PyBytes_FromStringAndSize(<char *>file.head, <Py_ssize_t>file.head_length),
                _arrow_blocks(file.blocks, file.batches),
                _arrow_blocks(file.blocks + file.batches, file.dictionaries),
                [file.blocks[k].rows for k in range(file.batches)],
            ))
        return scanned
    finally:
        if files != NULL:
            for i in range(count):
                fio_arrow_file_free(&files[i])
        free(names)
        free(files)
        free(found)


def normal_paths(list paths):
    """Whether every one of ``paths`` is a ``str`` that is an absolute, normal
    local path: it begins with ``/``, has no ``.``, ``..`` or empty part (no
    ``/.`` nor ``//``: no protocol either) and does not end with ``/`` (a
    dataset keys thousands of shards before its first sample, and such a
    path is its own key)."""
    cdef Py_ssize_t length, at
    cdef int kind
    cdef const void *data
    cdef const char *text
    cdef const char *end
    cdef const char *slash
    cdef Py_UCS4 character, previous
    for path in paths:
        if not isinstance(path, str):
            return False
        length = PyUnicode_GET_LENGTH(path)
        kind, data = PyUnicode_KIND(path), PyUnicode_DATA(path)
        if length == 0 or PyUnicode_READ(kind, data, 0) != 47 \
                or PyUnicode_READ(kind, data, length - 1) == 47:  # "/"
            return False
        if kind == PyUnicode_1BYTE_KIND:  # from slash to slash (most paths: a few each)
            text, end = <const char *>data, <const char *>data + length - 1
            slash = text
            while slash != NULL:
                if slash[1] == 46 or slash[1] == 47:  # (the last character is no slash)
                    return False
                slash = <const char *>memchr(slash + 1, 47, end - slash - 1)
            continue
        previous = 47
        for at in range(1, length):
            character = PyUnicode_READ(kind, data, at)
            if previous == 47 and (character == 46 or character == 47):  # "/." or "//"
                return False
            previous = character
    return True


def ends_alike(list texts, str ending):
    """Whether every one of ``texts`` is a ``str`` that ends with ``ending``
    (a dataset's shards mostly end alike: thousands told in one loop)."""
    for text in texts:
        if type(text) is not str or not PyUnicode_Tailmatch(text, ending, 0, len(text), 1):
            return False
    return True


cdef bint _same_text(str a, Py_ssize_t a_at, str b, Py_ssize_t b_at, Py_ssize_t length):
    """Whether ``a[a_at:a_at + length] == b[b_at:b_at + length]`` (both in range)."""
    cdef int a_kind = PyUnicode_KIND(a), b_kind = PyUnicode_KIND(b)
    cdef const char *a_data = <const char *>PyUnicode_DATA(a)
    cdef const char *b_data = <const char *>PyUnicode_DATA(b)
    cdef Py_ssize_t i
    if a_kind == b_kind:
        return memcmp(a_data + a_at * a_kind, b_data + b_at * b_kind, length * a_kind) == 0
    for i in range(length):
        if PyUnicode_READ(a_kind, a_data, a_at + i) != PyUnicode_READ(b_kind, b_data, b_at + i):
            return False
    return True


def joined_alike(str joined, str prefix, list names):
    """Whether ``names`` are, in order, ``prefix`` before each of the names
    that ``joined`` holds joined by NULs (as many, none of them holding a
    NUL): one pass, no string made (a dataset index of 20,000 shards names
    them relative to its folder; the dataset's own names are absolute)."""
    cdef Py_ssize_t count = len(names), at = 0, end, length = len(joined)
    cdef Py_ssize_t before = len(prefix), i
    if count == 0:
        return False
    for i in range(count):
        name = names[i]
        if type(name) is not str or at > length:
            return False
        end = PyUnicode_FindChar(joined, 0, at, length, 1)
        if end < 0:
            end = length
        if PyUnicode_GET_LENGTH(name) != before + end - at \
                or not _same_text(name, 0, prefix, 0, before) \
                or not _same_text(name, before, joined, at, end - at):
            return False
        at = end + 1
    return at == length + 1


def ascii_only(const unsigned char[::1] data):
    """Whether every byte of ``data`` is ASCII (text that decodes as UTF-8
    whatever it holds: it need not be decoded to be checked)."""
    cdef Py_ssize_t size = data.shape[0], i
    cdef unsigned char seen = 0
    if size == 0:
        return True
    cdef const unsigned char *at = &data[0]
    for i in range(size):
        seen |= at[i]
    return seen < 0x80


def repeated_unit(const unsigned char[::1] data, Py_ssize_t count):
    """The length of the bytes before ``data``'s first NUL, where ``data``
    begins with ``count`` copies of them, each followed by a NUL; else -1
    (a dataset index's shard formats, mostly all one, told without
    decoding them)."""
    cdef Py_ssize_t size = data.shape[0], unit, i
    if count < 1 or size == 0:
        return -1
    cdef const unsigned char *at = &data[0]
    cdef const unsigned char *end = <const unsigned char *>memchr(at, 0, size)
    if end == NULL:
        return -1
    unit = end - at + 1
    if unit * count > size:
        return -1
    for i in range(1, count):
        if memcmp(at, at + i * unit, unit) != 0:
            return -1
    return unit - 1


def numbered_names(str head, int64_t first, int64_t last, Py_ssize_t width, str tail):
    """``[head + str(n).zfill(width) + tail for n in range(first, last + 1)]``
    for ``0 <= first``: the names of one brace range (a dataset may have
    thousands of shards, named at each open)."""
    if first < 0 or width < 0 or width > 64:
        raise ValueError("numbers from 0, widths up to 64")
    cdef bytes start = head.encode("utf-8", "surrogatepass")
    cdef bytes end = tail.encode("utf-8", "surrogatepass")
    cdef Py_ssize_t before = len(start), after = len(end), digits, pad, at
    cdef char *name = <char *>malloc(before + 84 + after)
    cdef char number[24]
    cdef uint64_t rest
    cdef int64_t n
    cdef list names = []
    cdef bint ascii = PyUnicode_IS_ASCII(head) and PyUnicode_IS_ASCII(tail)
    if name == NULL:
        raise MemoryError()
    try:
        memcpy(name, PyBytes_AS_STRING(start), before)
        for n in range(first, last + 1):
            rest, digits = <uint64_t>n, 0
            while True:
                number[digits] = 48 + rest % 10  # "0"..
                digits += 1
                rest //= 10
                if rest == 0:
                    break
            pad = width - digits if width > digits else 0
            memset(name + before, 48, pad)
            for at in range(digits):
                name[before + pad + at] = number[digits - 1 - at]
            memcpy(name + before + pad + digits, PyBytes_AS_STRING(end), after)
            if ascii:  # its bytes are the string's own
                made = PyUnicode_New(before + pad + digits + after, 127)
                memcpy(<void *>PyUnicode_DATA(made), name, before + pad + digits + after)
                names.append(made)
            else:
                names.append(PyUnicode_DecodeUTF8(name, before + pad + digits + after,
                                                  "surrogatepass"))  # fmt: skip
    finally:
        free(name)
    return names


def stat_stamps(list paths, uint64_t round_trip_ns=50_000):
    """``(size, modification time in ns, change stamp)`` of each local path in
    ``paths``, or the errno where its ``stat`` failed: the stamps of many
    files in one call, without the GIL (a dataset may have thousands of
    shards), in two ``bytes`` (no object a path): the stamps, three native
    int64 a path (zeros where it failed), and the errnos, a native int32 a
    path (0 where it was statted). A path is ``bytes`` (as ``os.fsencode``
    makes them) or ``str`` (encoded as ``os.fsencode`` does; a ``file://``
    before it left out). Where the first stats take ``round_trip_ns`` or more
    each (a network filesystem: NFS, Lustre, a FUSE mount of a bucket), up to
    32 threads ask for the rest at once."""
    job = StatsJob(paths)
    job.run(round_trip_ns)
    return job.result()


cdef class StatsJob:
    """:func:`stat_stamps` of ``paths`` as a job: :meth:`run` on one thread
    (with up to ``threads`` in all where the files are local), :meth:`help`
    on any other while it runs (it returns once no stat is left to take),
    :meth:`result` once every one of them has returned. Raises TypeError or
    ValueError for a path that is no path, as it is made."""

    cdef const char **_names
    cdef int64_t *_stamps
    cdef int *_errors
    cdef Py_ssize_t _count
    cdef list _kept  # the paths, and those not ASCII encoded: alive while the job is
    cdef fio_stamps_job *_job

    def __cinit__(self, list paths):
        cdef Py_ssize_t count = len(paths), i, length
        cdef const char *name
        self._count = count
        self._kept = [paths]
        self._names = <const char **>calloc(count + 1, sizeof(char *))
        self._stamps = <int64_t *>calloc(3 * count + 1, sizeof(int64_t))
        self._errors = <int *>calloc(count + 1, sizeof(int))
        if self._names == NULL or self._stamps == NULL or self._errors == NULL:
            raise MemoryError()
        for i in range(count):
            path = paths[i]
            text = type(path) is str
            if text and PyUnicode_IS_ASCII(path):
                # Its ASCII characters are its UTF-8 and its file system bytes.
                name = PyUnicode_AsUTF8AndSize(path, &length)
            else:
                if text:
                    path = os.fsencode(path)
                    self._kept.append(path)
                elif not isinstance(path, bytes):
                    raise TypeError(f"a path is str or bytes, not {type(path).__name__}")
                name = PyBytes_AS_STRING(path)  # kept alive by the list or by ``_kept``
                length = len(path)
            if memchr(name, 0, length) != NULL:
                raise ValueError(f"embedded null byte in {paths[i]!r}")
            if text and length >= 7 and memcmp(name, b"file://", 7) == 0:
                name += 7
            self._names[i] = name
        self._job = fio_stamps_new(self._names, count, self._stamps, self._errors)
        if self._job == NULL:
            raise MemoryError()

    def run(self, uint64_t round_trip_ns=50_000, size_t threads=2):
        with nogil:
            fio_stamps_run(self._job, round_trip_ns, threads)

    def help(self):
        with nogil:
            fio_stamps_help(self._job)

    def result(self):
        return (PyBytes_FromStringAndSize(<char *>self._stamps,
                                          3 * self._count * sizeof(int64_t)),
                PyBytes_FromStringAndSize(<char *>self._errors, self._count * sizeof(int)))

    def __dealloc__(self):
        if self._job != NULL:
            fio_stamps_free(self._job)
        free(self._names)
        free(self._stamps)
        free(self._errors)
