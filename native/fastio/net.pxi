# Socket bodies received into the caller's buffer without the GIL.
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer

import errno as errno_module


def receive_into(int fd, object buffer, Py_ssize_t start, Py_ssize_t stop, double timeout):
    """Receives from the connected socket ``fd`` into ``buffer[start:stop]``
    until it is full or the peer closes the connection; returns the position
    reached (``stop`` unless the peer closed first). Raises TimeoutError when
    ``timeout`` seconds pass before it is full, OSError on a socket error.
    The GIL is released for the whole receive."""
    cdef Py_buffer view
    cdef size_t filled = <size_t>start
    cdef int rc
    cdef long long deadline
    PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    try:
        if start < 0 or stop < start or stop > view.len:
            raise ValueError(f"cannot receive into [{start}:{stop}] of {view.len} bytes")
        deadline = fio_monotonic_ms() + <long long>(timeout * 1000.0)
        with nogil:
            rc = fio_recv_exact(fd, <unsigned char *>view.buf, <size_t>stop, &filled, deadline)
    finally:
        PyBuffer_Release(&view)
    if rc == -errno_module.ETIMEDOUT:
        raise TimeoutError(errno_module.ETIMEDOUT, "no answer in time")
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    return <Py_ssize_t>filled
