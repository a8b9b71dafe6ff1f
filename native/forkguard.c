/*
 * CPython before 3.12, in a forked child, takes the lock of the interpreter's
 * list of thread states (HEAD_LOCK, `_PyRuntime.interpreters.mutex`) before
 * it makes that lock anew (CPython issue gh-112275, fixed in 3.12). Where
 * another thread of the parent held it at the fork, the child waits for it
 * for ever as it starts. Threads take it without the GIL when they make a
 * thread state to call into Python: torch's gloo threads do so whenever they
 * drop a Python object as a collective completes, so a distributed job whose
 * DataLoader forks its workers at an epoch's start now and then starts a
 * worker that never runs, and the job waits on it. The guard takes the lock
 * in the forking thread right before fork() and lets it go right after, in
 * the parent and in the child: no other thread holds it across the fork.
 *
 * The lock is found at run time, not through CPython's internal headers
 * (their layout may change between patch releases): `_PyRuntime` begins
 * with a few flags, then {mutex, head, main} of its interpreters, where
 * `main` is what PyInterpreterState_Main() returns and `head` is `main` too
 * while there is no subinterpreter. Where that pattern is not there, nothing
 * is done.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "forkguard.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__linux__) && PY_VERSION_HEX >= 0x03080000 && PY_VERSION_HEX < 0x030C0000
#define FIO_FORK_GUARD 1
#endif

#ifdef FIO_FORK_GUARD

#define RUNTIME_WORDS 16 /* where in _PyRuntime the interpreters are looked for */

static int installed = -1;   /* -1: not tried yet */
static void **runtime_words; /* where _PyRuntime is, found once */
/* The lock taken for the fork in progress, by the thread that forks (the
 * child's one thread is its copy). */
static __thread PyThread_type_lock held;

/* The thread-state lock as the runtime holds it now (a child makes it anew
 * after a fork), or NULL. Needs no GIL, and no loader lock once the runtime
 * is found (it is, when the guard is installed, before any fork). */
static PyThread_type_lock head_lock(void)
{
    if (!runtime_words)
        runtime_words = dlsym(RTLD_DEFAULT, "_PyRuntime");
    void **words = runtime_words;
    void *main_interpreter = PyInterpreterState_Main();
    if (!words || !main_interpreter)
        return NULL;
    for (int i = 1; i + 1 < RUNTIME_WORDS; i++)
        if (words[i] == main_interpreter && words[i + 1] == main_interpreter)
            return (PyThread_type_lock)words[i - 1];
    return NULL;
}

static void before_fork(void)
{
    held = head_lock();
    if (held)
        PyThread_acquire_lock(held, WAIT_LOCK);
}

static void after_fork(void)
{
    if (held)
        PyThread_release_lock(held);
    held = NULL;
}

int fio_fork_guard_install(void)
{
    if (installed >= 0)
        return installed;
    const char *setting = getenv("FASTIO_FORK_GUARD");
    installed = 0;
    if (setting && strcmp(setting, "0") == 0)
        return installed;
    if (!head_lock())
        return installed;
    installed = pthread_atfork(before_fork, after_fork, after_fork) == 0;
    return installed;
}

int fio_fork_guarded(void)
{
    return installed > 0;
}

typedef struct {
    PyThread_type_lock lock;
    double seconds;
    pthread_mutex_t mutex;
    pthread_cond_t taken_cond;
    int taken;
    int users; /* the holding thread and the caller: the last one frees it */
} holding;

static void let_go(holding *h)
{
    pthread_mutex_lock(&h->mutex);
    int last = --h->users == 0;
    pthread_mutex_unlock(&h->mutex);
    if (last) {
        pthread_mutex_destroy(&h->mutex);
        pthread_cond_destroy(&h->taken_cond);
        free(h);
    }
}

static void *hold(void *argument)
{
    holding *h = argument;
    PyThread_acquire_lock(h->lock, WAIT_LOCK);
    pthread_mutex_lock(&h->mutex);
    h->taken = 1;
    pthread_cond_signal(&h->taken_cond);
    pthread_mutex_unlock(&h->mutex);
    struct timespec pause = {(time_t)h->seconds,
                             (long)((h->seconds - (double)(time_t)h->seconds) * 1e9)};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
        ;
    PyThread_release_lock(h->lock);
    let_go(h);
    return NULL;
}

int fio_hold_thread_state_lock(double seconds)
{
    PyThread_type_lock lock = head_lock();
    if (!lock)
        return -ENOSYS;
    holding *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->lock = lock;
    h->seconds = seconds > 0 ? seconds : 0;
    h->users = 2;
    pthread_mutex_init(&h->mutex, NULL);
    pthread_cond_init(&h->taken_cond, NULL);
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, hold, h);
    if (rc) {
        pthread_mutex_destroy(&h->mutex);
        pthread_cond_destroy(&h->taken_cond);
        free(h);
        return -rc;
    }
    pthread_detach(thread);
    pthread_mutex_lock(&h->mutex);
    while (!h->taken)
        pthread_cond_wait(&h->taken_cond, &h->mutex);
    pthread_mutex_unlock(&h->mutex);
    let_go(h);
    return 0;
}

#else

int fio_fork_guard_install(void)
{
    return 0;
}

int fio_fork_guarded(void)
{
    return 0;
}

int fio_hold_thread_state_lock(double seconds)
{
    (void)seconds;
    return -ENOSYS;
}

#endif
