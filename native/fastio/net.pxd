# Receiving socket data without the GIL (netrecv.h).


cdef extern from "netrecv.h" nogil:
    int fio_recv_exact(int fd, unsigned char *buf, size_t want, size_t *filled,
                       long long deadline_ms)
    long long fio_monotonic_ms()
