"""Four Python threads computing at once: they take turns holding the
GIL, a lock CPython builds from a mutex and a condition variable (issue
10, item 6). Prints `truth-gil threads=4`."""
import threading


def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


ts = [threading.Thread(target=spin, args=(300000,)) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("truth-gil threads=4")
