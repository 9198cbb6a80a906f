// What a first touch of memory costs on this machine, in huge pages and in small ones (the measurement
// behind `HUGE_STEP_SLOW` in crates/spirit/src/memory/mapping.rs).
//
//   gcc -O2 -o /tmp/populate bench/probes/populate.c
//   sleep 20; /tmp/populate 1; /tmp/populate 0; /tmp/populate 1
//
// Maps 512 MiB of anonymous memory (2 MiB aligned), advises MADV_HUGEPAGE (argument 1) or MADV_NOHUGEPAGE
// (0), and faults it in with MADV_POPULATE_WRITE in 2 MiB steps, as spirit's populate thread does. On the
// 2-core benchmark VM (2026-12-06): huge pages 4.5-5.5 s after 20 s idle, 0.07-0.11 s right after another
// run; small pages 0.16-0.29 s either way.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int main(int argc, char **argv) {
    int huge = argc > 1 ? atoi(argv[1]) : 1;
    size_t len = 512ul << 20, step = 2ul << 20;
    char *raw = mmap(0, len + step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) { perror("mmap"); return 1; }
    char *p = (char *)(((unsigned long)raw + step - 1) & ~(step - 1));
    madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    struct timespec a, b, ca, cb;
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ca);
    for (size_t o = 0; o < len; o += step)
        if (madvise(p + o, step, MADV_POPULATE_WRITE)) { perror("madvise"); return 1; }
    clock_gettime(CLOCK_MONOTONIC, &b);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cb);
    printf("%s pages: 512 MiB populated in %.3f s (%.3f s of CPU)\n", huge ? "huge" : "small",
           (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9,
           (cb.tv_sec - ca.tv_sec) + (cb.tv_nsec - ca.tv_nsec) / 1e9);
    return 0;
}
