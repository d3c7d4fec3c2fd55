/* Reads a file with fopen and fread: glibc's stdio reads through its own internal read,
 * which no LD_PRELOAD library can interpose. */
#include <stdio.h>

static unsigned char buf[65536];

int main(int argc, char **argv)
{
	unsigned long sum = 0;
	size_t n;
	FILE *f = argc == 2 ? fopen(argv[1], "rb") : NULL;

	if (!f)
		return 2;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		for (size_t i = 0; i < n; i++)
			sum += buf[i];
	printf("%lu\n", sum);
	return 0;
}
