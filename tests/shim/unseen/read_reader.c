/* Reads a file with read(2) in 64 KiB calls: what the shim sees (the tests' control). Built
 * static it is also what the shim cannot see: no dynamic loader, no preload. With a second
 * argument it reads with O_DIRECT: "open" opens with it, "fcntl" sets it after the open. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

static unsigned char buf[65536] __attribute__((aligned(4096)));

int main(int argc, char **argv)
{
	unsigned long sum = 0;
	ssize_t n;
	const char *direct = argc == 3 ? argv[2] : "";
	int fd = argc >= 2 ? open(argv[1], O_RDONLY | (strcmp(direct, "open") ? 0 : O_DIRECT)) : -1;

	if (fd < 0)
		return 2;
	if (!strcmp(direct, "fcntl") && fcntl(fd, F_SETFL, O_DIRECT) < 0)
		return 3;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			sum += buf[i];
	printf("%lu\n", sum);
	return n < 0 ? 2 : 0;
}
