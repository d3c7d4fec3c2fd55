/* Reads a file with fopen and fread: glibc's stdio reads through its own internal read,
 * which no LD_PRELOAD library can interpose. With a second argument "fileno" it reads the
 * stream's descriptor with read(2): the shim lets a stream's descriptor pass. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static unsigned char buf[65536];

int main(int argc, char **argv)
{
	unsigned long sum = 0;
	size_t n;
	ssize_t got;
	FILE *f = argc >= 2 ? fopen(argv[1], "rb") : NULL;

	if (!f)
		return 2;
	if (argc == 3 && !strcmp(argv[2], "fileno")) {
		while ((got = read(fileno(f), buf, sizeof(buf))) > 0)
			for (ssize_t i = 0; i < got; i++)
				sum += buf[i];
		printf("%lu\n", sum);
		return got < 0 ? 2 : 0;
	}
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		for (size_t i = 0; i < n; i++)
			sum += buf[i];
	printf("%lu\n", sum);
	return 0;
}
