/*
 * rename_cycle.c - the open-write-fsync-close-rename cycle (after the
 * "Data Preservation, fsync, and Benchmarks" article).
 *
 * Usage: rename_cycle DIR CYCLES BYTES FSYNC [MAX_SECONDS]
 *
 * CYCLES times: open(DIR/foo.new, O_CREAT|O_TRUNC|O_WRONLY), write BYTES in
 * one write(2), fsync if FSYNC is 1, close, rename over DIR/foo; stopping
 * early once MAX_SECONDS (if given and not 0) have passed. Prints one JSON
 * object with the cycles done and the elapsed seconds.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: rename_cycle DIR CYCLES BYTES FSYNC [MAX_SECONDS]\n");
		return 2;
	}
	int cycles = atoi(argv[2]);
	size_t size = (size_t)atol(argv[3]);
	int do_fsync = atoi(argv[4]);
	double cap = argc == 6 ? atof(argv[5]) : 0;
	char *buf = calloc(size ? size : 1, 1);
	char oldpath[4096], newpath[4096];
	snprintf(oldpath, sizeof oldpath, "%s/foo", argv[1]);
	snprintf(newpath, sizeof newpath, "%s/foo.new", argv[1]);
	double t0 = now();
	int i;
	for (i = 0; i < cycles && !(cap > 0 && now() - t0 > cap); i++) {
		int fd = open(newpath, O_CREAT | O_TRUNC | O_WRONLY, 0700);
		if (fd < 0 || write(fd, buf, size) != (ssize_t)size || (do_fsync && fsync(fd)) ||
		    close(fd) || rename(newpath, oldpath)) {
			perror("rename_cycle");
			printf("{\"cycles\": %d, \"errors\": 1}\n", i);
			return 1;
		}
	}
	double secs = now() - t0;
	printf("{\"cycles\": %d, \"bytes\": %zu, \"fsync\": %d, \"seconds\": %.6f, \"errors\": 0}\n",
	       i, size, do_fsync, secs);
	return 0;
}
