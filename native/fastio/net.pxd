# Receiving socket data without the GIL (netrecv.h).


cdef extern from "netrecv.h" nogil:
    int fio_recv_exact(int fd, unsigned char *buf, size_t want, size_t *filled,
                       long long deadline_ms, unsigned long long *arrived)
    unsigned long long fio_counter_load(const unsigned long long *counter)
    void fio_counter_add(unsigned long long *counter, unsigned long long amount)
    long long fio_monotonic_ms()
