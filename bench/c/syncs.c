/*
 * syncs.c - parallel small fsyncs (after the "How fast can we fsync?" test).
 *
 * Usage: syncs DIR TASKS STEPS [CAP]
 *
 * Forks TASKS processes. Each creates DIR/syncsN, then waits at a barrier
 * (a pipe the parent closes once every task is ready); after the barrier
 * each task appends 1 KiB and fsyncs, STEPS times, or until CAP seconds
 * after the barrier (0 or absent: no cap). The time is from the barrier's
 * release to the last task's exit; `fsyncs` counts the fsyncs done. Prints one JSON object:
 * seconds, fsyncs, errors and per-fsync latency percentiles (microseconds,
 * from a sample of every task's fsyncs kept in shared memory).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SAMPLES_PER_TASK 16

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: syncs DIR TASKS STEPS [CAP]\n");
		return 2;
	}
	const char *dir = argv[1];
	int tasks = atoi(argv[2]), steps = atoi(argv[3]);
	double cap = argc == 5 ? atof(argv[4]) : 0;
	int ready[2], go[2];
	if (tasks < 1 || steps < 1 || pipe(ready) || pipe(go)) {
		perror("syncs: setup");
		return 2;
	}
	int keep = steps < SAMPLES_PER_TASK ? steps : SAMPLES_PER_TASK;
	size_t nlat = (size_t)tasks * keep;
	float *lat = mmap(NULL, nlat * sizeof(float) + 2 * sizeof(long) + sizeof(double),
			  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (lat == MAP_FAILED) {
		perror("syncs: mmap");
		return 2;
	}
	for (size_t i = 0; i < nlat; i++)
		lat[i] = -1; /* not sampled */
	long *errors = (long *)(lat + nlat), *done = errors + 1;
	double *start = (double *)(done + 1);
	static char text[1024] = "hello world!\n";
	int forked = 0;
	for (int t = 0; t < tasks; t++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("syncs: fork");
			break;
		}
		if (pid == 0) {
			char name[4096], c;
			close(ready[0]);
			close(go[1]);
			snprintf(name, sizeof name, "%s/syncs%d", dir, t);
			int fd = open(name, O_CREAT | O_TRUNC | O_WRONLY, 0644);
			if (write(ready[1], "r", 1) != 1)
				_exit(3);
			close(ready[1]);
			if (read(go[0], &c, 1) < 0)
				_exit(3);
			if (fd < 0) {
				__sync_fetch_and_add(errors, 1);
				_exit(1);
			}
			for (int i = 0; i < steps; i++) {
				double t0 = now();
				if (cap > 0 && t0 > *start + cap)
					break;
				if (write(fd, text, sizeof text) != sizeof text || fsync(fd)) {
					__sync_fetch_and_add(errors, 1);
					_exit(1);
				}
				__sync_fetch_and_add(done, 1);
				/* keep the last `keep` latencies of this task */
				int slot = i % keep;
				lat[(size_t)t * keep + slot] = (float)((now() - t0) * 1e6);
			}
			_exit(0);
		}
		forked++;
	}
	close(ready[1]);
	close(go[0]);
	/* barrier: every child has opened its file */
	char c;
	for (int n = 0; n < forked; n++)
		if (read(ready[0], &c, 1) != 1)
			break;
	double t0 = now();
	*start = t0;
	close(go[1]);
	int status, failed = 0;
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			failed++;
	double secs = now() - t0;
	size_t n = 0;
	for (size_t i = 0; i < (size_t)forked * keep; i++)
		if (lat[i] >= 0)
			lat[n++] = lat[i];
	qsort(lat, n, sizeof(float), cmp);
	double p50 = n ? lat[n / 2] : 0, p99 = n ? lat[(size_t)(n * 0.99)] : 0, mx = n ? lat[n - 1] : 0;
	printf("{\"tasks\": %d, \"steps\": %d, \"seconds\": %.6f, \"fsyncs\": %ld, \"capped\": %d, "
	       "\"errors\": %ld, \"lat_p50_us\": %.1f, \"lat_p99_us\": %.1f, \"lat_max_us\": %.1f}\n",
	       tasks, steps, secs, *done, *done < (long)tasks * steps, *errors + failed + (tasks - forked),
	       p50, p99, mx);
	return forked == tasks && !failed ? 0 : 1;
}
