"""threading.Lock contention with known counts (CPython: a sem_t).

THREADS threads each take one threading.Lock ITERS times, with a little
work inside and outside; main holds it for 50 ms while they start, so
that each waits at least once. Prints `python-lock tid=T acquisitions=N` per
worker thread. Then main holds the lock while another thread's timed
acquire (`acquire(timeout=0.05)`: sem_clockwait) times out, once; prints
`python-lock-timeout tid=T timeouts=1`."""
import threading
import time

THREADS = 4
ITERS = 2500
lock = threading.Lock()
counter = 0
tids = []


def work():
    global counter
    tids.append(threading.get_native_id())
    for _ in range(ITERS):
        with lock:
            x = 0
            for k in range(40):
                x += k
            counter += 1
        for k in range(20):
            pass


threads = [threading.Thread(target=work) for _ in range(THREADS)]
# Held while the workers start: each of them waits for it at least once.
lock.acquire()
for t in threads:
    t.start()
time.sleep(0.05)
lock.release()
for t in threads:
    t.join()
assert counter == THREADS * ITERS
for tid in tids:
    print(f"python-lock tid={tid} acquisitions={ITERS}")


def timed():
    got = lock.acquire(timeout=0.05)
    assert not got
    print(f"python-lock-timeout tid={threading.get_native_id()} timeouts=1")


with lock:
    t = threading.Thread(target=timed)
    t.start()
    t.join()
