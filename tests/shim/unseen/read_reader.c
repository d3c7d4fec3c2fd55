/* Reads a file with read(2) in 64 KiB calls: what the shim sees (the tests' control). Built
 * static it is also what the shim cannot see: no dynamic loader, no preload. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static unsigned char buf[65536];

int main(int argc, char **argv)
{
	unsigned long sum = 0;
	ssize_t n;
	int fd = argc == 2 ? open(argv[1], O_RDONLY) : -1;

	if (fd < 0)
		return 2;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			sum += buf[i];
	printf("%lu\n", sum);
	return n < 0 ? 2 : 0;
}
