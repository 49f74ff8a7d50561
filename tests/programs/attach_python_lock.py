"""Attach-mode fixture: four threads share one threading.Lock (a sem_t in
CPython) for SECONDS (argv[1]) seconds; prints `iterations N`."""
import sys
import threading
import time

stop = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 3)
lock = threading.Lock()
counts = []


def work():
    n = 0
    while time.time() < stop:
        with lock:
            x = 0
            for k in range(200):
                x += k
        n += 1
    counts.append(n)


ts = [threading.Thread(target=work) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("iterations", sum(counts))
