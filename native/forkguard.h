/*
 * A fork that cannot leave its child waiting for CPython's thread-state lock
 * (see forkguard.c). Linux, CPython 3.8 to 3.11; elsewhere nothing is done.
 */
#ifndef FASTIO_FORKGUARD_H
#define FASTIO_FORKGUARD_H

/* Registers the guard's fork handlers, once; 1 where the guard is in place,
 * 0 where it is not (another CPython, another system, FASTIO_FORK_GUARD=0, or
 * the lock not found). Call with the GIL held. */
int fio_fork_guard_install(void);

/* Whether the guard is in place. */
int fio_fork_guarded(void);

/* For tests: a thread of its own takes the thread-state lock, as a thread
 * that makes a thread state without the GIL does, and keeps it `seconds`.
 * Returns once the lock is taken: 0, or a negative errno (-ENOSYS where there
 * is no such lock to take). Call without the GIL. */
int fio_hold_thread_state_lock(double seconds);

#endif
