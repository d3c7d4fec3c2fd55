/* Reads each file named whole with read(2), in the order given, and prints the bytes read.
 * With "--stat" first it fstats each file after opening it, as cat, grep and tar do (the
 * shim then learns the file from the program's own stat); without, it never stats one. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char buf[4096];
	long total = 0;
	int stat_first = argc > 1 && !strcmp(argv[1], "--stat");
	struct stat st;

	for (int i = 1 + stat_first; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		ssize_t n;

		if (fd < 0 || (stat_first && fstat(fd, &st) < 0))
			return 2;
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			total += n;
		close(fd);
	}
	printf("%ld\n", total);
	return 0;
}
