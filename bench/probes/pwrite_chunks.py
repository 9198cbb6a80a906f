"""What writing fresh file space costs on this machine by write size (the measurement behind `WRITE_CHUNK` in
crates/spirit/src/memory/persistent.rs): the page cache backs a write with folios up to its size.

    for c in 1048576 2097152; do sleep 20; python3 bench/probes/pwrite_chunks.py $c; done

Writes 512 MiB into a fallocated file in pwrites of the given size. On the 2-core benchmark VM (2026-12-06),
after 20 s idle: 0.09 s in 1 MiB writes, 0.13 s in 256 KiB, 5.3 s in 2 or 4 MiB writes.
"""
import os
import sys
import tempfile
import time

chunk = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
n = 512 << 20
fd, path = tempfile.mkstemp(prefix="spirit-probe-")
try:
    os.ftruncate(fd, n)
    os.posix_fallocate(fd, 0, n)
    buf = b"x" * chunk
    t, cpu = time.time(), time.process_time()
    for off in range(0, n, chunk):
        os.pwrite(fd, buf, off)
    print(f"{chunk >> 10} KiB writes: 512 MiB in {time.time() - t:.2f} s ({time.process_time() - cpu:.2f} s of CPU)")
finally:
    os.close(fd)
    os.unlink(path)
