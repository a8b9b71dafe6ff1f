# Socket bodies received into the caller's buffer without the GIL.
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer

import errno as errno_module


cdef class ArrivalCounter:
    """Bytes :func:`receive_into` received, counted as they arrive (by any
    thread, without the GIL): a long body's progress before it completes."""

    cdef unsigned long long count

    @property
    def value(self):
        return fio_counter_load(&self.count)

    def add(self, unsigned long long amount):
        """Counts ``amount`` bytes that arrived another way (with a header)."""
        fio_counter_add(&self.count, amount)


def receive_into(int fd, object buffer, Py_ssize_t start, Py_ssize_t stop, double timeout,
                 ArrivalCounter arrivals=None):
    """Receives from the connected socket ``fd`` into ``buffer[start:stop]``
    until it is full or the peer closes the connection; returns the position
    reached (``stop`` unless the peer closed first). Adds what arrives to
    ``arrivals`` as it arrives. Raises TimeoutError when ``timeout`` seconds
    pass before it is full, OSError on a socket error. The GIL is released
    for the whole receive."""
    cdef Py_buffer view
    cdef size_t filled = <size_t>start
    cdef int rc
    cdef long long deadline
    cdef unsigned long long *arrived = NULL
    if arrivals is not None:
        arrived = &arrivals.count
    PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    try:
        if start < 0 or stop < start or stop > view.len:
            raise ValueError(f"cannot receive into [{start}:{stop}] of {view.len} bytes")
        deadline = fio_monotonic_ms() + <long long>(timeout * 1000.0)
        with nogil:
            rc = fio_recv_exact(fd, <unsigned char *>view.buf, <size_t>stop, &filled, deadline,
                                arrived)
    finally:
        PyBuffer_Release(&view)
    if rc == -errno_module.ETIMEDOUT:
        raise TimeoutError(errno_module.ETIMEDOUT, "no answer in time")
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    return <Py_ssize_t>filled
