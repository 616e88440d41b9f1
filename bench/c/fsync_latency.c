/*
 * fsync_latency.c - fsync latency of a small file, optionally under a
 * background stream of buffered writes (after the I/O-stack study's
 * data=ordered pathology).
 *
 * Usage: fsync_latency writer FILE MAXBYTES SECONDS
 *          Buffered 1 MiB writes to FILE, never fsynced; every 32 MiB it
 *          starts (does not wait for) writeback of what it just wrote with
 *          sync_file_range(SYNC_FILE_RANGE_WRITE), so the device is busy
 *          whatever the machine's dirty limits; after MAXBYTES it starts
 *          again at offset 0 (the stream keeps going); stops after SECONDS.
 *          Prints {"bytes": N, "seconds": S}.
 *        fsync_latency probe FILE SECONDS INTERVAL_MS
 *          Every INTERVAL_MS: append 4 KiB to FILE and fsync it, timing the
 *          write+fsync. Prints {"samples": N, "lat_ms": [...]}.
 *        fsync_latency probe FILE SECONDS INTERVAL_MS t
 *          The same, also printing "t": [...], each sample's start on
 *          CLOCK_MONOTONIC in seconds; SIGTERM or SIGINT ends it early
 *          (it still prints what it has).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int writer(const char *path, long long max, double secs)
{
	size_t chunk = 1 << 20;
	char *buf = malloc(chunk);
	memset(buf, 0x5a, chunk);
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	if (fd < 0) {
		perror("writer: open");
		return 1;
	}
	long long off = 0, total = 0;
	double t0 = now();
	while (now() - t0 < secs) {
		if (off + (long long)chunk > max)
			off = 0;
		ssize_t n = pwrite(fd, buf, chunk, off);
		if (n <= 0) {
			perror("writer: pwrite");
			break;
		}
		off += n;
		total += n;
		if (off % (32LL << 20) == 0)
			sync_file_range(fd, off - (32LL << 20), 32LL << 20, SYNC_FILE_RANGE_WRITE);
	}
	printf("{\"bytes\": %lld, \"seconds\": %.3f}\n", total, now() - t0);
	close(fd);
	return 0;
}

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static int probe(const char *path, double secs, int interval_ms, int stamps)
{
	char buf[4096];
	memset(buf, 0x33, sizeof buf);
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	if (fd < 0) {
		perror("probe: open");
		return 1;
	}
	size_t cap = (size_t)(secs * 1000 / interval_ms) + 16, n = 0;
	double *lat = malloc(cap * sizeof(double));
	double *at = malloc(cap * sizeof(double));
	double t0 = now(), next = t0;
	int errors = 0;
	if (stamps) {
		struct sigaction sa = {0};
		sa.sa_handler = on_stop;
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
	}
	while (!stop && now() - t0 < secs && n < cap) {
		double a = now();
		at[n] = a;
		if (write(fd, buf, sizeof buf) != sizeof buf || fsync(fd))
			errors++;
		lat[n++] = (now() - a) * 1e3;
		next += interval_ms / 1e3;
		double wait = next - now();
		if (wait > 0) {
			struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
			nanosleep(&ts, NULL);
		} else {
			next = now();
		}
	}
	printf("{\"samples\": %zu, \"errors\": %d, \"lat_ms\": [", n, errors);
	for (size_t i = 0; i < n; i++)
		printf("%s%.3f", i ? ", " : "", lat[i]);
	if (stamps) {
		printf("], \"t\": [");
		for (size_t i = 0; i < n; i++)
			printf("%s%.6f", i ? ", " : "", at[i]);
	}
	printf("]}\n");
	close(fd);
	return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "writer"))
		return writer(argv[2], atoll(argv[3]), atof(argv[4]));
	if ((argc == 5 || (argc == 6 && !strcmp(argv[5], "t"))) && !strcmp(argv[1], "probe"))
		return probe(argv[2], atof(argv[3]), atoi(argv[4]), argc == 6);
	fprintf(stderr, "usage: fsync_latency writer FILE MAXBYTES SECONDS\n"
			"       fsync_latency probe FILE SECONDS INTERVAL_MS [t]\n");
	return 2;
}
