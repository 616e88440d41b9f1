/* bench/c/touch.c: write to N MiB of fresh anonymous memory, then free it.
 * On a virtual machine that hands free guest pages back to the host (free
 * page reporting), this makes the host back them again, so the next
 * allocations (the page cache's too) start from memory the host has
 * already mapped. Used by bench/read-copy.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: touch MIB\n");
		return 2;
	}
	size_t n = (size_t)atol(argv[1]) << 20;
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(p, 1, n);
	munmap(p, n);
	return 0;
}
