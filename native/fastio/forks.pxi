# The fork guard (see forkguard.c): registered when this module is imported,
# so that a DataLoader forking its workers later is guarded.
cdef extern from "forkguard.h":
    int fio_fork_guard_install()
    int fio_fork_guarded() nogil
    int fio_hold_thread_state_lock(double seconds) nogil

fio_fork_guard_install()


def fork_guarded():
    """Whether a fork in this process takes CPython's thread-state lock first
    (CPython 3.8 to 3.11 on Linux, unless ``FASTIO_FORK_GUARD=0``), so that no
    other thread holds it across the fork and the child starts."""
    return bool(fio_fork_guarded())


def _hold_thread_state_lock(double seconds):
    """For tests: a native thread takes CPython's thread-state lock and keeps
    it ``seconds``, as a thread making a thread state without the GIL does;
    returns once it holds it. Raises OSError where there is no such lock."""
    cdef int rc
    with nogil:
        rc = fio_hold_thread_state_lock(seconds)
    if rc < 0:
        raise OSError(-rc, "the thread-state lock cannot be held here")
