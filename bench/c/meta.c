/*
 * meta.c - metadata at scale.
 *
 * Usage: meta flat|tree DIR N PHASE [MAX_SECONDS]
 *
 *        meta flat DIR N create|stat|unlink
 *          N empty files DIR/fNNNNNNN in one directory: create (open
 *          O_CREAT|O_EXCL, close), stat each, or unlink each.
 *        meta tree DIR N create|read|delete
 *          N small files (1..4096 bytes) in a two-level tree, 100 files per
 *          leaf directory and 10 leaves per top directory: create (mkdir and
 *          write), read every file back whole, or delete files and dirs.
 *
 * With MAX_SECONDS (not 0) a phase (except a tree delete) stops early once
 * that much time has passed; later phases are then given the count actually
 * created.
 * Prints {"ops": N, "seconds": S, "errors": E}.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static size_t tree_size(long i)
{
	return (size_t)(((unsigned long)i * 2654435761u) % 4096) + 1;
}

static void tree_path(char *out, size_t cap, const char *dir, long i, int level)
{
	long leaf = i / 100, top = leaf / 10;
	if (level == 1)
		snprintf(out, cap, "%s/t%05ld", dir, top);
	else if (level == 2)
		snprintf(out, cap, "%s/t%05ld/l%03ld", dir, top, leaf % 10);
	else
		snprintf(out, cap, "%s/t%05ld/l%03ld/f%03ld", dir, top, leaf % 10, i % 100);
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: meta flat|tree DIR N PHASE [MAX_SECONDS]\n");
		return 2;
	}
	const char *kind = argv[1], *dir = argv[2], *phase = argv[4];
	long n = atol(argv[3]), ops = 0, errors = 0;
	double cap = argc == 6 ? atof(argv[5]) : 0;
	char path[4096];
	static char buf[4096];
	memset(buf, 0x61, sizeof buf);
	int flat = !strcmp(kind, "flat");
	double t0 = now();
	for (long i = 0; i < n; i++) {
		/* a tree delete always finishes, so its directories can go */
		if (cap > 0 && (i & 63) == 0 && now() - t0 > cap && (flat || strcmp(phase, "delete")))
			break;
		if (flat) {
			snprintf(path, sizeof path, "%s/f%07ld", dir, i);
			if (!strcmp(phase, "create")) {
				int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
				errors += fd < 0 || close(fd);
			} else if (!strcmp(phase, "stat")) {
				struct stat st;
				errors += stat(path, &st) != 0;
			} else if (!strcmp(phase, "unlink")) {
				errors += unlink(path) != 0;
			} else {
				fprintf(stderr, "meta: unknown phase %s\n", phase);
				return 2;
			}
			ops++;
			continue;
		}
		if (!strcmp(phase, "create")) {
			if (i % 1000 == 0) {
				tree_path(path, sizeof path, dir, i, 1);
				errors += mkdir(path, 0755) != 0;
			}
			if (i % 100 == 0) {
				tree_path(path, sizeof path, dir, i, 2);
				errors += mkdir(path, 0755) != 0;
			}
			tree_path(path, sizeof path, dir, i, 3);
			int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
			size_t sz = tree_size(i);
			errors += fd < 0 || write(fd, buf, sz) != (ssize_t)sz || close(fd);
		} else if (!strcmp(phase, "read")) {
			tree_path(path, sizeof path, dir, i, 3);
			int fd = open(path, O_RDONLY);
			errors += fd < 0 || read(fd, buf, sizeof buf) != (ssize_t)tree_size(i) || close(fd);
		} else if (!strcmp(phase, "delete")) {
			tree_path(path, sizeof path, dir, i, 3);
			errors += unlink(path) != 0;
			if (i % 100 == 99 || i == n - 1) {
				tree_path(path, sizeof path, dir, i, 2);
				errors += rmdir(path) != 0;
			}
			if (i % 1000 == 999 || i == n - 1) {
				tree_path(path, sizeof path, dir, i, 1);
				errors += rmdir(path) != 0;
			}
		} else {
			fprintf(stderr, "meta: unknown phase %s\n", phase);
			return 2;
		}
		ops++;
	}
	printf("{\"ops\": %ld, \"seconds\": %.6f, \"errors\": %ld}\n", ops, now() - t0, errors);
	return errors ? 1 : 0;
}
